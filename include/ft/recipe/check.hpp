#pragma once
// A Check is what a recipe key accepts. It answers two questions: does this
// value pass (and if not, why not, in a few words), and what is allowed, in
// words a user can act on. Both go into the one-line error a bad recipe gets,
// and `allowed` also documents the key in `ftrun train --dry-run` output.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/bytes.hpp"
#include "ft/data/artificial_name.hpp"

namespace ft::recipe {

// A table of names to values (PEFT's rank_pattern, alpha_pattern), in the
// names' order: a TOML table has no other.
template <class V>
using NamedValues = std::vector<std::pair<std::string, V>>;

template <class T>
struct Check {
  // Returns the reason a value is refused, or nothing when it passes.
  std::function<std::optional<std::string>(const T&)> refuse = [](const T&) {
    return std::optional<std::string>{};
  };
  std::string allowed;  // empty: any value of the type
};

namespace detail {
template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, std::string>)
    os << '"' << v << '"';
  else
    os << v;
  return os.str();
}
template <class T>
std::string kind_of() {
  if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else
    return "an integer";
}
}  // namespace detail

// A NamedValues whose names are regular expressions (PEFT's patterns) and
// whose values each pass `value`.
template <class V>
Check<NamedValues<V>> patterns_of(Check<V> value) {
  return {[value](const NamedValues<V>& items) -> std::optional<std::string> {
            for (const auto& [name, v] : items) {
              try {
                std::regex check(name);
              } catch (const std::regex_error&) {
                return "\"" + name + "\" is not a regular expression";
              }
              if (auto why = value.refuse(v)) return "\"" + name + "\": " + *why;
            }
            return {};
          },
          "a table of regular expressions over module names to " + value.allowed};
}

template <class T>
Check<T> at_least(T lo) {
  return {[lo](const T& v) -> std::optional<std::string> {
            if (v >= lo) return {};
            return detail::show(v) + " is too small";
          },
          detail::kind_of<T>() + " >= " + detail::show(lo)};
}

template <class T>
Check<T> greater_than(T lo) {
  return {[lo](const T& v) -> std::optional<std::string> {
            if (v > lo && !std::isnan(static_cast<double>(v))) return {};
            return detail::show(v) + " is too small";
          },
          detail::kind_of<T>() + " > " + detail::show(lo)};
}

template <class T>
Check<T> between(T lo, T hi) {
  return {[lo, hi](const T& v) -> std::optional<std::string> {
            if (v >= lo && v <= hi) return {};
            return detail::show(v) + " is out of range";
          },
          detail::kind_of<T>() + " from " + detail::show(lo) + " to " + detail::show(hi)};
}

// -1 (meaning "not set") or at least `lo`.
template <class T>
Check<T> unset_or_at_least(T lo) {
  return {[lo](const T& v) -> std::optional<std::string> {
            if (v == -1 || v >= lo) return {};
            return detail::show(v) + " is out of range";
          },
          "-1 (not set) or " + detail::kind_of<T>() + " >= " + detail::show(lo)};
}

// "" (unset) or a size: "24GB", "512MiB", a byte count (core/bytes.hpp).
inline Check<std::string> byte_size_or_empty() {
  return {[](const std::string& v) -> std::optional<std::string> {
            if (v.empty() || parse_bytes(v)) return {};
            return detail::show(v) + " is not a size";
          },
          "\"\" or a size such as 24GB, 512MiB or a byte count"};
}

// "" (every device) or CUDA_VISIBLE_DEVICES' list: indices or GPU-/MIG- UUIDs, separated by commas.
inline Check<std::string> device_list_or_empty() {
  return {[](const std::string& v) -> std::optional<std::string> {
            if (v.empty()) return {};
            std::stringstream in(v);
            for (std::string item; std::getline(in, item, ',');) {
              const bool index = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
              const bool uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
              if (!index && !uuid)
                return v.find(',') == std::string::npos ? detail::show(v) + " is not a device"
                                                         : detail::show(v) + " has \"" + item + "\", which is not a device";
            }
            if (v.back() == ',') return detail::show(v) + " ends with a comma";
            return {};
          },
          "\"\" (every device) or devices as CUDA_VISIBLE_DEVICES lists them: \"0,1,3\" or GPU-/MIG- UUIDs"};
}

inline Check<std::string> one_of(std::initializer_list<std::string_view> choices) {
  std::vector<std::string> list(choices.begin(), choices.end());
  std::string allowed = "one of";
  for (std::size_t i = 0; i < list.size(); ++i) allowed += (i ? ", " : " ") + list[i];
  return {[list](const std::string& v) -> std::optional<std::string> {
            if (std::find(list.begin(), list.end(), v) != list.end()) return {};
            return detail::show(v) + " is not a choice";
          },
          allowed};
}

// A policy name: lower-case letters, digits, '-' and '_'. Which names exist is
// decided by the installed plugins, not here.
inline Check<std::string> policy_name() {
  return {[](const std::string& v) -> std::optional<std::string> {
            bool ok = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
            });
            if (ok) return {};
            return detail::show(v) + " is not a policy name";
          },
          "a name that `ftrun plugins` lists"};
}

inline Check<std::string> not_empty(std::string what) {
  return {[](const std::string& v) -> std::optional<std::string> {
            if (!v.empty()) return {};
            return "must not be empty";
          },
          std::move(what)};
}

// An existing directory; with `must_contain`, one that holds that file.
inline Check<std::string> existing_directory(std::string what, std::string must_contain = "") {
  return {[must_contain](const std::string& v) -> std::optional<std::string> {
            namespace fs = std::filesystem;
            std::error_code ec;
            if (v.empty()) return "must be set";
            if (!fs::is_directory(v, ec)) return "no such directory: " + v;
            if (!must_contain.empty() && !fs::is_regular_file(fs::path(v) / must_contain, ec))
              return "directory " + v + " has no " + must_contain;
            return {};
          },
          std::move(what)};
}

// An existing regular file, or the empty string when `optional`.
inline Check<std::string> existing_file(std::string what, bool optional = false) {
  return {[optional](const std::string& v) -> std::optional<std::string> {
            std::error_code ec;
            if (v.empty()) {
              if (optional) return {};
              return "must be set";
            }
            if (!std::filesystem::is_regular_file(v, ec)) return "no such file: " + v;
            return {};
          },
          std::move(what) + (optional ? " (or \"\" for none)" : "")};
}

// A dataset: an existing file, or an artificial dataset's name (ft/data/artificial.hpp).
inline Check<std::string> dataset_source(bool optional = false) {
  return {[optional](const std::string& v) -> std::optional<std::string> {
            std::error_code ec;
            if (v.empty()) {
              if (optional) return {};
              return "must be set";
            }
            if (v.starts_with(data::artificial_prefix)) {
              if (data::parse_artificial(std::string_view(v).substr(data::artificial_prefix.size()))) return {};
              return "\"" + v + "\" is not an artificial dataset name";
            }
            if (!std::filesystem::is_regular_file(v, ec)) return "no such file: " + v;
            return {};
          },
          std::string("a JSONL or JSON file, or ") + data::artificial_names_allowed() +
              (optional ? " (or \"\" for none)" : "")};
}

}  // namespace ft::recipe
