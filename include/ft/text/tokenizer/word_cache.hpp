#pragma once
// Word -> ids for words the BPE model has seen. Text repeats its words, and a
// hit skips the whole merge loop. The table is direct-mapped with 64-byte
// entries that hold a short word and its ids inline, so that a lookup touches
// one cache line and a new word simply replaces the one in its slot (no
// allocation, bounded memory, no clearing storms). Slots are locked in shards,
// so threads encoding at once rarely wait for each other.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace ft::text::tokenization {

class WordCache {
public:
  static constexpr std::size_t max_word_bytes = 22, max_ids = 8;

  bool find(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.size() > max_word_bytes) return false;
    const std::uint64_t h = hash(word);
    const std::size_t i = h & (slot_count - 1);
    std::lock_guard lock(locks_[i % lock_count].mutex);
    const Slot& s = slots_[i];
    if (s.hash != h || s.key_size != word.size() || std::memcmp(s.key, word.data(), word.size()) != 0) return false;
    out.insert(out.end(), s.ids, s.ids + s.id_count);
    return true;
  }
  void insert(std::string_view word, std::span<const std::int32_t> ids) const {
    if (word.size() > max_word_bytes || ids.size() > max_ids) return;
    const std::uint64_t h = hash(word);
    const std::size_t i = h & (slot_count - 1);
    std::lock_guard lock(locks_[i % lock_count].mutex);
    Slot& s = slots_[i];
    s.hash = h;
    s.key_size = std::uint8_t(word.size());
    s.id_count = std::uint8_t(ids.size());
    std::memcpy(s.key, word.data(), word.size());
    std::copy(ids.begin(), ids.end(), s.ids);
  }

private:
  static constexpr std::size_t slot_count = 1 << 15, lock_count = 64;
  struct Slot {
    std::uint64_t hash = 0;
    std::uint8_t key_size = 0xFF;  // matches no word: empty
    std::uint8_t id_count = 0;
    char key[max_word_bytes];
    std::int32_t ids[max_ids];
  };
  static_assert(sizeof(Slot) == 64);
  struct alignas(64) Lock {
    std::mutex mutex;
  };
  static std::uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  mutable std::vector<Slot> slots_ = std::vector<Slot>(slot_count);
  mutable std::array<Lock, lock_count> locks_;
};

}  // namespace ft::text::tokenization
