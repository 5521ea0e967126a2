#pragma once
// A position inside a parsed tokenizer.json: the value, the path that leads to
// it ("model.merges[3]") and the file it came from. Every structural problem
// therefore becomes one line that names the file, the path and what was
// expected, and the component readers stay free of error plumbing. Components
// nest (a Sequence of Sequences...) and are read recursively, so the depth is
// bounded: a crafted file cannot exhaust the stack.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"

namespace ft::text::tokenization {

// A value as JSON on one line, shortened; used to quote file content in messages.
inline std::string dump(const nlohmann::json& v, std::size_t max_chars = 60) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) {
    std::size_t cut = max_chars - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep whole characters
    s = s.substr(0, cut) + "...";
  }
  return s;
}
inline std::string quote(std::string_view text) { return dump(nlohmann::json(std::string(text))); }

class JsonNode {
public:
  JsonNode(const nlohmann::json& value, std::string path, const std::string& origin)
      : value_(&value), path_(std::move(path)), origin_(&origin) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& origin() const { return *origin_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(*origin_ + ": " + (path_.empty() ? std::string("top level") : path_) + ": " + what);
  }

  bool is_null() const { return value_->is_null(); }

  // A member that must be present (null counts as present).
  JsonNode at(std::string_view key) const {
    expect_object();
    auto it = value_->find(key);
    if (it == value_->end()) fail("missing required field \"" + std::string(key) + "\"");
    return child(*it, key);
  }
  // A member that may be absent or null.
  std::optional<JsonNode> find(std::string_view key) const {
    expect_object();
    auto it = value_->find(key);
    if (it == value_->end() || it->is_null()) return std::nullopt;
    return child(*it, key);
  }
  JsonNode operator[](std::size_t i) const {
    return deeper(JsonNode((*value_)[i], path_ + "[" + std::to_string(i) + "]", *origin_));
  }

  std::size_t array_size() const {
    if (!value_->is_array()) fail(expected("a list"));
    return value_->size();
  }
  void expect_object() const {
    if (!value_->is_object()) fail(expected("an object"));
  }
  std::string string() const {
    if (!value_->is_string()) fail(expected("a string"));
    return value_->get<std::string>();
  }
  bool boolean() const {
    if (!value_->is_boolean()) fail(expected("true or false"));
    return value_->get<bool>();
  }
  std::int64_t integer(std::int64_t min, std::int64_t max) const {
    if (!value_->is_number_integer()) fail(expected("an integer"));
    const bool in_range = value_->is_number_unsigned()
                              ? value_->get<std::uint64_t>() <= std::uint64_t(max)
                              : value_->get<std::int64_t>() >= min && value_->get<std::int64_t>() <= max;
    if (!in_range)
      fail("expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got " + dump(*value_));
    return value_->get<std::int64_t>();
  }
  // Optional members with the default HF uses when they are absent.
  bool boolean_or(std::string_view key, bool fallback) const {
    auto n = find(key);
    return n ? n->boolean() : fallback;
  }
  std::optional<std::string> optional_string(std::string_view key) const {
    auto n = find(key);
    return n ? std::optional<std::string>(n->string()) : std::nullopt;
  }
  // The "type" tag every component carries.
  std::string type() const { return at("type").string(); }

  // "model.type \"Unigram\" is not supported" style messages name the component.
  [[noreturn]] void unsupported(const std::string& what) const { fail(what + " is not supported by ft"); }

private:
  static constexpr int max_depth = 64;

  JsonNode child(const nlohmann::json& v, std::string_view key) const {
    return deeper(JsonNode(v, path_.empty() ? std::string(key) : path_ + "." + std::string(key), *origin_));
  }
  JsonNode deeper(JsonNode n) const {
    n.depth_ = depth_ + 1;
    if (n.depth_ > max_depth) fail("nested more than " + std::to_string(max_depth) + " levels deep");
    return n;
  }
  std::string expected(const char* what) const {
    return std::string("expected ") + what + ", got " + dump(*value_);
  }

  const nlohmann::json* value_;
  std::string path_;
  const std::string* origin_;
  int depth_ = 0;
};

}  // namespace ft::text::tokenization
