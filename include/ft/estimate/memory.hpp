#pragma once
// What a run will allocate, before it allocates anything: per rank, the
// bytes of every buffer the engine makes, named as a user thinks of them
// (weights, gradients, master weights, optimizer state, activations,
// workspace), and the peak of each phase (a training step, an evaluation).
//
// The figures come from the code that allocates, not from a formula beside
// it: the stages declare their parameters into counting buffers
// (Block::declare and friends), a micro-batch's buffers are counted from
// the layouts their resize() makes them from (models/context.hpp), shards
// are cut by the same ShardLayout, an optimizer's state and step scratch
// are what its runtime declares beside its allocations (state_bytes,
// step_scratch_bytes), and a parallelism's and an adapter's part follows
// their policies' flags. What is modelled by hand is the workspace: the largest
// buffer a step makes and frees (a chunk of logits; on the CPU, 16-bit
// GEMM operands widened to f32). tests/estimate checks every stock
// combination against the allocator's measured peak.
//
// Bytes are those the memory space counts: on the CPU the requested size
// (tensor/memory.hpp), on a device the caching allocator's block for each
// allocation, so the estimate rounds every allocation as the allocator
// does; on a GPU, cuBLASLt's workspace besides. The host also holds code,
// libraries and their buffers, which the caller measures, and MPI's own
// scratch for collectives: host_peak() is the process's max RSS.
//
// This header is how the estimate is made; estimate/memory_estimate.hpp is
// what it answers, and src/estimate/memory.cpp compiles it once into ft's
// library.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ft/adapters/adapter.hpp"
#include "ft/adapters/lora.hpp"
#include "ft/comm/mpi_scratch.hpp"
#include "ft/core/half.hpp"
#include "ft/estimate/declarations.hpp"
#include "ft/estimate/memory_estimate.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/device/cuda/workspace.hpp"
#include "ft/models/block.hpp"
#include "ft/models/context.hpp"
#include "ft/models/read.hpp"
#include "ft/models/stages.hpp"
#include "ft/nn/column_sums.hpp"
#include "ft/nn/rope.hpp"
#include "ft/optim/adafactor_runtime.hpp"
#include "ft/optim/quantized_adamw_runtime.hpp"
#include "ft/optim/elementwise_runtimes.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline_schedule.hpp"
#include "ft/parallel/shard_layout.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/stock.hpp"
#include "ft/tensor/caching_allocator.hpp"
#include "ft/train/flops.hpp"
#include "ft/optim/runtime.hpp"
#include "ft/train/four_bit_base.hpp"
#include "ft/train/setup.hpp"

