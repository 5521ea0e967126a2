#pragma once
// Examples to micro-batches, the same on every run and every machine.
//
// A BatchPlan is built once. Its rows are either the examples themselves
// (packing off) or rows of exactly max_seq_length tokens that hold several
// examples each (packing on, best-fit decreasing). Each epoch visits the rows
// in its own order, a permutation drawn from (seed, epoch), and batch(epoch, i)
// takes rows_per_batch consecutive rows of it; the last incomplete batch of an
// epoch is dropped.
//
//   packing off  a batch is as long as its longest row, rounded up to a
//                multiple of 8 and capped at max_seq_length; shorter rows are
//                right-padded with pad_id. Padding comes after the tokens, so
//                causal attention keeps it out of them.
//   packing on   T = max_seq_length; every example of a row is a document of
//                its own (Batch::documents), so positions restart and
//                attention and targets never cross examples; the tail of a
//                row is one more document, of padding.
// Padding is never scored (label -100).
//
// Data-parallel ranks each build the same plan with their own Shard: rank r
// of w takes positions r, r + w, r + 2w, ... of every epoch's order, so the
// ranks see disjoint rows, together every row but fewer than w per epoch (the
// remainder, like the last incomplete batch, waits for another epoch's order).
// The position in the data is a function of (epoch, batch), so a checkpoint
// needs no cursor beyond the step.
//
// For prompt tuning every row starts with virtual_tokens placeholder
// positions (pad_id, label -100, Batch::virtual_tokens) that the prompt
// adapter fills; they come on top of the row's max_seq_length tokens.
//
// The order is ft's own so that it is the same everywhere: ft::Rng
// (ft/core/random.hpp: SplitMix64, unbiased bounded draws) keyed by (seed,
// epoch), and Fisher-Yates. std::shuffle and the std distributions differ
// between standard libraries.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/random.hpp"
#include "ft/data/examples.hpp"
#include "ft/data/token_corpus.hpp"
#include "ft/models/batch.hpp"

namespace ft::data {

// The order in which an epoch visits n rows: a Fisher-Yates shuffle of
// 0..n-1, from the top, driven by ft::Rng(derive_key(seed, epoch)).
inline std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order(std::size_t(std::max<std::int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), std::int64_t(0));
  Rng rng(derive_key(seed, std::uint64_t(epoch)));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

// Best-fit decreasing: items, longest first (ties: lower index first), each go
// into the open bin with the least room that still fits them, or a new bin.
// Returns the bins in the order they were opened, each listing its items in
// the order they went in. O(n log n). Every length must be in [1, capacity].
inline std::vector<std::vector<std::int64_t>> pack_best_fit(const std::vector<std::int64_t>& lengths,
                                                            std::int64_t capacity) {
  std::vector<std::int64_t> items(lengths.size());
  std::iota(items.begin(), items.end(), std::int64_t(0));
  std::sort(items.begin(), items.end(), [&](std::int64_t a, std::int64_t b) {
    return lengths[std::size_t(a)] != lengths[std::size_t(b)] ? lengths[std::size_t(a)] > lengths[std::size_t(b)]
                                                              : a < b;
  });
  std::vector<std::vector<std::int64_t>> bins;
  std::set<std::pair<std::int64_t, std::int64_t>> open;  // (room left, bin); full bins leave the set
  for (std::int64_t item : items) {
    const std::int64_t length = lengths[std::size_t(item)];
    std::int64_t bin = 0, room = 0;
    if (auto it = open.lower_bound({length, 0}); it != open.end()) {
      std::tie(room, bin) = *it;
      open.erase(it);
    } else {
      bin = std::int64_t(bins.size());
      room = capacity;
      bins.emplace_back();
    }
    bins[std::size_t(bin)].push_back(item);
    if (room - length > 0) open.emplace(room - length, bin);
  }
  return bins;
}

// Which data-parallel rank this plan serves.
struct Shard {
  std::int64_t rank = 0, world = 1;
};

class BatchPlan {
public:
  // With keep_last (evaluation), the epoch's last batch may have fewer rows
  // instead of being dropped, so every row is seen.
  BatchPlan(const std::vector<Example>& examples, std::int64_t rows_per_batch, std::int64_t max_seq_length,
            bool packing, std::int32_t pad_id, std::uint64_t seed, bool keep_last = false,
            std::int64_t virtual_tokens = 0, Shard shard = {})
      : BatchPlan(TokenCorpus::from_examples(examples), rows_per_batch, max_seq_length, packing, pad_id, seed,
                  keep_last, virtual_tokens, shard) {}

