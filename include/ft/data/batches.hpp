#pragma once
// Examples to micro-batches, the same on every run and every machine.
//
// A BatchPlan is built once. Its rows are either the examples themselves
// (packing off) or rows of exactly max_seq_length tokens that hold several
// examples each (packing on, best-fit decreasing). Each epoch visits the rows
// in its own order, a permutation drawn from (seed, epoch).
//
// Training reads the orders of epochs 0, 1, 2, ... one after another as one
// stream and cuts it into full micro-batches (Cover::epochs), so every row is
// seen exactly once per epoch and no batch is short; when the rows do not
// divide into batches, one batch holds the last rows of an epoch and the first
// of the next (as Megatron's sample stream does). Evaluation reads epoch 0's
// order once and its last batch may be short (Cover::one_pass).
//
//   packing off  a batch is as long as its longest row, rounded up to a
//                multiple of 8 and capped at max_seq_length; shorter rows are
//                right-padded with pad_id. Padding comes after the tokens, so
//                causal attention keeps it out of them.
//   packing on   T = max_seq_length; every example of a row is a document of
//                its own (Batch::documents), so positions restart and
//                attention and targets never cross examples; the tail of a
//                row is one more document, of padding.
// Padding is never scored (label -100); each row keeps its length before
// the padding (Batch::lengths, HF's attention_mask). Preference pairs
// (paired) are rows of the plan too: a pair's two sequences travel together.
//
// Data-parallel ranks each build the same plan with their own Shard: rank r
// of w takes stream positions r, r + w, r + 2w, ..., so micro-batch g of
// every rank together hold positions [g R w, (g + 1) R w): the ranks see
// disjoint rows, together every row once per epoch, and all take the same
// number of steps. The position in the data is a function of the micro-batch
// index, so a checkpoint needs no cursor beyond the step.
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
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ranges>

#include "ft/core/error.hpp"
#include "ft/core/random.hpp"
#include "ft/data/example.hpp"
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

// How the micro-batches cover the rows (see the top of this file).
enum class Cover {
  epochs,    // training: epoch after epoch without end, every batch full
  one_pass,  // evaluation: epoch 0 once, the last batch may be short
};

// A micro-batch and what the metrics need to know of it.
struct MicroBatch {
  std::int64_t index = 0;  // in this rank's stream
  std::vector<std::int64_t> rows;  // the plan's rows it holds (BatchPlan::row_examples)
  models::Batch batch;
  std::int64_t dataset_tokens = 0;  // tokens of the dataset, padding and virtual tokens excluded
};

class BatchPlan {
public:
  BatchPlan(const std::vector<Example>& examples, std::int64_t rows_per_batch, std::int64_t max_seq_length,
            bool packing, std::int32_t pad_id, std::uint64_t seed, Cover cover = Cover::epochs,
            std::int64_t virtual_tokens = 0, Shard shard = {}, bool paired = false)
      : BatchPlan(TokenCorpus::from_examples(examples), rows_per_batch, max_seq_length, packing, pad_id, seed, cover,
                  virtual_tokens, shard, paired) {}

