#include "hostfile.hpp"

#include <fstream>
#include <sstream>

namespace ftrun {

std::vector<HostfileEntry> hostfile_hosts(const std::string& file) {
  std::vector<HostfileEntry> hosts;
  std::ifstream in(file);
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    std::istringstream words(text.substr(0, text.find('#')));
    if (std::string host; words >> host) hosts.push_back({number, host});
  }
  return hosts;
}

}  // namespace ftrun
