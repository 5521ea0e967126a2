#pragma once
// A one-line progress bar on stderr for long work, redrawn in place when
// stderr is a terminal and silent otherwise (logs and pipes get the final
// summary only, not a stream of carriage returns).
#include <unistd.h>

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

  void update(long done, const std::string& status = {}) {
    if (!active_) return;
    constexpr int width = 30;
    int filled = total_ > 0 ? int(double(done) / double(total_) * width) : width;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r%s [%s%s] %ld/%ld %.1fs %s\033[K", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total_, seconds, status.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

private:
  std::string label_;
  long total_;
  bool active_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ft
