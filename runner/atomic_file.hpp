#pragma once
#include <filesystem>
#include <string>

namespace ftrun {

// Writes `text` to `path` through a temporary file beside it and a rename,
// so that a reader never sees half of it. Throws ft::Error when it cannot.
void write_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace ftrun
