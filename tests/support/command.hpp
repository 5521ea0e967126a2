#pragma once
// A command run through the shell as a user would run it, its exit code,
// stdout and stderr captured (through files, so a large output cannot block).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ft::testing {

struct CommandResult {
  int code;  // the exit status; -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `dir` holds the captured output as <name>.out and <name>.err.
inline CommandResult run_command(const std::string& command, const std::filesystem::path& dir,
                                 const std::string& name = "command") {
  std::filesystem::create_directories(dir);
  const std::filesystem::path out = dir / (name + ".out"), err = dir / (name + ".err");
  const int status = std::system((command + " >" + out.string() + " 2>" + err.string()).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace ft::testing
