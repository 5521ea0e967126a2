#pragma once
// Files for tests that feed readers damaged or hand-built input: a temporary
// directory removed at the end of its scope, whole-file reads and writes, and
// the one-line message of the ft::Error a call throws.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <ft/core/error.hpp>

namespace ft::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "ft_test") {
    static std::atomic<int> counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

// The message of the ft::Error that f throws, checked to be one line.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  return "<no error>";
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace ft::testing
