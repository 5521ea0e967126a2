#include "child_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include <ft/core/error.hpp>

namespace ftrun {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void become(const std::vector<char*>& argv, const char* out, const char* err, pid_t parent) {
  ::setpgid(0, 0);                     // its own group, so a time-out ends everything it started
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it does not outlive a killed parent
  if (::getppid() != parent) ::_exit(127);  // the parent died before the line above
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int o = ::open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int e = ::open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || o < 0 || e < 0) ::_exit(127);
  ::dup2(in, STDIN_FILENO);
  ::dup2(o, STDOUT_FILENO);
  ::dup2(e, STDERR_FILENO);
  ::close_range(3, ~0U, 0);  // the bench's own files (results.jsonl) are not the run's
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

// The processes whose parent is this one: with PR_SET_CHILD_SUBREAPER, the
// orphans of a finished child (mpirun's ranks live in process groups of
// their own, so a group kill misses them).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(pid_t(std::stol(name)));
  }
  return out;
}

// Ends and reaps every process left behind by a finished child.
void end_orphans() {
  for (int round = 0; round < 50; ++round) {
    const std::vector<pid_t> left = children_of(::getpid());
    if (left.empty()) return;
    for (pid_t p : left) ::kill(p, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

ChildResult run_child(const std::vector<std::string>& argv, const std::filesystem::path& stdout_file,
                      const std::filesystem::path& stderr_file, double timeout_seconds) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // what the child leaves behind becomes ours to end
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string out = stdout_file.string(), err = stderr_file.string();
  const auto start = std::chrono::steady_clock::now();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw ft::Error("cannot start " + argv[0] + ": fork failed");
  if (pid == 0) become(args, out.c_str(), err.c_str(), parent);
  ::setpgid(pid, pid);  // also here, so the group exists before a time-out can signal it

  ChildResult result;
  constexpr double grace_seconds = 10;  // between SIGTERM and SIGKILL, for a group that ignores the first
  bool killed = false;
  siginfo_t info{};
  for (;;) {
    // Exited, but not reaped: its pid and group cannot be reused while it is a zombie.
    info.si_pid = 0;
    if (::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno != EINTR) break;
    if (info.si_pid == pid) break;
    const double seconds = seconds_since(start);
    if (timeout_seconds > 0 && !result.timed_out && seconds > timeout_seconds) {
      result.timed_out = true;
      ::kill(-pid, SIGTERM);
    }
    if (result.timed_out && !killed && seconds > timeout_seconds + grace_seconds) {
      killed = true;
      ::kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);  // what is left of its group
  int status = 0;
  ::waitpid(pid, &status, 0);
  end_orphans();
  result.seconds = seconds_since(start);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string error_line(const std::filesystem::path& file, const std::string& prefix) {
  std::ifstream in(file);
  std::string line, last, marked;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    if (line.rfind(prefix, 0) == 0) marked = line;
  }
  return marked.empty() ? last : marked;
}

}  // namespace ftrun
