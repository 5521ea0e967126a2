#pragma once
// A one-line progress bar on stderr for long work, redrawn in place when
// stderr is a terminal and silent otherwise (logs and pipes get the final
// summary only, not a stream of carriage returns). It shows the time spent
// and the time left, "0:12<0:45", as tqdm does.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace ft {

class Progress {
public:
  Progress(std::string label, long total)
      : label_(std::move(label)), total_(total), active_(::isatty(STDERR_FILENO) != 0),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() { finish(); }

  // `done` out of the total; the first call sets where this process began
  // (a resumed run), so the time left comes from the pace since then.
  void update(long done, const std::string& status = {}) {
    if (!active_) return;
    constexpr int width = 30;
    const auto now = std::chrono::steady_clock::now();
    if (first_done_ < 0) {
      first_done_ = done;
      first_at_ = now;
    }
    const int filled = total_ > 0 ? int(double(std::min(done, total_)) / double(total_) * width) : width;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::string left = "?";
    if (done > first_done_) {
      const double pace = std::chrono::duration<double>(now - first_at_).count() / double(done - first_done_);
      left = clock_text(pace * double(std::max(0L, total_ - done)));
    }
    std::fprintf(stderr, "\r%s [%s%s] %ld/%ld %s<%s %s\033[K", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total_, clock_text(seconds).c_str(), left.c_str(),
                 status.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

  // 0:07, 12:34, 1:02:03: elapsed and remaining time as tqdm shows them.
  static std::string clock_text(double seconds) {
    const long s = long(seconds + 0.5);
    char buffer[32];
    if (s >= 3600) std::snprintf(buffer, sizeof buffer, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else std::snprintf(buffer, sizeof buffer, "%ld:%02ld", s / 60, s % 60);
    return buffer;
  }

private:
  std::string label_;
  long total_;
  bool active_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  long first_done_ = -1;
  std::chrono::steady_clock::time_point first_at_;
};

}  // namespace ft
