#pragma once
// A command run as its own process, as a benchmark point must be: its
// output to files, stdin from /dev/null, a time limit after which its
// process group is ended, and nothing left behind: the caller becomes a
// subreaper, so processes the child orphaned (mpirun's ranks, each in a
// group of its own) come back to it and are ended when the child ends; the
// child dies with a killed caller (and an mpirun's ranks die with it, see
// comm/world.hpp).
#include <filesystem>
#include <string>
#include <vector>

namespace ftrun {

struct ChildResult {
  int exit_code = -1;  // -1 when it did not exit by itself
  int signal = 0;      // the signal that ended it, if one did
  bool timed_out = false;
  double seconds = 0;
};

// `timeout_seconds` <= 0: no limit.
ChildResult run_child(const std::vector<std::string>& argv, const std::filesystem::path& stdout_file,
                      const std::filesystem::path& stderr_file, double timeout_seconds);

// A failed run's one-line error: the last line of `file` that starts with
// `prefix` ("ftrun:"), else its last non-empty line (mpirun's own lines end
// a failed job's stderr).
std::string error_line(const std::filesystem::path& file, const std::string& prefix);

}  // namespace ftrun
