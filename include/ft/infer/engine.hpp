#pragma once
// One forward step of inference over several sequences at once: each
// sequence brings its new tokens (a whole prompt when it starts, then one
// token per step) and its KvCache. The new tokens of all sequences form
// the rows of one batch, so every projection is one GEMM for all of them;
// only attention is per sequence, over its own cache. The math is the
// training model's (models/block.hpp with the cache as its attention step),
// on the model's weights, which every sequence shares read-only.
//
// The engine runs on its model's device: weights, caches and every
// activation stay in the device's memory; a step sends the new tokens'
// ids, positions and cache places, and brings back each sequence's
// next-token logits, the only data that crosses per step (sampling is the
// host's, generate.hpp).
//
// A sequence may name one of the engine's adapters (adapter.hpp): its LoRA
// acts on that sequence's rows only, its virtual tokens join the first step.
//
// Not thread-safe: one step at a time (a server batches requests into steps).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "ft/core/compiled_dtypes.hpp"
#include "ft/device/upload.hpp"
#include "ft/infer/adapter.hpp"
#include "ft/infer/attention.hpp"
#include "ft/infer/attention_rows.hpp"
#include "ft/infer/kv_cache.hpp"
#include "ft/models/transformer.hpp"
#include "ft/nn/cross_entropy.hpp"
#include "ft/nn/embedding.hpp"
#include "ft/nn/linear.hpp"
#include "ft/nn/norm.hpp"
#include "ft/tensor/array.hpp"

namespace ft::infer {

template <element T, class Device = device::Cpu>
struct SequenceStep {
  KvCache<T, Device>* cache;
  std::span<const std::int32_t> tokens;  // new tokens, at positions cache->length() onwards
  int adapter = -1;                       // index of one of the engine's adapters, -1 for none
  bool every_position = false;            // logits after each new token, not only the last
};

template <element T, class Device = device::Cpu>
class Engine {
public:
  using A = acc_t<T>;
  using Memory = typename Device::Memory;
  explicit Engine(models::Transformer<T, Device>& model) : model_(model) { router_.engine = this; }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  models::Transformer<T, Device>& model() { return model_; }

  // Loads a PEFT adapter for sequences to name by the returned index.
  int load_adapter(const std::filesystem::path& dir) {
    adapters_.push_back(std::make_unique<Adapter<T, Device>>(model_, dir));
    return int(adapters_.size()) - 1;
  }
  const Adapter<T, Device>& adapter(int index) const { return *adapters_.at(std::size_t(index)); }
  int adapters() const { return int(adapters_.size()); }

  // The positions a sequence's first step adds before its prompt (prompt tuning's virtual tokens).
  index_t virtual_tokens(int adapter) const { return adapter < 0 ? 0 : this->adapter(adapter).virtual_tokens(); }

