#pragma once
#include <string>
#include <vector>

namespace ftrun {

// A host an MPI hostfile names ("host slots=N", '#' starts a comment), with its line.
struct HostfileEntry {
  int line = 0;
  std::string host;
};

// The hosts of `file`, in its order; none when it cannot be read.
std::vector<HostfileEntry> hostfile_hosts(const std::string& file);

}  // namespace ftrun
