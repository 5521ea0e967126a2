#pragma once
// The BPE model: a word becomes one symbol per character (or its <0xXX> byte
// tokens, or the unknown token), then adjacent pairs are merged, lowest merge
// rank first and leftmost first among equals, until no pair has a merge. A
// binary heap over (rank, position) with lazy deletion makes this O(n log n),
// which matters for SentencePiece-style files that have no pre-tokenizer and
// hand whole lines to the model. Words repeat, so short words are cached
// (word_cache.hpp).
// The details follow HF exactly: how unknown characters are fused, that byte
// fallback needs every byte of a character, that `ignore_merges` looks the
// whole word up first, that a repeated merge takes the later rank.
//
// tokenizer.json, "model":
//   {"type": "BPE", "vocab": {"token": id, ...}, "merges": ["a b", ...] or [["a", "b"], ...],
//    "unk_token": null|"<unk>", "continuing_subword_prefix": null|"##",
//    "end_of_word_suffix": null|"</w>", "fuse_unk": false, "byte_fallback": false,
//    "ignore_merges": false, "dropout": null}
// A merge's tokens and their concatenation must be in the vocabulary. Dropout
// (random merges) is refused. Other model types (WordPiece, Unigram, WordLevel)
// are refused.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/utf8.hpp"
#include "ft/text/tokenizer/word_cache.hpp"

namespace ft::text::tokenization {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id); open addressing, for the hot loop.
class MergeTable {
public:
  struct Merge {
    std::int32_t rank, id;
  };
  void reserve(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    slots_.assign(capacity, Slot{empty_key, {}});
    shift_ = 64 - std::countr_zero(capacity);
  }
  // Later insertions of the same pair replace earlier ones, as in HF's map.
  void insert(std::int32_t a, std::int32_t b, Merge m) {
    std::size_t i = index(key(a, b));
    while (slots_[i].key != empty_key && slots_[i].key != key(a, b)) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = {key(a, b), m};
  }
  const Merge* find(std::int32_t a, std::int32_t b) const {
    const std::uint64_t k = key(a, b);
    for (std::size_t i = index(k);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == k) return &slots_[i].merge;
      if (slots_[i].key == empty_key) return nullptr;
    }
  }

private:
  static constexpr std::uint64_t empty_key = ~std::uint64_t(0);
  struct Slot {
    std::uint64_t key;
    Merge merge;
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
  }
  std::size_t index(std::uint64_t k) const { return std::size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Slot> slots_{16, Slot{empty_key, {}}};
  int shift_ = 60;
};

class Bpe {
public:
  static Bpe from_json(const JsonNode& model) {
    const std::string type = model.type();
    if (type != "BPE") model.unsupported("model type " + quote(type) + " (only BPE is)");
    Bpe bpe;
    bpe.read_vocab(model.at("vocab"));
    if (auto d = model.find("dropout"); d && !d->value().is_number()) d->fail("expected a number or null");
    else if (d && d->value().get<double>() != 0.0) d->unsupported("BPE dropout " + dump(d->value()));
    bpe.prefix_ = model.optional_string("continuing_subword_prefix").value_or("");
    bpe.suffix_ = model.optional_string("end_of_word_suffix").value_or("");
    bpe.fuse_unk_ = model.boolean_or("fuse_unk", false);
    bpe.byte_fallback_ = model.boolean_or("byte_fallback", false);
    bpe.ignore_merges_ = model.boolean_or("ignore_merges", false);
    if (auto unk = model.find("unk_token")) {
      const std::string name = unk->string();
      auto it = bpe.vocab_.find(name);
      if (it == bpe.vocab_.end()) unk->fail("unk_token " + quote(name) + " is not in the vocabulary");
      bpe.unk_ = it->second;
    }
    bpe.read_merges(model.at("merges"));
    bpe.index_vocab();
    return bpe;
  }

  // Appends the ids of `word` (non-empty, UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
    if (ignore_merges_) {
      if (auto it = vocab_.find(word); it != vocab_.end()) return out.push_back(it->second);
    }
    if (cache_->find(word, out)) return;
    const std::size_t first = out.size();
    merge_word(word, out);
    cache_->insert(word, std::span(out).subspan(first));
  }

  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? std::nullopt : std::optional(it->second);
  }
  // The token of `id`, or nullptr when no token has that id.
  const std::string* id_to_token(std::int32_t id) const {
    if (id < 0 || std::size_t(id) >= tokens_.size() || !tokens_[std::size_t(id)]) return nullptr;
    return &*tokens_[std::size_t(id)];
  }
  // Number of tokens (HF's get_vocab_size), and one more than the largest id.
  std::size_t size() const { return vocab_.size(); }
  std::int32_t id_end() const { return std::int32_t(tokens_.size()); }