  // Runs the new tokens of each sequence through the model and appends
  // their keys and values to the sequence's cache. logits receive the
  // next-token logits after each sequence's last new token [V], or after
  // each of its new tokens [tokens, V] (every_position), sequence after
  // sequence.
  //
  // A sequence's logits do not depend on what else is in the batch: every
  // product is row-invariant (device/cpu/row_invariant_gemm.hpp) and the rest
  // of the step is row by row or per sequence. So greedy output is the same
  // served alone or among many. (On the CPU; a GPU's products are its BLAS
  // library's, which may pick kernels by the number of rows, and its
  // attention splits a row's keys by the step's shape.)
  void step(std::span<const SequenceStep<T, Device>> sequences, float* logits) {
    const RowInvariantGemm row_invariant;
    const models::TransformerConfig& c = model_.config();
    const index_t S = index_t(sequences.size()), C = c.hidden_size, V = c.vocab_size;
    batch_.B = 1;
    batch_.input_ids.clear();
    batch_.positions.clear();
    rows_.clear();
    cache_rows_.clear();
    long_rows_.clear();
    const bool longrope = !c.rope.long_factors.empty();
    bool lora = false;
    for (const SequenceStep<T, Device>& s : sequences) {
      if (s.tokens.empty()) throw Error("internal: an inference step with no new tokens for a sequence");
      if (s.adapter >= adapters()) throw Error("internal: a sequence names adapter " + std::to_string(s.adapter));
      std::span<const std::int32_t> tokens = s.tokens;
      // LongRoPE: a sequence reaching original_max_position_embeddings takes
      // the long factors at every position, so one whose cache holds short
      // ones starts again from its first token, as HF's Phi-3 generate drops
      // its cache there.
      const index_t limit = c.rope.position_limit, cached = s.cache->length();
      if (longrope && cached > 0 && cached <= limit && cached + index_t(tokens.size()) > limit) {
        restart_.assign(s.cache->tokens().begin(), s.cache->tokens().end());
        restart_.insert(restart_.end(), tokens.begin(), tokens.end());
        s.cache->clear();
        tokens = restart_;
      }
      // Virtual tokens come first, on the sequence's first step; their ids are placeholders.
      const index_t virtual_rows = s.cache->length() == 0 ? virtual_tokens(s.adapter) : 0;
      const index_t n = virtual_rows + index_t(tokens.size());
      if (s.cache->length() + n > s.cache->capacity())
        throw Error("a sequence of " + std::to_string(s.cache->length() + n) + " tokens does not fit max_model_len = " +
                    std::to_string(s.cache->capacity()));
      rows_.push_back({index_t(batch_.input_ids.size()), n, virtual_rows, s.adapter});
      lora = lora || (s.adapter >= 0 && adapter(s.adapter).is_lora());
      for (index_t i = 0; i < n; ++i) {
        const std::int32_t id = i < virtual_rows ? 0 : tokens[std::size_t(i - virtual_rows)];
        if (id < 0 || id >= V)
          throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
        batch_.input_ids.push_back(id);
        batch_.positions.push_back(std::int32_t(s.cache->length() + i));
        cache_rows_.push_back({s.cache->keys(0), s.cache->values(0), s.cache->layer_stride()});
      }
      if (longrope) long_rows_.insert(long_rows_.end(), std::size_t(n), s.cache->length() + n > limit ? 1 : 0);
    }
    const index_t N = index_t(batch_.input_ids.size());
    batch_.T = N;
    batch_.targets.assign(std::size_t(N), -100);
    sized(x_, N, C);
    sized(y_, N, C);
    activations_.resize(c, batch_);
    const std::int32_t* ids = device::upload<Device>(ids_, batch_.input_ids);
    if (c.position_embeddings > 0) nn::check_position_rows(c.position_embeddings, batch_.positions);
    const std::int32_t* positions = device::upload<Device>(positions_, batch_.positions);
    const cache_rows::CacheRow<T>* cache_rows = device::upload<Device>(device_cache_rows_, cache_rows_);
    const std::uint8_t* long_rows = longrope ? device::upload<Device>(long_rows_device_, long_rows_) : nullptr;

    nn::embedding_forward<Device>(x_.data(), ids, model_.embedding().table(), N, C);
    const bool scale = c.embedding_multiplier != 1;  // the token rows only, or every row (models/stages.hpp)
    if (scale && c.embedding_scale_in_lookup)
      nn::scale_into<Device>(x_.data(), x_.data(), models::embedding_scale<T>(c), N * C);
    for (const Rows& r : rows_)
      if (r.virtual_rows > 0)
        Device::copy(x_.data() + r.first * C, adapter(r.adapter).virtual_embeddings(),
                     std::size_t(r.virtual_rows * C) * sizeof(T));
    if (c.position_embeddings > 0)
      nn::embedding_forward<Device>(x_.data(), positions, model_.embedding().position_table(), N, C,
                                    /*accumulate=*/true);
    if (scale && !c.embedding_scale_in_lookup)
      nn::scale_into<Device>(x_.data(), x_.data(), models::embedding_scale<T>(c), N * C);
    if (c.embedding_norm) {  // the first block's norm statistics are free until it runs
      model_.embedding().normalise(y_.data(), activations_.n1_mean.data(), activations_.n1_rstd.data(), x_.data(), N);
      std::swap(x_, y_);
    }
    const index_t qkv_width = c.qkv_width(), HD = c.num_heads * c.head_dim;
    for (index_t l = 0; l < c.num_layers; ++l) {
      models::Block<T, Device>& block = model_.blocks()[std::size_t(l)];
      model_.dequantize_stage(l);  // a 4-bit layer's values, for this step
      const CachedAttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.sliding_window[std::size_t(l)],
                                       c.attention_multiplier, c.alibi, c.attention_softcap};
      router_.layer = l;
      block.set_adapter(lora ? &router_ : nullptr);
      block.forward(y_.data(), x_.data(), N, positions, block.rope_tables(long_rows), activations_,
                    [&](models::BlockActivations<T, Memory>& a) {
        append_to_cache<Device>(a.qkv.data(), cache_rows, positions, N, l, shape);  // the new keys and values join
        if constexpr (std::is_same_v<Device, device::Cpu>) {
          cached_.clear();
          for (index_t i = 0; i < S; ++i) {
            const SequenceStep<T, Device>& s = sequences[std::size_t(i)];
            const index_t r0 = rows_[std::size_t(i)].first;
            cached_.push_back({a.attention.data() + r0 * HD, a.qkv.data() + r0 * qkv_width,
                               batch_.positions.data() + r0, rows_[std::size_t(i)].count, s.cache->keys(l),
                               s.cache->values(l)});
          }
          cached_attention<T>(cached_, shape);
        } else {
          const cache_rows::KeySplit split =
              cache_rows::split_keys(N, c.num_heads, longest_keys(batch_.positions, shape.window));
          if (const std::size_t scratch = attention_partials(N, shape, split); partials_.size(0) < index_t(scratch))
            partials_ = Tensor<A, Memory>(Shape{index_t(scratch)});
          cached_attention_rows<Device>(a.attention.data(), a.qkv.data(), cache_rows, positions, N, l, shape, split,
                                        partials_.data());
        }
      });
      block.set_adapter(nullptr);
      model_.drop_dequantized(l);
      std::swap(x_, y_);
    }
    for (std::size_t i = 0; i < sequences.size(); ++i) {
      const Rows& r = rows_[i];
      sequences[i].cache->extend(r.count, std::span(batch_.input_ids).subspan(std::size_t(r.first + r.virtual_rows),
                                                                             std::size_t(r.count - r.virtual_rows)));
    }

