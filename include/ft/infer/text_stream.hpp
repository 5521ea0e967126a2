#pragma once
// Text from tokens as they are generated, for streaming. The text of all
// tokens so far is kept up to date (a token's text can depend on its
// neighbours) and the part not yet released is handed out, except a tail
// that is not settled yet:
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
    extend_text();
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
  // Decoding every token so far at every step costs O(n^2) over an answer.
  // Instead the text is fixed up to a token boundary now and then, and each
  // step decodes only the tokens after it plus a few before (their
  // neighbours), keeping what that adds after the few's own text. When the
  // text changed further back (the few's text is not a prefix of it: HF's
  // byte fallback turns a whole run of byte tokens into U+FFFD while its
  // last character is unfinished), the whole sequence is decoded again and
  // nothing stays fixed until the text settles.
  static constexpr std::size_t lookback = 4, fix_every = 16;
  void extend_text() {
    const std::span<const std::int32_t> all(tokens_);
    if (from_ == 0) {
      text_ = decode_(all);
    } else {
      const std::string before = decode_(all.subspan(from_, fixed_tokens_ - from_));
      const std::string now = decode_(all.subspan(from_));
      if (now.starts_with(before)) {
        text_.replace(fixed_text_, std::string::npos, now, before.size());
      } else {
        text_ = decode_(all);
        fixed_tokens_ = fixed_text_ = from_ = 0;  // what was fixed may read differently now
      }
    }
    if (tokens_.size() - fixed_tokens_ >= fix_every && !std::string_view(text_).ends_with(replacement)) fix();
  }
  // Fixes the text so far. The few tokens decoded before the fixed ones must
  // read as whole characters: started inside a character's byte tokens,
  // they would read as U+FFFD, and so would the character's later bytes.
  void fix() {
    fixed_tokens_ = tokens_.size();
    fixed_text_ = text_.size();
    const std::span<const std::int32_t> all(tokens_);
    for (from_ = fixed_tokens_ - std::min(fixed_tokens_, lookback); from_ > 0; --from_)
      if (decode_(all.subspan(from_, fixed_tokens_ - from_)).find(replacement) == std::string::npos) return;
  }

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
  std::string text_;                              // the text of tokens_
  std::size_t fixed_tokens_ = 0, fixed_text_ = 0;  // text_[0, fixed_text_) is tokens_[0, fixed_tokens_)'s for good
  std::size_t from_ = 0;                           // decoding starts here (0: the whole sequence)
  std::size_t released_ = 0;
  bool stopped_ = false;
};

}  // namespace ft::infer
