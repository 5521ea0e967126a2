#pragma once
// Fingerprints that tell whether two runs saw the same inputs: FNV-1a (64
// bit) over bytes, written as 16 hex digits. Not a cryptographic hash: it
// guards against mistakes (a changed tokenizer, an edited data file), not
// against tampering.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace ft {

inline std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline std::string hex64(std::uint64_t x) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", (unsigned long long)x);
  return buffer;
}

// The fingerprint of a file's bytes; "" when it does not exist.
inline std::string file_fingerprint(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  return hex64(fnv1a(bytes));
}

}  // namespace ft