    // The head on each sequence's last row only, or on the rows of all its
    // new tokens (the last ones of its rows: virtual tokens and a LongRoPE
    // restart's come first).
    index_t R = 0;
    for (const SequenceStep<T, Device>& s : sequences) R += s.every_position ? index_t(s.tokens.size()) : 1;
    sized(last_, R, C);
    for (index_t i = 0, at = 0; i < S; ++i) {
      const SequenceStep<T, Device>& s = sequences[std::size_t(i)];
      const index_t n = s.every_position ? index_t(s.tokens.size()) : 1;
      const index_t row = rows_[std::size_t(i)].first + rows_[std::size_t(i)].count - n;
      Device::copy(last_.data() + at * C, x_.data() + row * C, std::size_t(n * C) * sizeof(T));
      at += n;
    }
    sized(normed_, R, C);
    if (mean_.size(0) != R) {
      mean_ = Tensor<A, Memory>(Shape{R});
      rstd_ = Tensor<A, Memory>(Shape{R});
    }
    auto& head = model_.head();
    nn::norm_forward<Device>(c.norm, normed_.data(), mean_.data(), rstd_.data(), last_.data(),
                             head.norm_weight(), head.norm_bias(),
                             R, C, A(c.norm_eps));
    sized(logits_, R, V);
    nn::linear_forward<Device>(logits_.data(), normed_.data(), head.lm_weight(), static_cast<const T*>(nullptr), R, C,
                               V);
    if (c.logits_scaling != 1) nn::scale_into<Device>(logits_.data(), logits_.data(), A(1 / c.logits_scaling), R * V);
    if (c.logit_softcap > 0)
      Device::parallel_rows(R, V, nn::SoftcapRow<T>{logits_.data(), V, A(c.logit_softcap)});
    if constexpr (std::is_same_v<T, float>) {
      Device::to_host(logits, logits_.data(), std::size_t(R * V) * sizeof(float));
    } else {
      host_logits_.resize(std::size_t(R * V));
      Device::to_host(host_logits_.data(), logits_.data(), host_logits_.size() * sizeof(T));
      for (index_t i = 0; i < R * V; ++i) logits[i] = float(host_logits_[std::size_t(i)]);
    }
  }

private:
  // A sequence's rows in the step's batch.
  struct Rows {
    index_t first, count, virtual_rows;
    int adapter;
  };

