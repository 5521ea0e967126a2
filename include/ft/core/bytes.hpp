#pragma once
// Sizes as people write them: "5GB" (10^9), "500MB", "2GiB" (2^30), or a
// plain byte count, as HF's max_shard_size and DeepSpeed's tables read; and
// sizes as ft prints them.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "ft/core/error.hpp"

namespace ft {

// The byte count `text` means, or nothing when it is not a size.
inline std::optional<std::uint64_t> parse_bytes(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  static const std::map<std::string, double> units{
      {"", 1},          {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
      {"GB", 1e9},      {"TB", 1e12},       {"KiB", 1024.0},       {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  const auto unit = units.find(text.substr(digits));
  if (digits == 0 || unit == units.end()) return std::nullopt;
  try {
    const double value = std::stod(text.substr(0, digits)) * unit->second;
    if (!(value >= 1)) return std::nullopt;
    return std::uint64_t(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "3.05 GiB", "81.8 MiB", "56.0 KiB": a size as a table or a message shows it.
inline std::string format_bytes(std::uint64_t bytes) {
  char text[32];
  const double b = double(bytes);
  if (b >= double(1ull << 30)) std::snprintf(text, sizeof text, "%.2f GiB", b / double(1ull << 30));
  else if (b >= double(1ull << 20)) std::snprintf(text, sizeof text, "%.1f MiB", b / double(1ull << 20));
  else std::snprintf(text, sizeof text, "%.1f KiB", b / 1024.0);
  return text;
}

}  // namespace ft
