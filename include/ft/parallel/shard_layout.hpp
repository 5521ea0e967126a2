#pragma once
// How a flat buffer is cut into one contiguous range per rank (ZeRO's
// partitions, FSDP's flat-parameter shards). Every buffer is cut on its own,
// so a stage's shard is there when that stage runs.
//
// Where the cuts may fall depends on the optimizer: one whose state is a
// value per parameter (SGD, AdamW, Lion) takes any cut, and the ranges are
// as even as can be; one whose state is per tensor (Adafactor's factored
// moments, 8-bit AdamW's per-tensor blocks) needs whole tensors, so each cut
// goes to the tensor boundary nearest the even split. That keeps its
// updates exactly those of one process, at the price of uneven shards (a
// rank may hold none of a small buffer).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/models/parameters.hpp"

namespace ft::parallel {

class ShardLayout {
public:
  ShardLayout() = default;
  // Cuts a buffer of `size` elements made of `entries` into `world` ranges.
  ShardLayout(const std::vector<models::ParameterEntry>& entries, index_t size, int world, bool by_element)
      : cuts_(std::size_t(world) + 1, 0) {
    if (world < 1) throw Error("internal: a shard layout needs at least one rank");
    std::vector<index_t> boundaries{0, size};  // between tensors
    for (const auto& e : entries) boundaries.push_back(e.offset + e.shape.numel());
    std::ranges::sort(boundaries);
    for (int r = 1; r < world; ++r) {
      const double ideal = double(size) * double(r) / double(world);
      index_t cut = index_t(ideal);
      if (!by_element) {
        auto distance = [&](index_t b) { return b < cuts_[std::size_t(r) - 1] ? 1e300 : std::abs(double(b) - ideal); };
        cut = *std::ranges::min_element(boundaries, {}, distance);
      }
      cuts_[std::size_t(r)] = cut;
    }
    cuts_.back() = size;
    counts_.clear();
    for (std::size_t r = 0; r + 1 < cuts_.size(); ++r) counts_.push_back(std::size_t(cuts_[r + 1] - cuts_[r]));
  }

  index_t begin(int rank) const { return cuts_[std::size_t(rank)]; }
  index_t end(int rank) const { return cuts_[std::size_t(rank) + 1]; }
  index_t size(int rank) const { return end(rank) - begin(rank); }
  // Elements per rank, as the collectives take them.
  const std::vector<std::size_t>& counts() const { return counts_; }

private:
  std::vector<index_t> cuts_{0, 0};
  std::vector<std::size_t> counts_{0};
};

// The part of each entry that lies in [begin, end), with offsets from begin.
// A tensor cut in two keeps its name and becomes a flat run of its elements.
inline std::vector<models::ParameterEntry> entries_in(const std::vector<models::ParameterEntry>& entries,
                                                      index_t begin, index_t end) {
  std::vector<models::ParameterEntry> out;
  for (const auto& e : entries) {
    const index_t a = std::max(begin, e.offset), b = std::min(end, e.offset + e.shape.numel());
    if (a >= b) continue;
    const bool whole = a == e.offset && b == e.offset + e.shape.numel();
    out.push_back({e.name, whole ? e.shape : Shape{b - a}, a - begin});
  }
  return out;
}

}  // namespace ft::parallel
