#pragma once
// Text from tokens as they are generated, for streaming. The text of all
// tokens so far is decoded (a token's text can depend on its neighbours)
// and the part not yet released is handed out, except a tail that is not
// settled yet:
//   - an unfinished character: a byte-level token can carry part of a UTF-8
//     sequence, which decodes as U+FFFD until the rest arrives;
//   - the start of a possible stop string, which must not reach the client
//     if the string completes.
// When a stop string appears, the text ends just before it. So the pieces
// released, joined, are exactly the final text: streaming and not streaming
// give the same answer.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft::infer {

class TextStream {
public:
  using Decode = std::function<std::string(std::span<const std::int32_t>)>;

  TextStream(Decode decode, std::vector<std::string> stop) : decode_(std::move(decode)), stop_(std::move(stop)) {
    std::erase(stop_, std::string());
  }

  // Adds a token; returns the text it settles (often empty or one word).
  std::string push(std::int32_t token) {
    if (stopped_) return {};
    tokens_.push_back(token);
    text_ = decode_(tokens_);
    std::size_t end = text_.size();
    for (const std::string& s : stop_)
      if (const auto at = text_.find(s, released_ > s.size() ? released_ - s.size() : 0); at != std::string::npos)
        if (at < end) {
          end = at;
          stopped_ = true;
        }
    if (stopped_) return release(end);
    return release(settled_end());
  }

  // Whatever is still held back, at the end of generation.
  std::string finish() { return stopped_ ? std::string() : release(text_.size()); }

  bool stopped() const { return stopped_; }
  // The text released so far.
  std::string_view text() const { return std::string_view(text_).substr(0, released_); }

private:
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";

  // Where the settled text ends: before a trailing U+FFFD and before a tail
  // that is a proper prefix of a stop string.
  std::size_t settled_end() const {
    std::size_t end = text_.size();
    while (std::string_view(text_).substr(0, end).ends_with(replacement)) end -= replacement.size();
    std::size_t hold = end;
    for (const std::string& s : stop_)
      for (std::size_t n = std::min(s.size() - 1, end); n > 0; --n)
        if (std::string_view(text_).substr(end - n, n) == std::string_view(s).substr(0, n)) {
          hold = std::min(hold, end - n);
          break;
        }
    return std::max(hold, released_);
  }

  std::string release(std::size_t end) {
    if (end <= released_) return {};
    std::string piece = text_.substr(released_, end - released_);
    released_ = end;
    return piece;
  }

  Decode decode_;
  std::vector<std::string> stop_;
  std::vector<std::int32_t> tokens_;
  std::string text_;
  std::size_t released_ = 0;
  bool stopped_ = false;
};

}  // namespace ft::infer
