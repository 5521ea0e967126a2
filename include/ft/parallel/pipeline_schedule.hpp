#pragma once
// Pipeline parallelism's plan: which stages each pipeline rank runs (the
// partition) and in which order each rank runs its forwards and backwards
// of the step's micro-batches (the schedule).
//
// Partition: the model's stages (embedding, blocks, head) are cut into
// `ranks x stages_per_rank` chunks of contiguous blocks, balanced by
// estimated cost (the matmul FLOPs of a block, the LM head's for the chunk
// that ends with it); chunk c runs on rank c % ranks, so with several chunks
// per rank (interleaving, "virtual stages") a micro-batch passes every rank
// stages_per_rank times.
//
// Schedules, for m micro-batches on p ranks (v chunks per rank):
//   gpipe             every forward, then every backward: m contexts in flight
//   1f1b              rank r runs p - r - 1 forwards, then alternates one
//                     forward and one backward, then the remaining
//                     backwards: at most p - r contexts in flight
//                     (PipeDream-Flush); bubble (p - 1) / (m + p - 1)
//   interleaved_1f1b  1f1b over virtual stages (Megatron-LM): the bubble
//                     shrinks by v; m must be a multiple of p
//   zero_bubble       ZB-H1 (Qi et al. 2023): backward split into the input
//                     gradient (B), which the previous rank waits for, and
//                     the weight gradient (W), which nobody waits for, so W
//                     passes fill the time 1f1b sits idle. The order is a
//                     list schedule in unit time (F = B = W): a free rank
//                     runs the backward whose gradient has arrived, else its
//                     next forward (at most p - r ahead of its backwards, as
//                     1f1b), else its oldest pending W. A micro-batch's
//                     activations stay until its W, so rank r holds up to
//                     2p - r - 1 of them (1f1b: p - r); that buys ZB-H1's
//                     bubble, (p - 1) / (3m + p - 1) of the step
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::parallel {

enum class PipeSchedule { gpipe, one_f_one_b, interleaved, zero_bubble };

inline PipeSchedule pipe_schedule_from_name(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::gpipe;
  if (name == "1f1b") return PipeSchedule::one_f_one_b;
  if (name == "interleaved_1f1b") return PipeSchedule::interleaved;
  if (name == "zero_bubble") return PipeSchedule::zero_bubble;
  throw Error("pipeline.schedule: \"" + name + "\" is not a schedule; allowed: gpipe, 1f1b, interleaved_1f1b, zero_bubble");
}

struct PipePartition {
  int ranks = 1, stages_per_rank = 1;
  index_t layers = 0;                // the model's blocks
  std::vector<index_t> first, last;  // per chunk: its stages (-1 the embedding, L the head)
  std::vector<double> cost;          // per chunk, estimated

  int chunks() const { return int(first.size()); }
  int rank_of(int chunk) const { return chunk % ranks; }
  int chunk_holding(index_t stage) const {
    for (int c = 0; c < chunks(); ++c)
      if (first[std::size_t(c)] <= stage && stage <= last[std::size_t(c)]) return c;
    return -1;
  }

  // "rank 0: embed, layers 0-3 (27%)" per chunk, one line each.
  std::string describe() const {
    double total = 0;
    for (double x : cost) total += x;
    std::string out;
    for (int c = 0; c < chunks(); ++c) {
      const index_t a = first[std::size_t(c)], b = last[std::size_t(c)];
      std::string what;
      if (a < 0) what += "embed, ";
      const index_t from = std::max<index_t>(a, 0), to = std::min<index_t>(b, layers - 1);
      what += from == to ? "layer " + std::to_string(from) : "layers " + std::to_string(from) + "-" + std::to_string(to);
      if (b == layers) what += ", head";
      char share[32];
      std::snprintf(share, sizeof share, " (%.0f%%)", 100 * cost[std::size_t(c)] / total);
      out += "  rank " + std::to_string(rank_of(c)) + (stages_per_rank > 1 ? " chunk " + std::to_string(c) : "") + ": " +
             what + share + "\n";
    }
    return out;
  }
};

// Matmul FLOPs per token of one block's forward (the mean block's, where
// sparse layers differ from dense ones), and of the head's.
inline double block_cost(const models::TransformerConfig& c, index_t sequence) {
  const double C = double(c.hidden_size), HD = double(c.num_heads * c.head_dim);
  double mlp = 0;
  for (index_t l = 0; l < c.num_layers; ++l) mlp += double(c.mlp_matmul_weights(l));
  const double linear = C * double(c.qkv_width()) + HD * C + mlp / double(std::max<index_t>(1, c.num_layers));
  return 2 * linear + 2 * double(sequence) * HD;  // causal attention: half of QK^T and AV
}
inline double head_cost(const models::TransformerConfig& c) { return 2.0 * double(c.vocab_size * c.hidden_size); }

// Contiguous runs of blocks, one per chunk, that minimise the costliest
// chunk; the embedding joins the first and the head the last.
inline PipePartition partition_pipeline(const models::TransformerConfig& config, index_t sequence, int ranks,
                                        int stages_per_rank) {
  const index_t L = config.num_layers;
  const int k = ranks * stages_per_rank;
  if (ranks < 1 || stages_per_rank < 1) throw Error("pipeline: ranks and stages_per_rank must be at least 1");
  if (k > L)
    throw Error("pipeline: " + std::to_string(ranks) + " ranks x " + std::to_string(stages_per_rank) +
                " stages per rank need at least " + std::to_string(k) + " blocks, the model has " + std::to_string(L) +
                "; use at most " + std::to_string(L / stages_per_rank) + " pipeline ranks");
  const double block = block_cost(config, sequence), head = head_cost(config), embed = double(config.hidden_size);
  // best[j][i]: the least possible costliest chunk when chunks 0..j-1 hold blocks 0..i-1.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(std::size_t(k + 1), std::vector<double>(std::size_t(L + 1), inf));
  std::vector<std::vector<index_t>> cut(std::size_t(k + 1), std::vector<index_t>(std::size_t(L + 1), 0));
  auto chunk_cost = [&](int j, index_t from, index_t to) {  // chunk j holding blocks [from, to)
    return double(to - from) * block + (j == 0 ? embed : 0) + (j == k - 1 ? head : 0);
  };
  best[0][0] = 0;
  for (int j = 1; j <= k; ++j)
    for (index_t i = j; i <= L; ++i)
      for (index_t s = j - 1; s < i; ++s) {
        const double worst = std::max(best[std::size_t(j - 1)][std::size_t(s)], chunk_cost(j - 1, s, i));
        if (worst < best[std::size_t(j)][std::size_t(i)]) {
          best[std::size_t(j)][std::size_t(i)] = worst;
          cut[std::size_t(j)][std::size_t(i)] = s;
        }
      }
  PipePartition p;
  p.ranks = ranks;
  p.stages_per_rank = stages_per_rank;
  p.layers = L;
  p.first.resize(std::size_t(k));
  p.last.resize(std::size_t(k));
  p.cost.resize(std::size_t(k));
  index_t end = L;
  for (int j = k; j >= 1; --j) {
    const index_t begin = cut[std::size_t(j)][std::size_t(end)];
    p.first[std::size_t(j - 1)] = j == 1 ? -1 : begin;
    p.last[std::size_t(j - 1)] = j == k ? L : end - 1;
    p.cost[std::size_t(j - 1)] = chunk_cost(j - 1, begin, end);
    end = begin;
  }
  return p;
}

// One entry of a rank's schedule.
enum class PipePass : char { forward, backward, weights };
struct PipeOp {
  PipePass pass;
  int micro_batch;
  int chunk;
};

// The passes `op` waits for, of a pipe of `chunks` chunks: a forward for
// the previous chunk's, a backward for its own forward and the next
// chunk's backward, a weight gradient for its backward.
inline std::vector<PipeOp> pass_inputs(const PipeOp& op, int chunks) {
  switch (op.pass) {
    case PipePass::forward:
      if (op.chunk == 0) return {};
      return {{PipePass::forward, op.micro_batch, op.chunk - 1}};
    case PipePass::backward:
      if (op.chunk + 1 == chunks) return {{PipePass::forward, op.micro_batch, op.chunk}};
      return {{PipePass::forward, op.micro_batch, op.chunk}, {PipePass::backward, op.micro_batch, op.chunk + 1}};
    case PipePass::weights:
      return {{PipePass::backward, op.micro_batch, op.chunk}};
  }
  return {};
}

// The key of a pass, to look up when it ran.
inline std::array<int, 3> pass_key(const PipeOp& op) { return {int(op.pass), op.micro_batch, op.chunk}; }

// ZB-H1's orders of every rank (one chunk per rank), by the list schedule
// described at the top.
inline std::vector<std::vector<PipeOp>> zero_bubble_orders(int P, int m) {
  auto orders = std::vector<std::vector<PipeOp>>(std::size_t(P));
  std::map<std::array<int, 3>, int> ended;  // pass -> the tick it ended
  std::vector<int> forwards(std::size_t(P), 0), backwards(std::size_t(P), 0), weights(std::size_t(P), 0);
  auto ready = [&](const PipeOp& op, int tick) {
    for (const PipeOp& input : pass_inputs(op, P)) {
      auto it = ended.find(pass_key(input));
      if (it == ended.end() || it->second > tick) return false;
    }
    return true;
  };
  for (int tick = 0; std::any_of(weights.begin(), weights.end(), [&](int w) { return w < m; }); ++tick)
    for (int r = 0; r < P; ++r) {
      const std::size_t i = std::size_t(r);
      const PipeOp backward{PipePass::backward, backwards[i], r}, forward{PipePass::forward, forwards[i], r};
      std::optional<PipeOp> op;
      if (backwards[i] < forwards[i] && ready(backward, tick)) {
        op = backward;
        ++backwards[i];
      } else if (forwards[i] < m && forwards[i] - backwards[i] < P - r && forwards[i] - weights[i] < 2 * P - r - 1 &&
                 ready(forward, tick)) {
        op = forward;
        ++forwards[i];
      } else if (weights[i] < backwards[i]) {
        op = PipeOp{PipePass::weights, weights[i]++, r};
      }
      if (!op) continue;
      orders[i].push_back(*op);
      ended[pass_key(*op)] = tick + 1;
    }
  return orders;
}

// Checks that a schedule can use m micro-batches on this partition; the
// message says what would.
inline void check_pipe_schedule(PipeSchedule s, const PipePartition& p, int m) {
  const std::string counts = std::to_string(m) + " micro-batches on " + std::to_string(p.ranks) + " ranks";
  if (s == PipeSchedule::interleaved) {
    if (p.stages_per_rank < 2)
      throw Error("pipeline.schedule = \"interleaved_1f1b\" runs several chunks per rank; set pipeline.stages_per_rank >= 2");
    if (m % p.ranks != 0)
      throw Error("pipeline.schedule = \"interleaved_1f1b\" sends micro-batches round the ranks in groups of " +
                  std::to_string(p.ranks) + ", but a step has " + counts +
                  "; set pipeline.microbatches to a multiple of " + std::to_string(p.ranks));
  } else if (p.stages_per_rank != 1) {
    throw Error("pipeline.stages_per_rank = " + std::to_string(p.stages_per_rank) +
                " needs pipeline.schedule = \"interleaved_1f1b\"; the other schedules run one chunk per rank");
  }
  if ((s == PipeSchedule::one_f_one_b || s == PipeSchedule::zero_bubble) && m < p.ranks)
    throw Error("this schedule fills the pipeline with one micro-batch per rank, but a step has " + counts +
                "; set pipeline.microbatches to at least " + std::to_string(p.ranks) + ", or use gpipe");
}

// The order in which `rank` runs its passes of one step.
inline std::vector<PipeOp> pipe_schedule(PipeSchedule s, const PipePartition& p, int rank, int m) {
  check_pipe_schedule(s, p, m);
  const int P = p.ranks, v = p.stages_per_rank;
  std::vector<PipeOp> ops;
  auto F = [&](int mb, int chunk) { ops.push_back({PipePass::forward, mb, chunk}); };
  auto B = [&](int mb, int chunk) { ops.push_back({PipePass::backward, mb, chunk}); };
  switch (s) {
    case PipeSchedule::gpipe:
      for (int i = 0; i < m; ++i) F(i, rank);
      for (int i = 0; i < m; ++i) B(i, rank);
      break;
    case PipeSchedule::one_f_one_b: {
      const int warmup = std::min(P - rank - 1, m);
      for (int i = 0; i < warmup; ++i) F(i, rank);
      for (int i = 0; i < m - warmup; ++i) {
        F(warmup + i, rank);
        B(i, rank);
      }
      for (int i = m - warmup; i < m; ++i) B(i, rank);
      break;
    }
    case PipeSchedule::zero_bubble:
      ops = zero_bubble_orders(P, m)[std::size_t(rank)];
      break;
    case PipeSchedule::interleaved: {
      // Megatron-LM's order: the k-th forward of this rank is micro-batch
      // (k / (P v)) P + k % P on its local chunk (k / P) % v; backwards run
      // the chunks in reverse.
      const int total = m * v;
      auto mb_of = [&](int k) { return (k / (P * v)) * P + k % P; };
      auto forward = [&](int k) { F(mb_of(k), ((k / P) % v) * P + rank); };
      auto backward = [&](int k) { B(mb_of(k), (v - 1 - (k / P) % v) * P + rank); };
      const int warmup = std::min((P - rank - 1) * 2 + (v - 1) * P, total);
      for (int k = 0; k < warmup; ++k) forward(k);
      for (int k = 0; k < total - warmup; ++k) {
        forward(warmup + k);
        backward(k);
      }
      for (int k = total - warmup; k < total; ++k) backward(k);
      break;
    }
  }
  return ops;
}

// A recipe's pipeline on a job of `job_ranks` ranks: the partition of the
// model, checked against the schedule and the step's micro-batches.
inline PipePartition plan_pipeline(const recipe::Recipe& r, const models::TransformerConfig& config,
                                   std::int64_t job_ranks) {
  const std::int64_t P = r.pipeline.ranks > 0 ? r.pipeline.ranks : job_ranks;
  if (job_ranks % P != 0)
    throw Error("pipeline.ranks = " + std::to_string(P) + " does not divide the job's " + std::to_string(job_ranks) +
                " ranks; launch.nproc must be pipeline.ranks x the number of data-parallel replicas");
  PipePartition p = partition_pipeline(config, r.data.max_seq_length, int(P), int(r.pipeline.stages_per_rank));
  check_pipe_schedule(pipe_schedule_from_name(r.pipeline.schedule), p, int(recipe::pipeline_microbatches(r)));
  return p;
}

}  // namespace ft::parallel