  // paired: the examples are preference pairs (2i chosen, 2i + 1 rejected),
  // and each row of the plan is a pair; a micro-batch of R pairs holds the R
  // chosen sequences, then the R rejected ones (models::Batch::pairs).
  BatchPlan(TokenCorpus examples, std::int64_t rows_per_batch, std::int64_t max_seq_length, bool packing,
            std::int32_t pad_id, std::uint64_t seed, Cover cover = Cover::epochs, std::int64_t virtual_tokens = 0,
            Shard shard = {}, bool paired = false)
      : R_(rows_per_batch), max_T_(max_seq_length), packing_(packing), paired_(paired), pad_id_(pad_id), seed_(seed),
        cover_(cover), virtual_(virtual_tokens), shard_(shard) {
    if (paired && packing)
      throw Error("packing is not allowed with preference pairs: each pair's two sequences are scored as wholes, "
                  "allowed: data.packing = false");
    if (paired && examples.size() % 2 != 0)
      throw Error("preference pairs need an even number of examples, got " + std::to_string(examples.size()));
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
    } else if (paired) {
      rows_.resize(std::size_t(examples.size() / 2));
      for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i] = {std::int64_t(2 * i), std::int64_t(2 * i + 1)};
    } else {
      rows_.resize(std::size_t(examples.size()));
      for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i] = {std::int64_t(i)};
    }
    examples_ = std::move(examples);
    // Fewer rows than one step takes would put a row twice into one step.
    const std::int64_t needed = cover == Cover::epochs ? rows_per_batch * shard.world : shard.world;
    if (rows() < needed)
      throw Error("the dataset makes " + std::to_string(rows()) + (packing ? " packed" : "") + " rows, fewer than " +
                  (cover == Cover::epochs
                       ? "one batch of rows_per_batch " + std::to_string(rows_per_batch) +
                             (shard.world > 1 ? " for each of " + std::to_string(shard.world) + " ranks" : "")
                       : "one for each of " + std::to_string(shard.world) + " ranks") +
                  ", allowed: at least " + std::to_string(needed) + " rows (lower the batch size, or add data)");
  }

  // Cover::epochs: micro-batches per epoch on each rank, rows / (rows_per_batch x world), a fraction when
  // they do not divide.
  double batches_per_epoch() const { return double(rows()) / double(R_ * shard_.world); }
  // Cover::one_pass: how many micro-batches this rank has.
  std::int64_t pass_batches() const { return (pass_rows() + R_ - 1) / R_; }
  // Rows in all: examples, or packed rows.
  std::int64_t rows() const { return std::int64_t(rows_.size()); }
  // The examples (indices into the constructor's vector) of row r, in order.
  const std::vector<std::int64_t>& row_examples(std::int64_t r) const { return rows_.at(std::size_t(r)); }
  // The tokenised examples the rows are made of.
  const TokenCorpus& corpus() const { return examples_; }
  // Which rows, in which order, epoch `epoch` visits.
  std::vector<std::int64_t> order(std::int64_t epoch) const { return epoch_order(rows(), seed_, epoch); }

  // This rank's micro-batches from `first` on: without end under Cover::epochs, up to pass_batches() under
  // Cover::one_pass. Each is made when the view is read.
  auto micro_batches(std::int64_t first = 0) const {
    const std::int64_t end = cover_ == Cover::epochs ? std::numeric_limits<std::int64_t>::max() : pass_batches();
    return std::views::iota(std::min(first, end), end) |
           std::views::transform([this](std::int64_t g) { return micro_batch(g); });
  }

  // Micro-batch g of this rank's stream, shifted by causal_lm_batch.
  MicroBatch micro_batch(std::int64_t g) const {
    MicroBatch out = batch_of_rows(batch_rows(g));
    out.index = g;
    return out;
  }

  // A micro-batch of the given rows of the plan, in that order, laid out as
  // any micro-batch is (its index is 0).
  MicroBatch batch_of_rows(const std::vector<std::int64_t>& rows) const {
    for (std::int64_t r : rows)
      if (r < 0 || r >= this->rows())
        throw Error("row " + std::to_string(r) + " is not allowed, allowed: 0 to " + std::to_string(this->rows() - 1));
    MicroBatch out;
    out.rows = rows;
    // The examples of each row of the batch.
    std::vector<std::vector<std::int64_t>> contents;
    if (paired_) {
      for (std::size_t side = 0; side < 2; ++side)
        for (std::int64_t r : rows) contents.push_back({rows_[std::size_t(r)][side]});
    } else {
      for (std::int64_t r : rows) contents.push_back(rows_[std::size_t(r)]);
    }
    index_t T = max_T_;
    if (!packing_) {
      std::int64_t longest = 0;
      for (const auto& examples : contents)
        for (std::int64_t e : examples) longest = std::max(longest, examples_.length(e));
      T = std::min(max_T_, (longest + 7) / 8 * 8);
    }
    T += virtual_;
    const auto B = std::int64_t(contents.size());
    const auto size = std::size_t(B * T);
    std::vector<std::int32_t> ids(size, pad_id_), labels(size, ignore_label), documents;
    std::vector<index_t> lengths;
    if (packing_) documents.assign(size, 0);
    for (std::size_t b = 0; b < contents.size(); ++b) {
      std::size_t at = b * std::size_t(T) + std::size_t(virtual_);
      std::int32_t document = 0;
      for (std::int64_t e : contents[b]) {
        const auto example_ids = examples_.input_ids(e), example_labels = examples_.labels(e);
        std::copy(example_ids.begin(), example_ids.end(), ids.begin() + std::ptrdiff_t(at));
        std::copy(example_labels.begin(), example_labels.end(), labels.begin() + std::ptrdiff_t(at));
        if (packing_) std::fill_n(documents.begin() + std::ptrdiff_t(at), example_ids.size(), document++);
        at += example_ids.size();
        out.dataset_tokens += std::int64_t(example_ids.size());
      }
      lengths.push_back(index_t(at - b * std::size_t(T)));
      const std::size_t row_end = (b + 1) * std::size_t(T);
      if (packing_)
        std::fill(documents.begin() + std::ptrdiff_t(at), documents.begin() + std::ptrdiff_t(row_end), document);
    }
    out.batch = models::causal_lm_batch(B, T, std::move(ids), labels, std::move(documents));
    out.batch.virtual_tokens = virtual_;
    out.batch.lengths = std::move(lengths);
    if (paired_) out.batch.pairs = index_t(rows.size());
    return out;
  }

  // The batch alone, for callers that need no metrics.
  models::Batch batch(std::int64_t g) const { return micro_batch(g).batch; }

  // The rows of micro-batch g: its j-th row is at stream position (g R + j) w + rank.
  std::vector<std::int64_t> batch_rows(std::int64_t g) const {
    if (g < 0) throw Error("micro-batch " + std::to_string(g) + " is not allowed, allowed: 0 or more");
    std::int64_t end = (g + 1) * R_;
    if (cover_ == Cover::one_pass) {
      if (g >= pass_batches())
        throw Error("micro-batch " + std::to_string(g) + " is past the evaluation pass, allowed: 0 to " +
                    std::to_string(pass_batches() - 1));
      end = std::min(end, pass_rows());
    }
    std::lock_guard lock(cache_->mutex);
    std::vector<std::int64_t> rows;
    for (std::int64_t j = g * R_; j < end; ++j) {
      const std::int64_t position = j * shard_.world + shard_.rank, epoch = position / this->rows();
      auto it = cache_->orders.find(epoch);
      if (it == cache_->orders.end()) {
        while (cache_->orders.size() >= 2) cache_->orders.erase(cache_->orders.begin());
        it = cache_->orders.emplace(epoch, order(epoch)).first;
      }
      rows.push_back(it->second[std::size_t(position % this->rows())]);
    }
    return rows;
  }

private:
  // Epoch orders as the stream reaches them; a batch spans at most two.
  struct OrderCache {
    std::mutex mutex;
    std::map<std::int64_t, std::vector<std::int64_t>> orders;
  };

  // The stream positions this rank holds in one pass over epoch 0.
  std::int64_t pass_rows() const { return (rows() - shard_.rank + shard_.world - 1) / shard_.world; }


  std::int64_t R_, max_T_;
  bool packing_, paired_;
  std::int32_t pad_id_;
  std::uint64_t seed_;
  Cover cover_;
  std::int64_t virtual_;
  Shard shard_;
  TokenCorpus examples_;
  std::vector<std::vector<std::int64_t>> rows_;                         // example indices per row
  std::shared_ptr<OrderCache> cache_ = std::make_shared<OrderCache>();  // copies share it; it is locked
};

}  // namespace ft::data
