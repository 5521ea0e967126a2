#include "atomic_file.hpp"

#include <fstream>
#include <system_error>

#include <ft/core/error.hpp>

namespace ftrun {

void write_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    if (!out.flush()) throw ft::Error(temporary.string() + ": cannot be written");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw ft::Error(path.string() + ": cannot be replaced: " + ec.message());
}

}  // namespace ftrun