  BatchPlan(TokenCorpus examples, std::int64_t rows_per_batch, std::int64_t max_seq_length, bool packing,
            std::int32_t pad_id, std::uint64_t seed, bool keep_last = false, std::int64_t virtual_tokens = 0,
            Shard shard = {})
      : R_(rows_per_batch), max_T_(max_seq_length), packing_(packing), pad_id_(pad_id), seed_(seed),
        keep_last_(keep_last), virtual_(virtual_tokens), shard_(shard) {
    if (shard.world < 1 || shard.rank < 0 || shard.rank >= shard.world)
      throw Error("rank " + std::to_string(shard.rank) + " of " + std::to_string(shard.world) +
                  " is not allowed, allowed: 0 <= rank < world_size");
    if (virtual_tokens < 0 || (virtual_tokens > 0 && packing))
      throw Error("virtual_tokens " + std::to_string(virtual_tokens) +
                  " is not allowed, allowed: 0 or more, and 0 when packing (a packed row holds several documents, "
                  "virtual tokens precede one)");
    if (rows_per_batch < 1)
      throw Error("rows_per_batch " + std::to_string(rows_per_batch) + " is not allowed, allowed: 1 or more");
    if (max_seq_length < 1)
      throw Error("max_seq_length " + std::to_string(max_seq_length) + " is not allowed, allowed: 1 or more");
    if (pad_id < 0)
      throw Error("pad_id " + std::to_string(pad_id) + " is not allowed, allowed: a token id (0 or more)");
    if (examples.size() == 0) throw Error("the dataset has no examples to batch");
    std::vector<std::int64_t> lengths;
    lengths.reserve(std::size_t(examples.size()));
    for (std::int64_t i = 0; i < examples.size(); ++i) {
      const std::int64_t n = examples.length(i);
      const std::string where = "the example of line " + std::to_string(examples.line(i));
      if (n < 1 || n > max_seq_length)
        throw Error(where + " has " + std::to_string(n) + " tokens, allowed: 1 to max_seq_length (" +
                    std::to_string(max_seq_length) + ")");
      lengths.push_back(n);
    }
    if (packing) {
      rows_ = pack_best_fit(lengths, max_seq_length);
    } else {
      rows_.resize(std::size_t(examples.size()));
      for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i] = {std::int64_t(i)};
    }
    examples_ = std::move(examples);
    if (shard_rows() < (keep_last ? 1 : rows_per_batch))
      throw Error("the dataset makes " + std::to_string(rows_.size()) + (packing ? " packed" : "") + " rows" +
                  (shard.world > 1 ? ", " + std::to_string(shard_rows()) + " for each of " +
                                         std::to_string(shard.world) + " ranks"
                                   : std::string()) +
                  ", fewer than one batch of rows_per_batch " + std::to_string(rows_per_batch) +
                  ", allowed: at least rows_per_batch rows per rank (lower it, or add data)");
  }

  std::int64_t batches_per_epoch() const { return (shard_rows() + (keep_last_ ? R_ - 1 : 0)) / R_; }
  // The rows this rank visits per epoch.
  std::int64_t shard_rows() const { return std::int64_t(rows_.size()) / shard_.world; }
  // Rows in all: examples, or packed rows.
  std::int64_t rows() const { return std::int64_t(rows_.size()); }
  // The examples (indices into the constructor's vector) of row r, in order.
  const std::vector<std::int64_t>& row_examples(std::int64_t r) const { return rows_.at(std::size_t(r)); }
  // The tokenised examples the rows are made of.
  const TokenCorpus& corpus() const { return examples_; }
  // Which rows, in which order, epoch `epoch` visits.
  std::vector<std::int64_t> order(std::int64_t epoch) const { return epoch_order(rows(), seed_, epoch); }

