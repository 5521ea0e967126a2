#include "child_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include <ft/core/error.hpp>

namespace ftrun {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void become(const std::vector<char*>& argv, const char* out, const char* err) {
  ::setpgid(0, 0);                     // its own group, so a time-out ends everything it started
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it does not outlive a killed parent
  const int o = ::open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = ::open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (o < 0 || e < 0) ::_exit(127);
  ::dup2(o, STDOUT_FILENO);
  ::dup2(e, STDERR_FILENO);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace

ChildResult run_child(const std::vector<std::string>& argv, const std::filesystem::path& stdout_file,
                      const std::filesystem::path& stderr_file, double timeout_seconds) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string out = stdout_file.string(), err = stderr_file.string();
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw ft::Error("cannot start " + argv[0] + ": fork failed");
  if (pid == 0) become(args, out.c_str(), err.c_str());
  ::setpgid(pid, pid);  // also here, so the group exists before a time-out can signal it

  ChildResult result;
  int status = 0;
  auto end_group = [&](int signal) { ::kill(-pid, signal); };
  constexpr double grace_seconds = 10;  // between SIGTERM and SIGKILL, for a group that ignores the first
  bool killed = false;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    const double seconds = seconds_since(start);
    if (timeout_seconds > 0 && !result.timed_out && seconds > timeout_seconds) {
      result.timed_out = true;
      end_group(SIGTERM);
    }
    if (result.timed_out && !killed && seconds > timeout_seconds + grace_seconds) {
      killed = true;
      end_group(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  end_group(SIGKILL);  // ranks an mpirun left behind
  result.seconds = seconds_since(start);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string last_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace ftrun
