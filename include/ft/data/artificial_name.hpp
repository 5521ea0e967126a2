#pragma once
// The name of an artificial dataset (data/artificial.hpp) and what it
// says: kept apart from the generator, so that a recipe can check a name
// without the dataset code.
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

namespace ft::data {

inline constexpr std::string_view artificial_prefix = "artificial:";

struct ArtificialSpec {
  bool tokens = false;  // token ids, or characters of text
  std::int64_t length = 0, entries = 0;
};

// The spec of an artificial dataset's name (without the "artificial:" prefix); nullopt when it is not one.
// Counts take the suffixes of ado's SFTTrainer actuator: k (x 1024) and m (x 1024^2), as in
// "news-tokens-128kplus-entries-320" (rows of 128 x 1024 tokens).
inline std::optional<ArtificialSpec> parse_artificial(std::string_view name) {
  static const std::regex pattern(
      R"(^(?:[a-z0-9]+-)?(chars|tokens)-([0-9]{1,9})([km]?)(plus)?-entries-([0-9]{1,9})([km]?)$)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_match(name.begin(), name.end(), m, pattern)) return std::nullopt;
  const auto count = [](const auto& digits, const auto& suffix) {
    const std::int64_t scale = suffix == "k" ? 1024 : suffix == "m" ? 1024 * 1024 : 1;
    return std::stoll(digits.str()) * scale;
  };
  ArtificialSpec s{m[1] == "tokens", count(m[2], m[3]), count(m[5], m[6])};
  if (s.length < 1 || s.entries < 1) return std::nullopt;
  return s;
}

inline const char* artificial_names_allowed() {
  return "artificial:[<word>-]chars-<N>-entries-<M> or artificial:[<word>-]tokens-<N>[plus]-entries-<M>, "
         "counts with an optional k (x 1024) or m (x 1024^2), e.g. artificial:news-chars-512-entries-4096 or "
         "artificial:news-tokens-128kplus-entries-320";
}

}  // namespace ft::data