  // The index-th micro-batch of the epoch, shifted by causal_lm_batch.
  models::Batch batch(std::int64_t epoch, std::int64_t index) const {
    const std::vector<std::int64_t> rows = batch_rows(epoch, index);
    index_t T = max_T_;
    if (!packing_) {
      std::int64_t longest = 0;
      for (std::int64_t r : rows) longest = std::max(longest, row_tokens(r));
      T = std::min(max_T_, (longest + 7) / 8 * 8);
    }
    T += virtual_;
    const auto B = std::int64_t(rows.size());
    const auto size = std::size_t(B * T);
    std::vector<std::int32_t> ids(size, pad_id_), labels(size, ignore_label), documents;
    if (packing_) documents.assign(size, 0);
    for (std::size_t b = 0; b < rows.size(); ++b) {
      std::size_t at = b * std::size_t(T) + std::size_t(virtual_);
      std::int32_t document = 0;
      for (std::int64_t e : rows_[std::size_t(rows[b])]) {
        const auto example_ids = examples_.input_ids(e), example_labels = examples_.labels(e);
        std::copy(example_ids.begin(), example_ids.end(), ids.begin() + std::ptrdiff_t(at));
        std::copy(example_labels.begin(), example_labels.end(), labels.begin() + std::ptrdiff_t(at));
        if (packing_) std::fill_n(documents.begin() + std::ptrdiff_t(at), example_ids.size(), document++);
        at += example_ids.size();
      }
      const std::size_t row_end = (b + 1) * std::size_t(T);
      if (packing_)
        std::fill(documents.begin() + std::ptrdiff_t(at), documents.begin() + std::ptrdiff_t(row_end), document);
    }
    models::Batch batch = models::causal_lm_batch(B, T, std::move(ids), labels, std::move(documents));
    batch.virtual_tokens = virtual_;
    return batch;
  }

  // The tokens of batch(epoch, index) that are not padding.
  std::int64_t dataset_tokens(std::int64_t epoch, std::int64_t index) const {
    std::int64_t n = 0;
    for (std::int64_t r : batch_rows(epoch, index)) n += row_tokens(r);
    return n;
  }

private:
  struct OrderCache {
    std::mutex mutex;
    std::int64_t epoch = -1;
    std::vector<std::int64_t> order;
  };

  std::int64_t row_tokens(std::int64_t r) const {
    std::int64_t n = 0;
    for (std::int64_t e : rows_[std::size_t(r)]) n += examples_.length(e);
    return n;
  }

  // The rows of one batch; the epoch's order is kept for the next call.
  std::vector<std::int64_t> batch_rows(std::int64_t epoch, std::int64_t index) const {
    if (epoch < 0) throw Error("epoch " + std::to_string(epoch) + " is not allowed, allowed: 0 or more");
    if (index < 0 || index >= batches_per_epoch())
      throw Error("batch " + std::to_string(index) + " is outside the epoch, allowed: 0 to " +
                  std::to_string(batches_per_epoch() - 1));
    std::lock_guard lock(cache_->mutex);
    if (cache_->epoch != epoch) {
      cache_->order = order(epoch);
      cache_->epoch = epoch;
    }
    std::vector<std::int64_t> rows;
    for (std::int64_t j = index * R_; j < std::min((index + 1) * R_, shard_rows()); ++j)
      rows.push_back(cache_->order[std::size_t(j * shard_.world + shard_.rank)]);
    return rows;
  }

  std::int64_t R_, max_T_;
  bool packing_;
  std::int32_t pad_id_;
  std::uint64_t seed_;
  bool keep_last_;
  std::int64_t virtual_;
  Shard shard_;
  TokenCorpus examples_;
  std::vector<std::vector<std::int64_t>> rows_;                         // example indices per row
  std::shared_ptr<OrderCache> cache_ = std::make_shared<OrderCache>();  // copies share it; it is locked
};

}  // namespace ft::data