namespace ft::estimate {

namespace detail {

// A stage's buffer as the engine declares it, never allocated: its entries and size only.
using Layout = models::ParameterBuffer<float>;

// What an allocation of `bytes` takes: on a device, a block of the caching
// allocator's size class, which is what its allocated figure counts; on the
// CPU, what is asked (tensor/caching_allocator.hpp).
using Blocks = memory::AllocationSize;

// Bytes of a set of buffers from its layout (models/context.hpp), a block per tensor.
struct CountBytes {
  std::uint64_t* total;
  Blocks block;
  template <class U, class Space, class Set>
  void operator()(Tensor<U, Space> Set::*, const Shape& shape) const {
    *total += block(std::uint64_t(shape.numel()) * sizeof(U));
  }
};

// The f32 copies a 16-bit GEMM makes on the CPU (device/cpu/gemm.hpp: A, B and
// C widened), for a product of [M, K] x [K, N].
template <class T>
std::uint64_t widened_gemm_bytes(index_t M, index_t N, index_t K, bool on_cpu) {
  if (!on_cpu || std::is_same_v<T, float> || std::is_same_v<T, double>) return 0;
  return std::uint64_t(M * K + K * N + M * N) * sizeof(float);
}

// The device a column sum runs on, for nn::column_span_rows: a GPU sums
// spans of rows, the CPU (and the CPU standing in for a device) every row at once.
struct GpuColumns {
  static constexpr index_t column_rows = cuda::column_rows;
};

// The spans a column sum over `rows` rows makes partials for, on the run's device.
inline index_t column_spans(index_t rows, bool on_gpu) {
  const index_t per = on_gpu ? nn::column_span_rows<GpuColumns>(rows) : nn::column_span_rows<device::Cpu>(rows);
  return (rows + per - 1) / per;
}

// The optimizer state of one shard of a buffer, as the stock optimizer of
// that name declares it (optim/*_runtime.hpp): `entries` are the tensors in
// [begin, end), as the optimizer is made with them (parallel/data_parallel.hpp).
template <class M>
std::uint64_t optimizer_state_bytes(const std::string& optimizer, const std::vector<models::ParameterEntry>& entries,
                                    index_t n, const recipe::TrainSection& t, Blocks size) {
  std::uint64_t bytes = 0;
  std::apply(
      [&](auto... o) {
        ((decltype(o)::name == optimizer
              ? void(bytes = decltype(o)::template runtime<M>::state_bytes(entries, n, t, size))
              : void()),
         ...);
      },
      stock::Optimizers{});
  return bytes;
}

// What one step of the stock optimizer of that name makes and frees on the
// run's device, where its runtime declares it (0 where it declares nothing).
template <class M>
std::uint64_t optimizer_step_scratch(const std::string& optimizer, const std::vector<models::ParameterEntry>& entries,
                                     bool on_gpu, Blocks size) {
  std::uint64_t bytes = 0;
  auto of = [&]<class O>() {
    using R = typename O::template runtime<M>;
    if constexpr (requires { R::template step_scratch_bytes<device::Cpu>(entries, size); })
      if (O::name == optimizer)
        bytes = on_gpu ? R::template step_scratch_bytes<GpuColumns>(entries, size)
                       : R::template step_scratch_bytes<device::Cpu>(entries, size);
  };
  std::apply([&](auto... o) { (of.template operator()<decltype(o)>(), ...); }, stock::Optimizers{});
  return bytes;
}

// A declared optimizer's state: one array of its declared bytes per element,
// halved in bf16 under a bf16 master where it is per element.
template <class M>
std::uint64_t declared_state_bytes(const OptimizerDeclaration& o, index_t n, Blocks block) {
  const double scale = o.elementwise_state && std::is_same_v<M, bf16> ? 0.5 : 1.0;
  const auto bytes = std::uint64_t(std::ceil(double(n) * o.state_bytes * scale));
  return bytes ? block(bytes) : 0;
}

// Whether ft's own list has a policy of this name.
template <class List>
bool stock_has(const std::string& name) {
  return std::apply([&](auto... p) { return ((decltype(p)::name == name) || ...); }, List{});
}

// Whether the optimizer named keeps one value per parameter (ZeRO cuts its buffers anywhere).
inline bool elementwise_state(const std::string& name, const OptimizerDeclaration* declared) {
  if (declared) return declared->elementwise_state;
  bool out = false;
  std::apply([&](auto... o) { ((out = out || (decltype(o)::name == name && optim::elementwise_state_of<decltype(o)>)), ...); },
             stock::Optimizers{});
  return out;
}

// A run the estimate has no model for, in one line: a policy outside ft's
// stock list that declares nothing the estimate reads.
inline void check_estimable(const recipe::Recipe& r, const Declarations& declared) {
  auto refuse = [](const char* kind, const std::string& name, const std::string& stock) {
    throw Error("no memory model for the " + std::string(kind) + " \"" + name +
                "\": it is not one of ft's (" + stock + ") and declares nothing the estimate reads");
  };
  if (!stock_has<stock::Precisions>(r.strategy.precision))
    refuse("precision", r.strategy.precision, stock::names<stock::Precisions>(", "));
  if (!stock_has<stock::Parallelisms>(parallel::canonical_name(r.strategy.parallelism)))
    refuse("parallelism", r.strategy.parallelism, stock::names<stock::Parallelisms>(", "));
  if (!stock_has<stock::Adapters>(r.strategy.adapter))
    refuse("adapter", r.strategy.adapter, stock::names<stock::Adapters>(", "));
  if (!stock_has<stock::Optimizers>(r.strategy.optimizer) && !declared.optimizer(r.strategy.optimizer))
    throw Error("no memory model for the optimizer \"" + r.strategy.optimizer +
                "\": it is not one of ft's (" + stock::names<stock::Optimizers>(", ") +
                ") and no plugin loaded declares it");
}

template <class T>
std::string dtype_name() {
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  else if constexpr (std::is_same_v<T, f16>) return "f16";
  else return "f32";
}

// The largest tensor as the model's files hold it (models/transformer.hpp
// reads them one at a time); 0 for a directory with a config.json and no
// weights yet, which can be planned for all the same.
inline std::uint64_t largest_file_tensor(const std::string& dir, const models::ModelSpec& spec) {
  std::uint64_t largest = 0;
  try {
    const io::ModelWeights weights = io::ModelWeights::open(dir);
    for (const models::WeightBinding& w : spec.weights) {
      const io::TensorView* t = weights.find(w.hf_name);
      if (!t && !w.alias.empty()) t = weights.find(w.alias);
      if (t) largest = std::max<std::uint64_t>(largest, t->bytes.size());
    }
  } catch (const Error&) {
  }
  return largest;
}

// A 4-bit base's blocks (models/quantized_weights.hpp): the packed weights
// (on the host heap), the blocks' other tensors kept whole, and the largest
// block's values, which exist while that block runs. Under ZeRO-3 a rank
// keeps the tensors of its range of each block (cut between the block's HF
// tensors, parallel/stage_shards.hpp), and dequantizes that range into a
// buffer of its own while the block is gathered (`ranges`, per block).
struct FourBitBlocks {
  std::uint64_t packed = 0, kept = 0, largest_block = 0, blocks_whole = 0;
  std::vector<std::uint64_t> ranges;
};

// The bytes a quantized [rows, cols] weight packs into: bitsandbytes' 4-bit
// blocks, or GPTQ's codes, zero points, fp16 scales and group indices.
inline std::uint64_t packed_bytes(const train::FourBitBase& base, std::uint64_t rows, std::uint64_t cols) {
  const std::uint64_t n = rows * cols;
  if (base.gptq) {
    const std::uint64_t bits = std::uint64_t(base.gptq->bits), groups =
        base.gptq->group_size == -1 ? 1 : (cols + std::uint64_t(base.gptq->group_size) - 1) / std::uint64_t(base.gptq->group_size);
    return n * bits / 8 + groups * rows * bits / 8 + groups * rows * 2 + cols * 4;
  }
  const quant::FourBitOptions& o = base.quantize ? *base.quantize : *base.stored;
  const std::uint64_t blocks = (n + std::uint64_t(o.blocksize) - 1) / std::uint64_t(o.blocksize);
  return (n + 1) / 2 + (o.double_quant ? blocks + 4 * ((blocks + 255) / 256) + 4 : 4 * blocks);
}

template <class T, class Round>
FourBitBlocks four_bit_blocks(const models::ModelSpec& spec, const std::vector<Layout>& stages,
                              const train::FourBitBase& base, const std::function<bool(index_t)>& keeps, Round block,
                              int world = 1, int part = 0) {
  FourBitBlocks out;
  const index_t L = spec.config.num_layers;
  out.ranges.assign(std::size_t(L), 0);
  for (index_t l = 0; l < L; ++l) {
    if (!keeps(l)) continue;
    const std::uint64_t values = block(std::uint64_t(stages[std::size_t(l + 1)].size()) * sizeof(T));
    out.largest_block = std::max(out.largest_block, values);
    out.blocks_whole += values;
  }
  // Each block's HF tensors: their place in its buffer, and what keeping them costs.
  struct HfTensor {
    models::ParameterEntry extent;
    std::uint64_t packed = 0, kept = 0;
  };
  std::vector<std::vector<HfTensor>> tensors(static_cast<std::size_t>(L));
  for (const models::WeightBinding& w : spec.weights) {
    if (!w.param.starts_with("layers.")) continue;
    const std::size_t dot = w.param.find('.', 7);
    const index_t l = index_t(std::stoll(w.param.substr(7, dot - 7)));
    if (!keeps(l)) continue;
    const models::ParameterEntry* entry = stages[std::size_t(l + 1)].find(w.param.substr(dot + 1));
    if (!entry) continue;
    const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
    const index_t rows = models::binding_rows(spec, w, entry->rows());
    HfTensor t{{w.hf_name, Shape{rows * cols}, entry->offset + w.row_offset * cols}};
    if (models::quantized_in_4bit_base(w, models::file_shape(w, rows, entry->shape.rank == 2 ? cols : 0).size()))
      t.packed = packed_bytes(base, std::uint64_t(rows), std::uint64_t(cols));
    else
      t.kept = block(std::uint64_t(rows * cols) * sizeof(T));
    tensors[std::size_t(l)].push_back(std::move(t));
  }
  for (index_t l = 0; l < L; ++l) {
    std::vector<models::ParameterEntry> extents;
    for (const HfTensor& t : tensors[std::size_t(l)]) extents.push_back(t.extent);
    const index_t size = stages[std::size_t(l + 1)].size();
    const parallel::ShardLayout cut(extents, size, world, false);
    const index_t begin = world > 1 ? cut.begin(part) : 0, end = world > 1 ? cut.end(part) : size;
    for (const HfTensor& t : tensors[std::size_t(l)]) {
      if (t.extent.offset < begin || t.extent.offset >= end) continue;
      out.packed += t.packed;
      out.kept += t.kept;
    }
    if (world > 1 && !extents.empty()) out.ranges[std::size_t(l)] = block(std::uint64_t(end - begin) * sizeof(T));
  }
  return out;
}

// Where a rank stands: the chunks of stages it runs, the replicas it shares
// them with, and the micro-batches it keeps in flight at once. Without a
// pipeline, one chunk holds every stage and one micro-batch is in flight.
struct Place {
  parallel::PipePartition partition;
  int pipe_rank = 0, replica = 0, replicas = 1;
  int contexts = 1;  // models::Context objects the schedule makes (parallel/pipeline.hpp)