  // Stands in a block's adapter slot during a step and hands each sequence's
  // rows to its own LoRA, if it has one for this layer. A routed expert's
  // rows are its run of the sorted rows (nn/moe.hpp), which keeps the
  // tokens' order, so each sequence's rows in it are consecutive too.
  struct LoraRouter final : models::LinearAdapter<T, Device> {
    Engine* engine = nullptr;
    index_t layer = 0;
    void forward(models::LinearSlot slot, index_t expert, T* y, const T* x, index_t N) override {
      const auto [in, out] = adapters::detail::slot_widths(engine->model_.config(), slot, layer);
      auto apply = [&](const Rows& r, index_t first, index_t n) {
        if (r.adapter < 0) return;
        if (adapters::LoraBlock<T, Device>* lora = engine->adapter(r.adapter).lora_block(layer))
          lora->forward(slot, expert, y + first * out, x + first * in, n);
      };
      if (slot != models::LinearSlot::experts_gate_up && slot != models::LinearSlot::experts_down) {
        for (const Rows& r : engine->rows_) apply(r, r.first, r.count);
        return;
      }
      const auto& routing = engine->activations_.routing;
      const std::int32_t* token_at = routing.token_at.data() + routing.first[std::size_t(expert)];
      for (index_t i = 0; i < N;) {
        const Rows& r = *std::ranges::prev(std::ranges::upper_bound(engine->rows_, index_t(token_at[i]), {},
                                                                    &Rows::first));
        index_t j = i + 1;
        while (j < N && token_at[j] < r.first + r.count) ++j;
        apply(r, i, j - i);
        i = j;
      }
    }
    void backward(models::LinearSlot, index_t, T*, const T*, const T*, index_t) override {
      throw Error("internal: inference has no backward");
    }
  };

  static void sized(Tensor<T, Memory>& t, index_t rows, index_t cols) {
    if (t.size(0) != rows || t.size(1) != cols) t = Tensor<T, Memory>(Shape{rows, cols});
  }

  models::Transformer<T, Device>& model_;
  std::vector<std::unique_ptr<Adapter<T, Device>>> adapters_;
  std::vector<Rows> rows_;
  std::vector<CachedSequence<T>> cached_;  // the CPU's attention work for a layer, one entry per sequence
  std::vector<cache_rows::CacheRow<T>> cache_rows_;  // each row's cache, for the device's functors
  LoraRouter router_;
  models::Batch batch_;
  models::BlockActivations<T, Memory> activations_;  // one set, reused by every block: nothing is kept for a backward
  memory::Array<std::int32_t, Memory> ids_, positions_;
  std::vector<std::int32_t> restart_;        // a sequence's tokens, run again from its start
  std::vector<std::uint8_t> long_rows_;      // per row: 1 takes LongRoPE's long factors
  memory::Array<std::uint8_t, Memory> long_rows_device_;
  memory::Array<cache_rows::CacheRow<T>, Memory> device_cache_rows_;
  Tensor<T, Memory> x_, y_, last_, normed_, logits_;
  Tensor<A, Memory> mean_, rstd_;
  Tensor<A, Memory> partials_;  // the attention's key splits' partial results (attention_rows.hpp)
  std::vector<T> host_logits_;
};

}  // namespace ft::infer

// The CPU's inference engine in float32 and bfloat16, the dtypes ft serves
// in, compiled once (core/compiled_dtypes.hpp).
#define FT_COMPILED_CPU_INFERENCE(EXTERN, T) EXTERN template class infer::Engine<T, device::Cpu>;

#ifdef FT_COMPILED_ENGINE
namespace ft {
FT_COMPILED_CPU_INFERENCE(extern, float)
FT_COMPILED_CPU_INFERENCE(extern, bf16)
}  // namespace ft
#endif
