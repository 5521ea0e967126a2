#pragma once
// What a model's config.json chooses for its layers: the activation, the
// norm and the rotary embedding's frequencies. Apart from the layers' code
// so that what reads a configuration (the families, the estimate's callers,
// ftrun's commands) does not compile, or recompile, the kernels.
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// HF's `hidden_act`: silu (Llama's SwiGLU), gelu (exact, erf), gelu_new /
// gelu_pytorch_tanh / gelu_fast (the tanh approximation).
enum class Activation { silu, gelu, gelu_tanh };

inline Activation activation_from_hf(std::string_view name) {
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::gelu_tanh;
  throw Error("hidden_act \"" + std::string(name) + "\" is not supported; allowed: silu, gelu, gelu_new, gelu_pytorch_tanh");
}

// RMSNorm (Llama), LayerNorm (GPT-NeoX), or RMSNorm scaled by 1 + w
// (Gemma, whose norms start at w = 0).
enum class NormKind { rms, layer, rms_unit_offset };

// Llama 3's frequency scaling (rope_scaling, rope_type "llama3").
struct Llama3Scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
  bool operator==(const Llama3Scaling&) const = default;
};

struct RopeConfig {
  double theta = 10000.0;
  index_t rotary_dim = 0;  // R, even, <= head size
  bool llama3 = false;
  Llama3Scaling scaling;
  // LongRoPE (Phi-3.5, Phi-4-mini): each frequency divided by its short
  // factor (R / 2 of them; empty: none), or by its long factor in a sequence
  // that reaches position_limit (original_max_position_embeddings); cos and
  // sin times attention_factor either way.
  std::vector<double> short_factors;
  std::vector<double> long_factors;
  double attention_factor = 1.0;
  index_t position_limit = 0;  // the first position that takes the long factors (0: none)
  double linear_factor = 1.0;  // "linear" scaling (position interpolation): every frequency divided by it
  bool operator==(const RopeConfig&) const = default;
};

}  // namespace ft::nn