  // The residual stream travels between ranks (point-to-point copies).
  bool across_ranks() const { return partition.ranks > 1; }
  bool holds(index_t stage) const { return partition.rank_of(partition.chunk_holding(stage)) == pipe_rank; }
  bool has_head() const { return holds(partition.layers); }
  // A tied embedding table the head's rank keeps beside its own stages.
  bool keeps_tied_table(bool tied) const { return tied && across_ranks() && has_head() && !holds(-1); }
  // The residual-stream buffers a context holds: every boundary its chunks
  // read or write (the embedding writes stream 0, the head reads stream L).
  index_t stream_buffers() const {
    std::vector<bool> used(std::size_t(partition.layers + 1), false);
    for (int c = 0; c < partition.chunks(); ++c) {
      if (partition.rank_of(c) != pipe_rank) continue;
      const index_t first = std::max<index_t>(partition.first[std::size_t(c)], 0),
                    last = std::min<index_t>(partition.last[std::size_t(c)] + 1, partition.layers);
      for (index_t s = first; s <= last; ++s) used[std::size_t(s)] = true;
    }
    return index_t(std::count(used.begin(), used.end(), true));
  }
};

// The most micro-batches a rank's schedule has started and not finished:
// the contexts its pool ends up with.
inline int most_in_flight(const std::vector<parallel::PipeOp>& ops) {
  std::map<int, std::pair<std::size_t, std::size_t>> span;  // micro-batch -> its first and last op
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto [it, fresh] = span.try_emplace(ops[i].micro_batch, i, i);
    it->second.second = i;
  }
  int most = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    int live = 0;
    for (const auto& [mb, s] : span) live += s.first <= i && i <= s.second;
    most = std::max(most, live);
  }
  return most;
}

// The configuration as rank `rank`'s copy holds it with the experts split
// over groups of P ranks (DataParallel::shape).
inline models::TransformerConfig with_expert_run(models::TransformerConfig c, int P, int rank) {
  if (P > 1 && c.moe.experts > 0) {
    c.moe.parallel = P;
    c.moe.rank = rank % P;
  }
  return c;
}

// Elements [begin, end) of a buffer as a buffer of their own.
inline Layout segment(const Layout& whole, index_t begin, index_t end) {
  Layout out;
  for (const models::ParameterEntry& e : parallel::entries_in(whole.entries(), begin, end)) out.declare(e.name, e.shape);
  return out;
}

// What the stock parallelism of this name declares (parallel/parallelism.hpp).
struct Sharding {
  bool multi_rank = false, shards_optimizer_state = false, shards_gradients = false, shards_parameters = false;
  bool pipelined = false;
};
inline Sharding sharding_of(const std::string& parallelism) {
  Sharding out;
  std::apply(
      [&](auto... p) {
        ((decltype(p)::name == parallelism
              ? void(out = {decltype(p)::multi_rank, decltype(p)::shards_optimizer_state, decltype(p)::shards_gradients,
                            decltype(p)::shards_parameters, std::is_same_v<decltype(p), parallel::Pipeline>})
              : void()),
         ...);
      },
      stock::Parallelisms{});
  return out;
}

// Whether the stock adapter of this name trains the base weights.
inline bool trains_base_weights(const std::string& adapter) {
  bool out = false;
  std::apply([&](auto... a) { ((out = out || (decltype(a)::name == adapter && decltype(a)::trains_base_weights)), ...); },
             stock::Adapters{});
  return out;
}

inline Place place_of(const recipe::Recipe& r, const models::TransformerConfig& c, int rank, int ranks) {
  Place p;
  if (!sharding_of(parallel::canonical_name(r.strategy.parallelism)).pipelined) {
    p.partition.layers = c.num_layers;
    p.partition.first = {-1};
    p.partition.last = {c.num_layers};
    p.partition.cost = {1};
    return p;
  }
  p.partition = parallel::plan_pipeline(r, c, ranks);
  p.replicas = ranks / p.partition.ranks;
  p.pipe_rank = rank / p.replicas;
  p.replica = rank % p.replicas;
  const int m = int(recipe::pipeline_microbatches(r));
  p.contexts = most_in_flight(
      parallel::pipe_schedule(parallel::pipe_schedule_from_name(r.pipeline.schedule), p.partition, p.pipe_rank, m));
  return p;
}

}  // namespace detail

