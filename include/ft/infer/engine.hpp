#pragma once
// One forward step of inference over several sequences at once: each
// sequence brings its new tokens (a whole prompt when it starts, then one
// token per step) and its KvCache. The new tokens of all sequences form
// the rows of one batch, so every projection is one GEMM for all of them;
// only attention is per sequence, over its own cache. The math is the
// training model's (models/block.hpp with the cache as its attention step),
// on the model's weights, which every sequence shares read-only.
//
// Not thread-safe: one step at a time (a server batches requests into steps).
#include <span>
#include <vector>

#include "ft/infer/attention.hpp"
#include "ft/infer/kv_cache.hpp"
#include "ft/models/transformer.hpp"
#include "ft/nn/embedding.hpp"
#include "ft/nn/linear.hpp"
#include "ft/nn/norm.hpp"

namespace ft::infer {

template <element T>
struct SequenceStep {
  KvCache<T>* cache;
  std::span<const std::int32_t> tokens;  // new tokens, at positions cache->length() onwards
};

template <element T>
class Engine {
public:
  using A = acc_t<T>;
  explicit Engine(models::Transformer<T>& model) : model_(model) {}

  models::Transformer<T>& model() { return model_; }

  // Runs the new tokens of each sequence through the model and appends
  // their keys and values to the sequence's cache. logits [S, V] receive the
  // next-token logits after each sequence's last new token.
  void step(std::span<const SequenceStep<T>> sequences, float* logits) {
    const models::TransformerConfig& c = model_.config();
    const index_t S = index_t(sequences.size()), C = c.hidden_size, V = c.vocab_size;
    batch_.B = 1;
    batch_.input_ids.clear();
    batch_.positions.clear();
    std::vector<index_t> first_row;  // of each sequence
    for (const SequenceStep<T>& s : sequences) {
      if (s.tokens.empty()) throw Error("internal: an inference step with no new tokens for a sequence");
      if (s.cache->length() + index_t(s.tokens.size()) > s.cache->capacity())
        throw Error("a sequence of " + std::to_string(s.cache->length() + index_t(s.tokens.size())) +
                    " tokens does not fit max_model_len = " + std::to_string(s.cache->capacity()));
      first_row.push_back(index_t(batch_.input_ids.size()));
      for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] < 0 || s.tokens[i] >= V)
          throw Error("token id " + std::to_string(s.tokens[i]) + " is outside the vocabulary [0, " +
                      std::to_string(V) + ")");
        batch_.input_ids.push_back(s.tokens[i]);
        batch_.positions.push_back(std::int32_t(s.cache->length() + index_t(i)));
      }
    }
    const index_t N = index_t(batch_.input_ids.size());
    batch_.T = N;
    batch_.targets.assign(std::size_t(N), -100);
    sized(x_, N, C);
    sized(y_, N, C);
    activations_.resize(c, batch_);

    nn::embedding_forward(x_.data(), batch_.input_ids.data(), model_.embedding().parameters().value("weight"), N, C);
    const index_t width = c.num_kv_heads * c.head_dim, qkv_width = c.qkv_width(), HD = c.num_heads * c.head_dim;
    for (index_t l = 0; l < c.num_layers; ++l) {
      models::Block<T>& block = model_.blocks()[std::size_t(l)];
      const CachedAttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.sliding_window[std::size_t(l)]};
      block.forward(y_.data(), x_.data(), batch_, activations_, [&](models::BlockActivations<T>& a) {
        for (index_t i = 0; i < S; ++i) {
          const SequenceStep<T>& s = sequences[std::size_t(i)];
          const index_t n = index_t(s.tokens.size()), r0 = first_row[std::size_t(i)], p0 = s.cache->length();
          const T* rows = a.qkv.data() + r0 * qkv_width;
          for (index_t r = 0; r < n; ++r) {  // the new keys and values join the cache
            std::copy_n(rows + r * qkv_width + HD, width, s.cache->keys(l) + (p0 + r) * width);
            std::copy_n(rows + r * qkv_width + HD + width, width, s.cache->values(l) + (p0 + r) * width);
          }
          cached_attention(a.attention.data() + r0 * HD, rows, batch_.positions.data() + r0, n, s.cache->keys(l),
                           s.cache->values(l), shape);
        }
      });
      std::swap(x_, y_);
    }
    for (const SequenceStep<T>& s : sequences) s.cache->extend(index_t(s.tokens.size()));

    // The head on each sequence's last row only.
    sized(last_, S, C);
    for (index_t i = 0; i < S; ++i) {
      const index_t row = first_row[std::size_t(i)] + index_t(sequences[std::size_t(i)].tokens.size()) - 1;
      std::copy_n(x_.data() + row * C, C, last_.data() + i * C);
    }
    sized(normed_, S, C);
    mean_.resize(std::size_t(S));
    rstd_.resize(std::size_t(S));
    auto& head = model_.head();
    nn::norm_forward(c.norm, normed_.data(), mean_.data(), rstd_.data(), last_.data(),
                     head.parameters().value("final_norm.weight"), head.parameters().value("final_norm.bias"), S, C,
                     A(c.norm_eps));
    sized(logits_, S, V);
    nn::linear_forward(logits_.data(), normed_.data(), head.lm_weight(), static_cast<const T*>(nullptr), S, C, V);
    for (index_t i = 0; i < S * V; ++i) logits[i] = float(logits_.data()[i]);
  }

private:
  static void sized(Tensor<T>& t, index_t rows, index_t cols) {
    if (t.size(0) != rows || t.size(1) != cols) t = Tensor<T>(Shape{rows, cols});
  }

  models::Transformer<T>& model_;
  models::Batch batch_;
  models::BlockActivations<T> activations_;  // one set, reused by every block: nothing is kept for a backward
  Tensor<T> x_, y_, last_, normed_, logits_;
  std::vector<A> mean_, rstd_;
};

}  // namespace ft::infer