private:
  struct Symbol {
    std::int32_t id, prev, next;
    bool alive;
  };
  // A pair that may merge; ordered by (rank, position) packed into one integer.
  struct Candidate {
    std::uint64_t order;  // rank << 32 | position
    std::int32_t id;
    std::int32_t pos() const { return std::int32_t(order & 0xFFFFFFFFu); }
    bool operator>(const Candidate& o) const { return order > o.order; }
  };

  void read_vocab(const JsonNode& node) {
    node.expect_object();
    vocab_.reserve(node.value().size());
    std::int32_t max_id = -1;
    for (auto it = node.value().begin(); it != node.value().end(); ++it) {
      const JsonNode entry(it.value(), node.path() + "." + quote(it.key()), node.origin());
      const auto id = std::int32_t(entry.integer(0, std::numeric_limits<std::int32_t>::max() - 1));
      vocab_.emplace(it.key(), id);
      max_id = std::max(max_id, id);
    }
    // Ids index a table, so they must be reasonably dense (HF allows gaps; real files have none).
    if (max_id >= 0 && std::size_t(max_id) >= 2 * vocab_.size() + 1024)
      node.fail("ids are too sparse: largest id " + std::to_string(max_id) + " for " + std::to_string(vocab_.size()) +
                " tokens");
    tokens_.assign(std::size_t(max_id + 1), std::nullopt);
    for (const auto& [token, id] : vocab_) {
      if (tokens_[std::size_t(id)])
        node.fail("id " + std::to_string(id) + " is given to both " + quote(*tokens_[std::size_t(id)]) + " and " +
                  quote(token));
      tokens_[std::size_t(id)] = token;
    }
  }

  std::int32_t merge_part(const JsonNode& at, std::string_view part) const {
    auto it = vocab_.find(part);
    if (it == vocab_.end()) at.fail("merge refers to " + quote(part) + ", which is not in the vocabulary");
    return it->second;
  }

  void read_merges(const JsonNode& node) {
    const std::size_t n = node.array_size();
    if (n >= std::size_t(std::numeric_limits<std::int32_t>::max())) node.fail("too many merges");
    merges_.reserve(n);
    for (std::size_t rank = 0; rank < n; ++rank) {
      const JsonNode m = node[rank];
      std::string a, b;
      if (m.value().is_string()) {  // "a b": exactly one space, as HF requires
        const std::string line = m.string();
        const auto space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
          m.fail("expected a merge \"left right\" with exactly one space, got " + quote(line));
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else if (m.value().is_array() && m.value().size() == 2) {
        a = m[0].string();
        b = m[1].string();
      } else {
        m.fail("expected a merge \"left right\" or [\"left\", \"right\"], got " + dump(m.value()));
      }
      // The merged token drops the right part's continuing-subword prefix, as HF does.
      const bool cuts_a_character =
          b.size() > prefix_.size() && (static_cast<unsigned char>(b[prefix_.size()]) & 0xC0) == 0x80;
      if (b.size() < prefix_.size() || cuts_a_character)
        m.fail("cannot drop continuing_subword_prefix " + quote(prefix_) + " from the merge's right part " + quote(b));
      const std::string merged = a + b.substr(prefix_.size());
      const std::int32_t left = merge_part(m, a), right = merge_part(m, b), id = merge_part(m, merged);
      merges_.insert(left, right, {std::int32_t(rank), id});
    }
  }

  // Single characters and byte tokens, looked up once here instead of hashed per character.
  void index_vocab() {
    ascii_ids_.fill(-1);
    byte_ids_.fill(-1);
    for (const auto& [token, id] : vocab_) {
      std::size_t i = 0;
      if (!token.empty() && (utf8_next(token, i), i == token.size())) {
        i = 0;
        const char32_t c = utf8_next(token, i);
        if (c < ascii_ids_.size()) ascii_ids_[c] = id;
        else char_ids_.emplace(c, id);
      }
      if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
        static constexpr std::string_view hex = "0123456789ABCDEF";
        const auto hi = hex.find(token[3]), lo = hex.find(token[4]);
        if (hi != std::string_view::npos && lo != std::string_view::npos) byte_ids_[hi * 16 + lo] = id;
      }
    }
  }

  std::optional<std::int32_t> char_id(std::string_view word, std::size_t begin, std::size_t end, char32_t c,
                                      bool first, bool last) const {
    if (prefix_.empty() && suffix_.empty()) {
      if (c < ascii_ids_.size()) return ascii_ids_[c] < 0 ? std::nullopt : std::optional(ascii_ids_[c]);
      auto it = char_ids_.find(c);
      return it == char_ids_.end() ? std::nullopt : std::optional(it->second);
    }
    std::string s = first ? std::string() : prefix_;
    s.append(word.substr(begin, end - begin));
    if (last) s += suffix_;
    return token_to_id(s);
  }

  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> heap;
    symbols.clear();
    heap.clear();
    auto add = [&](std::int32_t id) {
      const auto pos = std::int32_t(symbols.size());
      symbols.push_back({id, pos - 1, pos + 1, true});
    };
    std::optional<std::int32_t> pending_unk;  // HF adds an unknown only when the next known symbol comes
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t begin = i;
      const char32_t c = utf8_next(word, i);
      if (auto id = char_id(word, begin, i, c, begin == 0, i == word.size())) {
        if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
        add(*id);
        continue;
      }
      if (byte_fallback_ && add_bytes(word, begin, i, add)) continue;
      if (unk_) {
        if (pending_unk && !fuse_unk_) add(*pending_unk);
        pending_unk = unk_;
      }
    }
    if (pending_unk) add(*pending_unk);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    auto candidate = [&](std::int32_t pos, Candidate& c) {
      const Symbol& s = symbols[std::size_t(pos)];
      if (s.next < 0) return false;
      const MergeTable::Merge* m = merges_.find(s.id, symbols[std::size_t(s.next)].id);
      if (m) c = {(std::uint64_t(std::uint32_t(m->rank)) << 32) | std::uint32_t(pos), m->id};
      return m != nullptr;
    };
    auto push_pair = [&](std::int32_t pos) {
      if (Candidate c; candidate(pos, c)) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
      }
    };
    for (std::int32_t pos = 0; pos + 1 < std::int32_t(symbols.size()); ++pos)
      if (Candidate c; candidate(pos, c)) heap.push_back(c);
    std::make_heap(heap.begin(), heap.end(), std::greater<>{});
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const Candidate top = heap.back();
      heap.pop_back();
      const std::int32_t pos = top.pos();
      Symbol& left = symbols[std::size_t(pos)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[std::size_t(left.next)];
      const MergeTable::Merge* m = merges_.find(left.id, right.id);
      if (!m || m->id != top.id) continue;  // the pair changed since this entry was pushed
      left.id = top.id;
      right.alive = false;
      left.next = right.next;
      if (left.next >= 0) symbols[std::size_t(left.next)].prev = pos;
      if (left.prev >= 0) push_pair(left.prev);
      push_pair(pos);
    }
    for (const Symbol& s : symbols)
      if (s.alive) out.push_back(s.id);
  }

  // The byte tokens of the character word[begin, end) (with prefix/suffix as
  // the vocabulary lookup saw it); nothing when one of them is missing.
  template <class Add>
  bool add_bytes(std::string_view word, std::size_t begin, std::size_t end, Add& add) const {
    std::string s = begin == 0 ? std::string() : prefix_;
    s.append(word.substr(begin, end - begin));
    if (end == word.size()) s += suffix_;
    for (char c : s)
      if (byte_ids_[static_cast<unsigned char>(c)] < 0) return false;
    for (char c : s) add(byte_ids_[static_cast<unsigned char>(c)]);
    return true;
  }

  TokenMap vocab_;
  std::vector<std::optional<std::string>> tokens_;  // by id
  MergeTable merges_;
  std::string prefix_, suffix_;
  std::optional<std::int32_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<std::int32_t, 128> ascii_ids_{};
  std::unordered_map<char32_t, std::int32_t> char_ids_;
  std::array<std::int32_t, 256> byte_ids_{};
  std::shared_ptr<WordCache> cache_ = std::make_shared<WordCache>();
};

}  // namespace ft::text::tokenization