// The estimate for rank `rank` of the recipe's launch.nproc, with T the
// storage dtype and M the optimizer's (the precision policy's pair).
template <element T, class M>
MemoryEstimate estimate_memory_as(const recipe::Recipe& recipe, const models::ModelSpec& spec, int rank,
                                  const Declarations& declared) {
  using A = acc_t<T>;
  const recipe::Recipe& r = recipe;
  // With expert parallelism this rank's copy holds its run of the experts (parallel/data_parallel.hpp).
  const int P = int(r.strategy.expert_parallel);
  const models::TransformerConfig c = detail::with_expert_run(spec.config, P, rank);
  const bool on_cpu = r.strategy.device == "cpu", on_gpu = r.strategy.device == "cuda";
  const bool has_master = !std::is_same_v<T, M>;
  const std::string& adapter = r.strategy.adapter;
  const std::string parallelism = parallel::canonical_name(r.strategy.parallelism);
  const bool trains_base = detail::trains_base_weights(adapter);
  const detail::Sharding sharding = detail::sharding_of(parallelism);
  const int ranks = int(std::max<std::int64_t>(1, r.launch.nproc));
  const bool multi = sharding.multi_rank && ranks > 1;
  // A pipeline rank keeps its chunks' stages; its replicas (the ranks with
  // the same stages) all-reduce gradients, or with ZeRO-1 shard the state.
  const detail::Place place = detail::place_of(r, c, rank, ranks);
  const bool pipelined = sharding.pipelined;
  const bool shards_state = pipelined ? r.pipeline.data_parallel == parallel::ZeRO<1>::name && place.replicas > 1
                                      : multi && sharding.shards_optimizer_state;
  const bool shards_grads = multi && sharding.shards_gradients;
  const bool shards_params = multi && sharding.shards_parameters;
  const bool fused = r.train.fuse_optimizer_with_backward;
  const std::string& optimizer = r.strategy.optimizer;
  const OptimizerDeclaration* declared_optimizer =
      detail::stock_has<stock::Optimizers>(optimizer) ? nullptr : declared.optimizer(optimizer);
  const bool by_element = detail::elementwise_state(optimizer, declared_optimizer);
  const index_t L = c.num_layers, C = c.hidden_size, V = c.vocab_size, HD = c.num_heads * c.head_dim;

  const detail::Blocks block{!on_cpu};

  MemoryEstimate e;
  e.device = r.strategy.device;
  e.rank = rank;
  e.ranks = multi ? ranks : 1;

  // The model's stages, declared as the engine declares them.
  std::vector<detail::Layout> stages(std::size_t(L + 2));  // embedding, blocks, head
  models::EmbeddingStage<T>::declare(stages.front(), c);
  for (index_t l = 0; l < L; ++l) models::Block<T>::declare(stages[std::size_t(l + 1)], c, l);
  models::HeadStage<T>::declare(stages.back(), c);
  // stage(i): the index of stages[i] (-1 the embedding, L the head).
  auto stage = [](std::size_t i) { return index_t(i) - 1; };
  auto keeps = [&](index_t s) { return place.holds(s) || (s == -1 && place.keeps_tied_table(c.tie_embeddings)); };
  // Parameter counts, and the bytes of each stage's buffer (values or gradients).
  std::uint64_t parameters = 0, kept = 0, all_bytes = 0, kept_bytes = 0, largest_stage = 0, largest_elsewhere = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::uint64_t size = std::uint64_t(stages[i].size()), bytes = block(size * sizeof(T));
    parameters += size;
    all_bytes += bytes;
    largest_stage = std::max(largest_stage, bytes);
    if (keeps(stage(i))) {
      kept += size;
      kept_bytes += bytes;
    } else {
      largest_elsewhere = std::max(largest_elsewhere, bytes);
    }
  }
  // Each block's rotary tables: one, or LongRoPE's short and long.
  const std::uint64_t rope = std::uint64_t(L) * (c.rope.long_factors.empty() ? 1 : 2) *
                             block(nn::rope_inverse_frequencies(c.rope).size() * sizeof(float));

  // What trains: the stages themselves, one LoRA buffer per adapted block,
  // or the prompt; each with the stage it belongs to.
  std::vector<detail::Layout> trainables;
  std::vector<index_t> trainable_stage;
  std::vector<adapters::LoraTarget> lora;
  if (trains_base) {
    for (std::size_t i = 0; i < stages.size(); ++i) {
      trainables.push_back(stages[i]);
      trainable_stage.push_back(stage(i));
    }
  } else if (adapter == adapters::LoRA::name) {
    const adapters::LoraOptions options{.r = r.lora.r,
                                        .alpha = r.lora.alpha,
                                        .target_modules = r.lora.target_modules,
                                        .target_parameters = r.lora.target_parameters,
                                        .use_rslora = r.lora.use_rslora,
                                        .rank_pattern = r.lora.rank_pattern,
                                        .alpha_pattern = r.lora.alpha_pattern};
    lora = adapters::lora_targets(spec, options);
    for (index_t l = 0; l < L; ++l) {
      std::vector<adapters::LoraTarget> mine;
      for (const auto& t : lora)
        if (t.layer == l) mine.push_back(t);
      if (mine.empty()) continue;
      detail::Layout b;
      adapters::LoraBlock<T>::declare(b, mine);
      trainables.push_back(std::move(b));
      trainable_stage.push_back(l);
    }
  } else if (adapter == adapters::Prompt::name) {
    detail::Layout p;
    p.declare("prompt_embeddings", {r.prompt_tuning.num_virtual_tokens, C});
    trainables.push_back(std::move(p));
    trainable_stage.push_back(-1);
  } else {
    throw Error("internal: no memory model for adapter \"" + adapter + "\"");
  }
  // Every rank keeps every adapter buffer (trained); the optimizer steps
  // those of this rank's stages (mine), or its shard of them.
  std::uint64_t trained = 0, trained_bytes = 0;
  std::vector<detail::Layout> mine;
  // This rank's range of each trainable buffer: its part of world.
  std::vector<std::pair<int, int>> cuts;
  const int dense_world = shards_state ? (pipelined ? place.replicas : ranks) : 1;
  const int dense_part = shards_state ? (pipelined ? place.replica : rank) : 0;
  for (std::size_t i = 0; i < trainables.size(); ++i) {
    const detail::Layout& t = trainables[i];
    trained += std::uint64_t(t.size());
    trained_bytes += block(std::uint64_t(t.size()) * sizeof(T));
    if (!place.holds(trainable_stage[i])) continue;
    // Spread over expert groups, a buffer's run of routed experts (its
    // windows: a sparse block's, or LoRA's on them) trains apart, cut over
    // the ranks that hold the same run (its index among them: rank / P).
    const index_t experts = c.moe.parallel > 1 ? t.windows_begin() : t.size();
    mine.push_back(detail::segment(t, 0, experts));
    cuts.push_back({dense_world, dense_part});
    if (experts == t.size()) continue;
    mine.push_back(detail::segment(t, experts, t.size()));
    cuts.push_back({shards_state ? ranks / P : 1, shards_state ? rank / P : 0});
  }
  // Offloaded on a device, the optimizer steps on the host: its values in M
  // (the master copy, or a copy of the weights when T is M), the step's
  // gradient copied there, the stepped weights on their way back, its state.
  const bool offloaded = !on_cpu && r.strategy.optimizer_offload;
  const detail::Blocks state_block = offloaded ? detail::Blocks{} : block;
  std::uint64_t owned = 0, owned_bytes = 0, state = 0, step_gradient_bytes = 0, largest_buffer = 0;
  std::uint64_t optimizer_scratch = 0;  // the largest a step of the device's optimizer makes and frees
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const detail::Layout& t = mine[i];
    const auto [world, part] = cuts[i];
    const parallel::ShardLayout cut(t.entries(), t.size(), world, by_element);
    const index_t begin = cut.begin(part), end = cut.end(part);
    owned += std::uint64_t(end - begin);
    owned_bytes += state_block(std::uint64_t(end - begin) * sizeof(M));
    step_gradient_bytes += block(std::uint64_t(shards_grads ? end - begin : t.size()) * sizeof(M));
    state += declared_optimizer
                 ? detail::declared_state_bytes<M>(*declared_optimizer, end - begin, state_block)
                 : detail::optimizer_state_bytes<M>(optimizer, parallel::entries_in(t.entries(), begin, end),
                                                    end - begin, r.train, state_block);
    largest_buffer = std::max(largest_buffer, block(std::uint64_t(t.size()) * sizeof(M)));
    if (!offloaded)
      optimizer_scratch = std::max(optimizer_scratch, detail::optimizer_step_scratch<M>(
                                                          optimizer, parallel::entries_in(t.entries(), begin, end),
                                                          on_gpu, block));
  }

  // A 4-bit base keeps its blocks packed, and a block's values only while it runs.
  const train::FourBitBase four_bit = train::four_bit_base(r);
  const bool packs = four_bit.any() && !trains_base;
  detail::FourBitBlocks packed;
  if (packs)
    packed = shards_params ? detail::four_bit_blocks<T>(spec, stages, four_bit, keeps, block, ranks, rank)
                           : detail::four_bit_blocks<T>(spec, stages, four_bit, keeps, block);

  // Held from setup to the end.
  // ZeRO-3 keeps this rank's range of every stage (cut as the optimizer
  // needs when the stage trains, by element when it is frozen) and gathers
  // whole stages only while they run.
  std::uint64_t forward_gathered = 0, backward_gathered = 0, head_gathered = 0, head_values = 0;
  std::uint64_t shards_bytes = 0;
  std::vector<std::uint64_t> stage_shard(stages.size(), 0);  // this rank's shard of each stage
  if (shards_params) {
    // A 4-bit base's blocks keep their range packed (FourBitBlocks).
    auto packed_block = [&](index_t s) { return packs && s >= 0 && s < L; };
    for (std::size_t i = 0; i < stages.size(); ++i) {
      if (packed_block(stage(i))) continue;
      // A block's run of experts is cut over the ranks that hold the same run (rank / P among ranks / P).
      const detail::Layout& t = stages[i];
      const index_t experts = c.moe.parallel > 1 ? t.windows_begin() : t.size();
      auto part = [&](index_t begin, index_t end, int world, int part) {
        return std::uint64_t(parallel::ShardLayout(parallel::entries_in(t.entries(), begin, end), end - begin, world,
                                                   trains_base ? by_element : true)
                                 .size(part));
      };
      std::uint64_t n = part(0, experts, ranks, rank);
      if (experts < t.size()) n += part(experts, t.size(), ranks / P, rank / P);
      stage_shard[i] = block(n * sizeof(T));
      shards_bytes += stage_shard[i];
    }
    e.held.push_back({"weights (this rank's shard)", shards_bytes + packed.kept,
                      "ZeRO-3: 1/" + std::to_string(ranks) + " of the weights in " + detail::dtype_name<T>() +
                          (packs ? ", the blocks' norms and biases of this rank's range" : "")});
    if (packs)
      e.heap_weights = {"quantized weights", packed.packed,
                        "this rank's range of the blocks' linear weights packed (" + four_bit.describe() +
                            "), on the host heap"};
    // Whole stages at each point of a step (gather_hooks in
    // parallel/data_parallel.hpp): a forward holds its stage and the next,
    // prefetched; the head its stage and the table it is tied to, with their
    // gradients when training; a block's backward its stage, the one before
    // (prefetched), its gradient and the gradient of the stage after it,
    // whose reduction is still in flight. A tied table's gradient is made at
    // the head's forward and kept to the end of backward.
    auto V = [&](index_t s) -> std::uint64_t {
      return s < -1 || s > L ? 0 : block(std::uint64_t(stages[std::size_t(s + 1)].size()) * sizeof(T));
    };
    auto G = [&](index_t s) -> std::uint64_t { return trains_base ? V(s) : 0; };
    // A packed block being prefetched: this rank's range, dequantized.
    auto D = [&](index_t s) -> std::uint64_t { return packed_block(s) ? packed.ranges[std::size_t(s)] : 0; };
    const std::uint64_t table_gradient = c.tie_embeddings ? G(-1) : 0;
    for (index_t s = -1; s < L; ++s) forward_gathered = std::max(forward_gathered, V(s) + V(s + 1) + D(s + 1));
    head_values = V(L) + (c.tie_embeddings ? V(-1) : 0);
    head_gathered = head_values + G(L) + table_gradient;
    for (index_t l = L - 1; l >= 0; --l)
      backward_gathered = std::max(backward_gathered, V(l) + V(l - 1) + D(l - 1) + G(l) + G(l + 1) + table_gradient);
    backward_gathered = std::max(backward_gathered, V(-1) + G(-1) + G(0));
  } else if (packs) {
    e.held.push_back({"weights", kept_bytes - packed.blocks_whole + packed.kept,
                      "the embedding and head in " + detail::dtype_name<T>() + ", and the blocks' norms and biases"});
    e.heap_weights = {"quantized weights", packed.packed,
                      "the blocks' linear weights packed (" + four_bit.describe() + "), on the host heap"};
    forward_gathered = backward_gathered = packed.largest_block;
  } else if (place.across_ranks()) {
    e.held.push_back({"weights (this rank's stages)", kept_bytes,
                      std::to_string(kept) + " of " + std::to_string(parameters) + " parameters in " +
                          detail::dtype_name<T>() +
                          (place.keeps_tied_table(c.tie_embeddings) ? ", with the embedding table the head is tied to" : "")});
  } else {
    e.held.push_back({"weights", all_bytes, std::to_string(parameters) + " parameters in " + detail::dtype_name<T>()});
  }
  e.held.push_back({"rotary frequencies", rope, "per block"});
  if (!trains_base)
    e.held.push_back({"adapter weights", trained_bytes, std::to_string(trained) + " trainable parameters"});
  // Gradients in T: the model's own under a full fine-tune (one block's
  // buffer serves every block when the optimizer is fused into backward), the adapter's otherwise.
  if (!shards_params || !trains_base) {
    auto bytes_of = [&](const detail::Layout& l) { return block(std::uint64_t(l.size()) * sizeof(T)); };
    std::uint64_t grads = trains_base ? kept_bytes : trained_bytes;
    if (fused && trains_base && L > 0) grads = bytes_of(stages.front()) + bytes_of(stages.back()) + bytes_of(stages[1]);
    e.held.push_back({"gradients", grads, detail::dtype_name<T>() + (fused ? ", fused: one block's buffer shared" : "")});
  }
  std::vector<Term>& stepped_in = offloaded ? e.host : e.held;
  if (has_master || offloaded)
    stepped_in.push_back({"master weights", owned_bytes,
                          detail::dtype_name<M>() + " copy of what this rank steps" + (offloaded ? ", on the host" : "")});
  if (offloaded)
    e.host.push_back({"offload transfers", owned * (sizeof(M) + (has_master ? sizeof(T) : 0)),
                      "this rank's step gradient copied to the host" +
                          std::string(has_master ? ", and its stepped weights in " + detail::dtype_name<T>() : "")});
  if (!fused && (has_master || shards_grads))
    e.held.push_back({"step gradients", step_gradient_bytes,
                      detail::dtype_name<M>() + ", accumulated over micro-batches"});
  stepped_in.push_back({"optimizer state", state, optimizer + (shards_state ? ", this rank's shard" : "") +
                                                   (offloaded ? ", on the host" : "")});
  // Reduce-scatter keeps two buffers in flight (the one whose backward just
  // completed and the one before it), each with the whole gradient in M
  // (when it must be converted) and this rank's part of the sum. Their
  // scratch is reused, so between steps it holds what the last two buffers
  // of backward needed, and during backward the largest consecutive pair.
  std::uint64_t reduction_after = 0, reduction_most = 0;
  if (shards_grads) {
    std::vector<std::uint64_t> in_flight;  // per buffer, in the order backward completes them
    for (std::size_t i = mine.size(); i-- > 0;) {
      const auto [world, part] = cuts[i];
      const parallel::ShardLayout cut(mine[i].entries(), mine[i].size(), world, by_element);
      in_flight.push_back((has_master ? block(std::uint64_t(mine[i].size()) * sizeof(M)) : 0) +
                          block(std::uint64_t(cut.size(part)) * sizeof(M)));
    }
    for (std::size_t i = 0; i < in_flight.size(); ++i) {
      const std::uint64_t pair = in_flight[i] + (i > 0 ? in_flight[i - 1] : 0);
      reduction_most = std::max(reduction_most, pair);
      if (i + 1 == in_flight.size()) reduction_after = pair;
    }
    e.held.push_back({"reduction buffers", reduction_after, "the last two buffers' gradients of a backward, kept"});
  }
  // MPI's non-blocking reductions make scratch of their own for as long as
  // they run (comm/mpi_scratch.hpp). Two buffers' reductions are in flight
  // at once, as above (one when the optimizer is fused into backward, which
  // waits for each). A GPU reduces through NCCL, in device memory.
  const int reducers = pipelined ? place.replicas : multi ? ranks : 1;
  if (on_cpu && reducers > 1) {
    const comm::Reduction reduction = shards_grads ? comm::Reduction::reduce_scatter : comm::Reduction::all_reduce;
    std::uint64_t previous = 0, most = 0;
    for (auto t = mine.rbegin(); t != mine.rend(); ++t) {
      const std::uint64_t bytes = comm::mpi_scratch_bytes(reduction, reducers, std::uint64_t(t->size()) * sizeof(M));
      most = std::max(most, bytes + (fused ? 0 : previous));
      previous = bytes;
    }
    char what[96];
    const int copies = comm::mpi_scratch_copies(reduction, reducers);
    std::snprintf(what, sizeof what, "%d cop%s of each %s gradient", copies, copies == 1 ? "y" : "ies",
                  shards_grads ? "reduce-scattered" : "all-reduced");
    e.comm_scratch = {"MPI's collective scratch", most, std::string(what) + (fused ? "" : ", two buffers in flight")};
  }

  // A training micro-batch: rows x tokens (the longest a batch can be); a
  // batch of preference pairs holds two sequences a pair.
  const index_t sequences_per_row = r.data.format == "preference" ? 2 : 1;
  const index_t B = r.train.per_device_train_batch_size * sequences_per_row;
  const index_t T_ = r.data.max_seq_length + (adapter == adapters::Prompt::name ? r.prompt_tuning.num_virtual_tokens : 0);
  const index_t N = B * T_;
  e.rows = B;
  e.tokens = T_;
  e.widest_product_rows = N;
  for (const detail::Layout& t : trainables)
    for (const models::ParameterEntry& entry : t.entries())
      if (entry.shape.rank == 2) e.widest_product_rows = std::max<std::int64_t>(e.widest_product_rows, entry.shape[0]);
  e.in_flight = place.contexts;
  if (pipelined) e.pipeline = place.partition.describe();
  const models::MemoryOptions memory{train::checkpoint_every(r.train.gradient_checkpointing),
                                     r.train.activation_offloading};
  // A context per micro-batch in flight (one without a pipeline), each
  // with this rank's blocks' activations and stream buffers; the
  // recomputed set and the backward scratch are shared by all of them.
  const std::uint64_t contexts = std::uint64_t(place.contexts);
  const std::string in_flight = contexts > 1 ? std::to_string(contexts) + " micro-batches in flight x " : "";
  std::uint64_t blocks_here = 0, blocks_kept = 0;
  bool any_checkpointed = false;
  for (index_t l = 0; l < L; ++l) {
    if (!place.holds(l)) continue;
    ++blocks_here;
    if (memory.checkpoints(l)) any_checkpointed = true;
    else ++blocks_kept;
  }
  std::uint64_t per_block = 0;
  models::BlockActivations<T>::layout(c, B, T_, detail::CountBytes{&per_block, block});
  e.activations.push_back({"block activations", per_block * blocks_kept * contexts,
                           in_flight + std::to_string(blocks_kept) + " of " + std::to_string(L) + " blocks keep theirs"});
  if (any_checkpointed)
    e.activations.push_back({"recomputed activations", per_block, "one set shared by checkpointed blocks"});
  const std::uint64_t stream_bytes = std::uint64_t(N * C) * sizeof(T), stream = block(stream_bytes);
  // Offloading: two buffers in turn, a restored input and the gradient;
  // otherwise each block's input, the head's, and the gradient.
  const std::uint64_t stream_buffers = memory.offload_inputs ? 4 : std::uint64_t(place.stream_buffers()) + 1;
  e.activations.push_back({"residual stream", stream * stream_buffers * contexts,
                           in_flight + (memory.offload_inputs ? "two buffers in turn, a restored input and the gradient"
                                                              : "every block's input, the head's, and the gradient")});
  if (place.has_head()) {
    std::uint64_t head = 0;
    models::HeadActivations<T>::layout(N, C, detail::CountBytes{&head, block});
    e.activations.push_back({"head", head * contexts, in_flight + "the final norm's output and its gradient"});
  }
  std::uint64_t embedding_norm = 0;
  if (place.holds(-1)) models::EmbeddingActivations<T>::layout(c, N, detail::CountBytes{&embedding_norm, block});
  if (embedding_norm > 0)
    e.activations.push_back({"embedding norm", embedding_norm * contexts, in_flight + "the norm's input and statistics"});
  std::uint64_t scratch = 0;
  models::BlockScratch<T>::layout(c, N, detail::CountBytes{&scratch, block});
  e.activations.push_back({"backward scratch", scratch, "one set every block's backward uses"});
  std::uint64_t exchange = 0;
  models::ExpertExchange<T, device::Cpu>::layout(c, N, detail::CountBytes{&exchange, block});
  if (exchange > 0)
    e.activations.push_back({"expert exchange", exchange,
                             "rows travelling to and from this rank's experts, every rank's tokens at most"});
  if (pipelined && r.pipeline.schedule == "zero_bubble") {
    std::uint64_t deferred = 0;
    models::DeferredGradients<T>::layout(c, N, detail::CountBytes{&deferred, block});
    e.activations.push_back({"deferred output gradients", deferred * blocks_here * contexts,
                             in_flight + "each block's projections' output gradients, kept for its weight gradients"});
  }
  if (memory.offload_inputs) {
    const Term offloaded{"offloaded block inputs", stream_bytes * blocks_here * contexts,
                         in_flight + "host copies of each block's input"};
    (on_cpu ? e.activations : e.host).push_back(offloaded);
  }
  // A device gets the batch's token ids, targets and positions, and each
  // row's documents only when rows are packed (models/context.hpp).
  if (!on_cpu)
    e.activations.push_back({"batch arrays",
                             (r.data.packing ? 4 : 3) * block(std::uint64_t(N) * sizeof(std::int32_t)) * contexts,
                             r.data.packing ? "token ids, targets, positions, documents" : "token ids, targets, positions"});
  if (!lora.empty()) {
    // Each adapted block keeps A x and its gradient [N, r], and with dropout x's dropped copy.
    std::uint64_t bytes = 0;
    for (index_t l = 0; l < L; ++l) {
      if (!place.holds(l)) continue;
      index_t widest = 0;
      bool adapted = false;
      for (const auto& t : lora)
        if (t.layer == l) {
          adapted = true;
          widest = std::max(widest, t.in);
        }
      if (!adapted) continue;
      bytes += 2 * block(std::uint64_t(N * r.lora.r) * sizeof(T));
      if (r.lora.dropout > 0) bytes += block(std::uint64_t(N * widest) * sizeof(T));
    }
    e.activations.push_back({"adapter activations", bytes, "A x and its gradient per adapted block"});
  }

  // The largest buffers a step makes and frees. The LM head works on chunks
  // of rows (nn/cross_entropy.hpp): a chunk of logits and, on the CPU in 16
  // bits, its GEMMs' f32 copies; a block's projections widen on the CPU too.
  const index_t head_chunk = models::HeadOptions{}.chunk_rows, chunk = std::min(head_chunk, N);
  // An objective over sequences (preference tuning) keeps one more value a
  // row of the chunk: its mean logit, then its weight (models/stages.hpp).
  auto row_values = [&](index_t rows) {
    return block(std::uint64_t(rows) * sizeof(double)) * (sequences_per_row == 2 ? 2 : 1);
  };
  const std::uint64_t logits = block(std::uint64_t(chunk * V) * sizeof(T)) + row_values(chunk);
  const std::uint64_t head_gemm = detail::widened_gemm_bytes<T>(chunk, V, C, on_cpu);
  // The widest of a block's projections over `rows` tokens.
  auto block_gemm_of = [&](index_t rows) {
    std::uint64_t most = 0;
    for (auto [in, out] : {std::pair{C, c.qkv_width()}, std::pair{HD, C}, std::pair{C, c.mlp_in_width()},
                           std::pair{c.widest_mlp(), C}})
      most = std::max(most, detail::widened_gemm_bytes<T>(rows, out, in, on_cpu));
    // A sparse layer's experts: at most every token in one expert (a token picks an expert once).
    if (c.moe.sparse_layers() > 0)
      for (auto [in, out] : {std::pair{C, 2 * c.moe.expert_size}, std::pair{c.moe.expert_size, C}})
        most = std::max(most, detail::widened_gemm_bytes<T>(rows, out, in, on_cpu));
    return most;
  };
  const std::uint64_t block_gemm = block_gemm_of(N);
  // Backward's column sums (nn/column_sums.hpp) when the base trains: a
  // norm's weight (and a layer norm's bias) gradient, and a linear's bias
  // gradient, from partials over spans of the micro-batch's rows.
  const index_t spans = detail::column_spans(N, on_gpu);
  const index_t widest_bias = std::max({c.qkv_bias ? c.qkv_width() : 0, c.o_bias ? C : 0,
                                        c.mlp_bias ? std::max(c.mlp_in_width(), C) : 0});
  const std::uint64_t column_partials =
      trains_base ? std::max((c.norm == nn::NormKind::layer ? 2 : 1) * block(std::uint64_t(spans * C) * sizeof(A)),
                             widest_bias ? block(std::uint64_t(spans * widest_bias) * sizeof(A)) : 0)
                  : 0;
  // A pipeline rank sends a copy of the stream it passes on, kept until the
  // next rank has taken it (in host memory, which is the device's only on
  // the CPU); the head's part of a tied table's gradient arrives on the
  // embedding's rank after backward, into a buffer of its own.
  const std::uint64_t sent = place.across_ranks() && on_cpu ? stream : 0;
  const std::uint64_t tied_gradient = place.across_ranks() && c.tie_embeddings && trains_base && place.holds(-1)
                                          ? block(std::uint64_t(stages.front().size()) * sizeof(T))
                                          : 0;
  const std::uint64_t head_work = place.has_head() ? logits + head_gemm + head_gathered : 0;
  e.reducing_workspace =
      block_gemm + std::max(forward_gathered, backward_gathered) + (reduction_most - reduction_after) + sent;
  e.step_workspace = {"workspace",
                      std::max({head_work + sent, e.reducing_workspace, column_partials + sent, tied_gradient,
                                optimizer_scratch}),
                      (place.has_head() ? "a chunk of " + std::to_string(chunk) + " rows of logits" +
                                              (head_gemm ? " and the f32 copies of 16-bit GEMMs" : "")
                                        : std::string(block_gemm ? "the f32 copies of a block's 16-bit GEMMs"
                                                                 : "a column sum's partials")) +
                          (shards_params ? ", or two gathered stages" : "") + (sent ? ", a sent copy of the stream" : "") +
                          (tied_gradient ? ", or the head's part of the tied table's gradient" : "") +
                          (optimizer_scratch ? ", or an optimizer step's scratch" : "")};
  // Fused into backward under a master copy, each buffer's gradient is
  // converted to M before its step (parallel/data_parallel.hpp).
  if (fused && has_master) {
    e.step_workspace.bytes += largest_buffer;
    e.reducing_workspace += largest_buffer;
  }

  // Setup measures the device's GEMM peak on three square matrices
  // (train/flops.hpp), freed before the model loads. Then each rank
  // allocates and loads only what it keeps (train/setup.hpp): a pipeline
  // rank its stages, ZeRO-3 a stage at a time, whole, keeping its shard of
  // it; the adapter and the trainable state come after, and the reduction
  // buffers with the first backward. On a GPU the measurement's first
  // product allocates cuBLASLt's workspace, which stays for the run.
  const std::uint64_t blas = r.strategy.device == "cuda" ? cuda::blas_workspace_bytes : 0;
  if (blas) e.held.push_back({"cuBLASLt workspace", blas, "for the products, kept from setup on"});
  {
    const std::uint64_t n = std::uint64_t(on_cpu ? device::Cpu::gemm_peak_size : cuda::gemm_peak_size);
    const std::uint64_t measurement = 3 * block(n * n * (on_cpu ? sizeof(float) : sizeof(T))) + blas;
    const std::uint64_t laid_out = e.held_bytes() - reduction_after;
    // ZeRO-3 makes each stage's shard as the stage loads, beside its whole values.
    std::uint64_t streaming = 0;
    if (shards_params) {
      std::uint64_t made = 0;
      for (std::size_t i = 0; i < stages.size(); ++i) {
        made += stage_shard[i];
        streaming = std::max(streaming, made + block(std::uint64_t(stages[i].size()) * sizeof(T)));
      }
      streaming += packed.kept + rope + blas;
    }
    e.loading_weights = shards_params ? streaming
                        : packed.largest_block > 0
                            ? kept_bytes - packed.blocks_whole + packed.kept + packed.largest_block + rope + blas
                            : kept_bytes + rope + blas;
    if (measurement >= std::max(laid_out, streaming))
      e.setup_workspace = {"GEMM peak measurement", measurement,
                           "three " + std::to_string(n) + " x " + std::to_string(n) +
                               " matrices, freed before the model loads"};
    else if (streaming > laid_out)
      e.setup_workspace = {"loading the model", streaming, "this rank's shards and one whole stage, loading"};
    else
      e.setup_workspace = {"loading the model", laid_out, "what this rank keeps, and its trainable state"};
  }

  // Evaluation: a context of the step's, rows of the evaluation batch,
  // forward only; under ZeRO-3 the running stage and the prefetched next
  // one, or the head and its table beside the logits, values only.
  const index_t eval_rows =
      r.train.per_device_eval_batch_size > 0 ? r.train.per_device_eval_batch_size * sequences_per_row : B;
  const index_t eval_N = eval_rows * T_, eval_chunk = std::min(head_chunk, eval_N);
  const std::uint64_t eval_stream = block(std::uint64_t(eval_N * C) * sizeof(T));
  const std::uint64_t eval_logits = block(std::uint64_t(eval_chunk * V) * sizeof(T)) + row_values(eval_chunk) +
                                    detail::widened_gemm_bytes<T>(eval_chunk, V, C, on_cpu);
  const std::uint64_t eval_sent = place.across_ranks() && on_cpu ? eval_stream : 0;
  e.eval_workspace = {"workspace",
                      std::max(place.has_head() ? eval_logits + head_values : 0, block_gemm_of(eval_N) + forward_gathered) +
                          eval_sent,
                      std::string(place.has_head() ? "a chunk of logits" : "the f32 copies of a block's 16-bit GEMMs") +
                          (shards_params ? ", or two gathered stages" : "") + (eval_sent ? ", a sent copy of the stream" : "")};
  // An evaluation batch with more rows than a training one grows the context
  // it runs on, which keeps that size until the next step makes its buffers
  // anew: the final save (after the final evaluation) finds it grown, and with
  // eval_steps so does the first step after each evaluation.
  std::uint64_t growth = 0;
  if (eval_rows > B) {
    std::uint64_t eval_block = 0;
    models::BlockActivations<T>::layout(c, eval_rows, T_, detail::CountBytes{&eval_block, block});
    std::uint64_t eval_embedding_norm = 0;
    if (place.holds(-1))
      models::EmbeddingActivations<T>::layout(c, eval_N, detail::CountBytes{&eval_embedding_norm, block});
    growth = (eval_block - per_block) * blocks_kept + (eval_stream - stream) * stream_buffers +
             (eval_embedding_norm - embedding_norm);
    e.eval_workspace.bytes += growth;
  }
  const bool evaluates = !r.data.validation.empty() || r.data.validation_split > 0;
  if (evaluates && growth > 0 && r.train.eval_steps > 0 && growth > e.step_workspace.bytes)
    e.step_workspace = {"workspace", growth, "the context an evaluation grew, made anew for the step's batch"};
  // Saving: rank 0 writes the model a stage at a time, each put together on
  // every rank that lacks it (parallel/stage_reads.hpp: ZeRO-3 gathers it, a
  // pipeline's owner broadcasts it to replica 0's pipe), when the model is
  // what is written; merging LoRA into the weights gathers all of them at once.
  const bool merges = r.strategy.adapter == adapters::LoRA::name && r.lora.save_merged;
  // Split experts: every rank puts a sparse stage's experts together from
  // its group (models/transformer.hpp gather_rows), one stage at a time, or
  // every stage to merge the adapter. LoRA on the experts has its A and B of
  // every layer's experts put together at once (parallel/data_parallel.hpp),
  // to save them.
  const bool splits_experts = c.moe.parallel > 1 && c.moe.sparse_layers() > 0;
  std::uint64_t experts = 0, adapter_experts = 0;
  if (splits_experts) {
    experts = block(std::uint64_t(c.moe.experts * 2 * c.moe.expert_size * C) * sizeof(T)) +
              block(std::uint64_t(c.moe.experts * C * c.moe.expert_size) * sizeof(T));
    for (const adapters::LoraTarget& t : lora)
      if (t.stacked())
        adapter_experts += block(std::uint64_t(t.experts * t.rank * t.in) * sizeof(T)) +
                           block(std::uint64_t(t.experts * t.rows * t.rank) * sizeof(T));
  }
  const std::uint64_t all_experts = experts * std::uint64_t(c.moe.sparse_layers()) + adapter_experts;
  const std::string from_group = splits_experts ? ", with the experts gathered from the expert group" : "";
  if (shards_params) {
    if (merges)
      e.save_workspace = {"workspace", all_bytes + all_experts,
                          "the whole model gathered to merge the adapter into" + from_group};
    else if (trains_base)
      e.save_workspace = {"workspace", largest_stage + experts, "one gathered stage at a time" + from_group};
    else if (adapter_experts > 0)
      e.save_workspace = {"workspace", adapter_experts, "the adapter's experts gathered from the expert group"};
  } else if (place.across_ranks()) {
    if (merges)
      e.save_workspace = {"workspace", all_bytes - kept_bytes,
                          "the other ranks' stages, to merge the adapter into the whole model"};
    else if (trains_base && place.replica == 0)
      e.save_workspace = {"workspace", largest_elsewhere, "another rank's stage at a time"};
  } else if (splits_experts) {
    if (merges)
      e.save_workspace = {"workspace", all_experts,
                          "every sparse stage's experts gathered from the expert group, to merge the adapter"};
    else if (trains_base)
      e.save_workspace = {"workspace", experts, "one sparse stage's experts gathered from the expert group"};
    else if (adapter_experts > 0)
      e.save_workspace = {"workspace", adapter_experts, "the adapter's experts gathered from the expert group"};
  }
  if (evaluates && growth > 0) {
    e.save_workspace.bytes += growth;
    e.save_workspace.detail += std::string(e.save_workspace.detail.empty() ? "" : ", and ") +
                               "the context the final evaluation grew";
  }
  if (e.save_workspace.name.empty()) e.save_workspace.name = "workspace";
  return e;
}

// One rank's estimate, with the recipe's precision (its storage and optimizer dtypes).
inline MemoryEstimate estimate_memory_of_rank(const recipe::Recipe& recipe, const models::ModelSpec& spec, int rank,
                                              const Declarations& declared) {
  std::optional<MemoryEstimate> out;
  std::apply(
      [&](auto... p) {
        ((decltype(p)::name == recipe.strategy.precision
              ? void(out = estimate_memory_as<element_t<decltype(p)::storage>, element_t<decltype(p)::master>>(
                         recipe, spec, rank, declared))
              : void()),
         ...);
      },
      stock::Precisions{});
  if (!out) throw Error("internal: no memory model for precision \"" + recipe.strategy.precision + "\"");
  return *out;
}

}  // namespace ft::estimate
