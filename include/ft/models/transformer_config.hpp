#pragma once
// The shape of a decoder-only transformer, in one struct that every family
// fills from its HF config.json. Families differ in options, not in code:
// the block (models/block.hpp) reads these flags.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/numeric.hpp"
#include "ft/nn/layer_options.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::models {

// A mixture-of-experts MLP (Mixtral, Qwen2-MoE, Qwen3-MoE, GraniteMoE): in each sparse
// layer a router picks top_k of `experts` gated MLPs of width expert_size
// for every token, and the token's output is their outputs weighted by the
// router's probabilities. Qwen2-MoE adds a shared expert that every token
// takes, scaled by a sigmoid gate; it is the layer's dense MLP (mlp_in and
// mlp_out, of width shared_expert_size).
struct MoeConfig {
  index_t experts = 0;      // 0: no layer is sparse
  index_t top_k = 0;
  index_t expert_size = 0;  // each expert's intermediate width
  // The k weights renormalised to sum to 1 (Mixtral; Qwen's norm_topk_prob).
  // GraniteMoE's softmax over the k largest logits is the same function.
  bool normalize_top_k = true;
  index_t shared_expert_size = 0;  // 0: no shared expert
  // Qwen2-MoE scales its shared expert by a sigmoid gate of its own
  // (shared_expert_gate); GraniteMoeShared adds its shared_mlp as it is.
  bool shared_expert_gate = true;
  // The load-balancing loss's weight (router_aux_loss_coef); 0 unless the
  // config asks for it (output_router_logits), as HF adds it only then.
  double aux_loss_coef = 0;
  std::vector<std::uint8_t> sparse;  // per layer: 1 where the MLP is the experts
  // Expert parallelism (strategy.expert_parallel): the experts of every
  // sparse layer split into `parallel` equal runs over as many ranks, and
  // this copy of the model holds run `rank`. A config.json says nothing of
  // it; a training run's parallelism sets it.
  index_t parallel = 1, rank = 0;

  bool operator==(const MoeConfig&) const = default;
  index_t local_experts() const { return experts / parallel; }
  index_t first_local_expert() const { return rank * local_experts(); }
  // The rows a sparse layer's local experts multiply for N tokens on each
  // rank, at most: each token takes an expert once, so every rank's N
  // tokens times the fewer of k and the local experts (dropless).
  index_t local_rows(index_t N) const {
    return parallel == 1 ? N * top_k : N * parallel * std::min(top_k, local_experts());
  }
  bool sparse_at(index_t layer) const { return experts > 0 && sparse[std::size_t(layer)] != 0; }
  bool gated_shared_expert() const { return shared_expert_size > 0 && shared_expert_gate; }
  index_t sparse_layers() const {
    index_t n = 0;
    for (std::uint8_t s : sparse) n += experts > 0 && s != 0;
    return n;
  }
};

struct TransformerConfig {
  std::string architecture;  // HF architectures[0]
  index_t vocab_size = 0;
  index_t hidden_size = 0;        // C
  index_t num_layers = 0;
  index_t num_heads = 0;          // H
  index_t num_kv_heads = 0;       // G
  index_t head_dim = 0;           // D
  index_t intermediate_size = 0;  // F
  nn::NormKind norm = nn::NormKind::rms;
  double norm_eps = 1e-5;
  nn::Activation activation = nn::Activation::silu;
  bool gated_mlp = true;          // SwiGLU (Llama) or plain (GPT-NeoX)
  bool parallel_residual = false; // x + attn(ln1 x) + mlp(ln2 x)
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool qk_norm = false;           // RMSNorm over each query and key head before RoPE (Qwen3)
  // A norm on each branch's output before it joins the residual stream
  // (Gemma 2's post-attention and post-feed-forward norms); sequential blocks only.
  bool sandwich_norms = false;
  // Granite's multipliers, under HF's names; the defaults change nothing.
  double embedding_multiplier = 1;  // on the embedding's output
  // Where HF applies the multiplier: false, to the embeddings the blocks
  // take, virtual tokens' too (Granite multiplies inputs_embeds); true,
  // inside the token table's lookup, cast to the weights' type first
  // (Gemma's scaled embedding module), so virtual tokens are not scaled.
  bool embedding_scale_in_lookup = false;
  double residual_multiplier = 1;   // on each branch's output before it joins the residual stream
  double attention_multiplier = 0;  // the factor on q.k; 0: 1 / sqrt(head_dim)
  double logits_scaling = 1;        // logits are divided by it
  // Gemma 2's soft-capping, cap tanh(x / cap): of the attention scores and of
  // the final logits; 0: none.
  double attention_softcap = 0;
  double logit_softcap = 0;
  bool tie_embeddings = false;
  // Rows of a learned absolute position table added to the token embedding
  // (GPT-2's wpe, GPTBigCode); 0: none, positions come from the rotary embedding.
  index_t position_embeddings = 0;
  bool alibi = false;           // ALiBi's linear distance penalty on the scores (Bloom; nn/attention_shape.hpp)
  bool embedding_norm = false;  // a norm (of `norm`'s kind) on the embedding's output (Bloom's word_embeddings_layernorm)
  index_t padding_idx = -1;  // the embedding row that takes no gradient: HF's pad_token_id where it builds one
  nn::RopeConfig rope;
  // Per layer, where layers rotate differently (Gemma 3's local and global
  // bases); empty: every layer takes `rope`.
  std::vector<nn::RopeConfig> layer_rope;
  std::vector<index_t> sliding_window;  // per layer; 0 = full attention
  index_t max_position_embeddings = 0;
  MoeConfig moe;

  // A field added here is added to models/spec_json.hpp, the form a plugin's family describes a model in.
  bool operator==(const TransformerConfig&) const = default;

  index_t qkv_width() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  const nn::RopeConfig& rope_of(index_t layer) const {
    return layer_rope.empty() ? rope : layer_rope[std::size_t(layer)];
  }
  // The width of a layer's dense MLP: the layer's MLP, or in a sparse layer
  // its shared expert (0: none).
  index_t mlp_width(index_t layer) const {
    return moe.sparse_at(layer) ? moe.shared_expert_size : intermediate_size;
  }
  index_t mlp_in_width(index_t layer) const { return gated_mlp ? 2 * mlp_width(layer) : mlp_width(layer); }
  // The widest dense MLP of any layer: what buffers shared by all layers hold.
  index_t widest_mlp() const {
    index_t most = 0;
    for (index_t l = 0; l < num_layers; ++l) most = std::max(most, mlp_width(l));
    return most;
  }
  index_t mlp_in_width() const { return gated_mlp ? 2 * widest_mlp() : widest_mlp(); }
  // Weights a token's forward multiplies by in a layer's MLP: the dense
  // MLP, and in a sparse layer the router, top_k experts and the shared
  // expert's gate.
  index_t mlp_matmul_weights(index_t layer) const {
    const index_t C = hidden_size;
    index_t n = (mlp_in_width(layer) + mlp_width(layer)) * C;
    if (moe.sparse_at(layer))
      n += moe.experts * C + moe.top_k * 3 * moe.expert_size * C + (moe.gated_shared_expert() ? C : 0);
    return n;
  }
};

// The factor on the embedding's output for weights of type T, in T's
// accumulation type.
template <class T>
auto embedding_scale(const TransformerConfig& c) {
  using A = acc_t<T>;
  return c.embedding_scale_in_lookup ? A(T(c.embedding_multiplier)) : A(c.embedding_multiplier);
}

// Parameters a model of this shape holds, from the configuration alone:
// plans and estimates need it before anything is allocated.
inline index_t parameter_count(const TransformerConfig& c) {
  const index_t C = c.hidden_size, norm = c.norm == nn::NormKind::layer ? 2 * C : C;
  const index_t attention = c.qkv_width() * C + (c.qkv_bias ? c.qkv_width() : 0) +
                            C * c.num_heads * c.head_dim + (c.o_bias ? C : 0);
  const index_t head_norms = c.qk_norm ? 2 * c.head_dim : 0;
  const index_t embeddings = c.vocab_size * C * (c.tie_embeddings ? 1 : 2) + c.position_embeddings * C +
                             (c.embedding_norm ? norm : 0);
  const index_t block_norms = (c.sandwich_norms ? 4 : 2) * norm;
  index_t blocks = 0;
  for (index_t l = 0; l < c.num_layers; ++l) {
    const index_t width = c.mlp_width(l), in = c.mlp_in_width(l);
    index_t mlp = in * C + C * width + (c.mlp_bias && width > 0 ? in + C : 0);
    if (c.moe.sparse_at(l))
      mlp += c.moe.experts * (C + 3 * c.moe.expert_size * C) + (c.moe.gated_shared_expert() ? C : 0);
    blocks += block_norms + head_norms + attention + mlp;
  }
  return embeddings + norm + blocks;
}

// Reads fields of one config.json with errors that name the file and field.
class ConfigReader {
public:
  ConfigReader(const nlohmann::json& json, std::filesystem::path file) : json_(json), file_(std::move(file)) {}

  const nlohmann::json& json() const { return json_; }
  const std::filesystem::path& file() const { return file_; }
  bool has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }

  index_t required_int(const char* key) const {
    if (!has(key)) fail(std::string("missing required field \"") + key + "\"");
    return positive(key, json_[key]);
  }
  index_t optional_int(const char* key, index_t fallback) const {
    return has(key) ? positive(key, json_[key]) : fallback;
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_number()) fail(std::string("field \"") + key + "\" must be a number");
    return json_[key].get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_boolean()) fail(std::string("field \"") + key + "\" must be true or false");
    return json_[key].get<bool>();
  }
  std::string string(const char* key, const char* fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_string()) fail(std::string("field \"") + key + "\" must be a string");
    return json_[key].get<std::string>();
  }
  // architectures[0], e.g. "LlamaForCausalLM".
  std::string architecture() const {
    if (!has("architectures")) fail("missing required field \"architectures\"");
    const nlohmann::json& a = json_["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
      fail("\"architectures\" must be a list of names such as [\"LlamaForCausalLM\"]");
    return a[0].get<std::string>();
  }
  [[noreturn]] void fail(const std::string& what) const { throw Error(file_.string() + ": " + what); }

private:
  index_t positive(const char* key, const nlohmann::json& v) const {
    if (!v.is_number_integer() || v.get<index_t>() <= 0)
      fail(std::string("field \"") + key + "\" must be a positive integer");
    return v.get<index_t>();
  }
  const nlohmann::json& json_;
  std::filesystem::path file_;
};

// The fields every HF decoder config names the same way.
inline TransformerConfig read_common_shape(const ConfigReader& json) {
  TransformerConfig c;
  c.architecture = json.architecture();
  c.vocab_size = json.required_int("vocab_size");
  c.hidden_size = json.required_int("hidden_size");
  c.intermediate_size = json.required_int("intermediate_size");
  c.num_layers = json.required_int("num_hidden_layers");
  c.num_heads = json.required_int("num_attention_heads");
  return c;
}

// LongRoPE as HF's _compute_longrope_parameters reads it: the short and long
// factors, the length from which the long ones apply, and the attention
// factor given or derived from factor (max_position_embeddings over the
// original when not given).
inline void read_longrope(const ConfigReader& config, const nlohmann::json& params, nn::RopeConfig& rope) {
  const std::size_t count = std::size_t(rope.rotary_dim / 2);
  auto factors = [&](const char* key) {
    if (!params.contains(key) || !params[key].is_array() || params[key].size() != count)
      config.fail(std::string("LongRoPE needs \"") + key + "\", a list of " + std::to_string(count) +
                  " numbers (one per rotary frequency)");
    std::vector<double> out;
    for (const auto& f : params[key]) {
      if (!f.is_number() || !(f.get<double>() > 0))
        config.fail(std::string("LongRoPE's \"") + key + "\" must hold positive numbers");
      out.push_back(f.get<double>());
    }
    return out;
  };
  rope.short_factors = factors("short_factor");
  rope.long_factors = factors("long_factor");
  index_t original = 0;
  if (params.contains("original_max_position_embeddings") && params["original_max_position_embeddings"].is_number_integer())
    original = params["original_max_position_embeddings"].get<index_t>();
  else
    original = config.optional_int("original_max_position_embeddings", 0);
  if (original <= 1) config.fail("LongRoPE needs \"original_max_position_embeddings\", a positive integer");
  double factor = 0;
  if (params.contains("factor") && params["factor"].is_number()) factor = params["factor"].get<double>();
  else factor = double(config.required_int("max_position_embeddings")) / double(original);
  if (params.contains("attention_factor") && params["attention_factor"].is_number())
    rope.attention_factor = params["attention_factor"].get<double>();
  else
    rope.attention_factor = factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(double(original)));
  rope.position_limit = original;
}

// The pad token's id, which HF's Llama-derived models pass to nn.Embedding as
// padding_idx (so its row takes no gradient); -1 when none is set or it is
// outside the vocabulary.
inline index_t read_padding_idx(const ConfigReader& config, index_t vocab_size) {
  if (!config.has("pad_token_id") || !config.json()["pad_token_id"].is_number_integer()) return -1;
  const index_t id = config.json()["pad_token_id"].get<index_t>();
  return id >= 0 && id < vocab_size ? id : -1;
}

// One set of rotary settings from its parameters (`rope_parameters`, or an
// older config's `rope_scaling`), with the config's own keys where the
// parameters lack them: the rotary fraction (`partial_rotary_factor`,
// GPT-NeoX's `rotary_pct`) and, for LongRoPE, the original length.
// Scaling types other than these are refused by name rather than silently
// ignored.
inline nn::RopeConfig read_rope_parameters(const ConfigReader& config, const nlohmann::json& params, index_t head_dim,
                                           double default_fraction, double default_theta) {
  if (!params.is_object()) config.fail("\"rope_parameters\" must be an object");
  nn::RopeConfig rope;
  rope.theta = params.value("rope_theta", default_theta);
  double fraction = params.value("partial_rotary_factor",
                                 config.number("partial_rotary_factor", config.number("rotary_pct", default_fraction)));
  rope.rotary_dim = index_t(double(head_dim) * fraction);
  if (rope.rotary_dim % 2 != 0 || rope.rotary_dim <= 0 || rope.rotary_dim > head_dim)
    config.fail("rotary fraction " + std::to_string(fraction) + " of head size " + std::to_string(head_dim) +
                " does not give an even number of rotary dimensions");

  std::string type = params.value("rope_type", params.value("type", std::string("default")));
  auto need = [&](const char* what, const char* key) {
    if (!params.contains(key) || !params[key].is_number())
      config.fail(std::string(what) + " rope scaling needs the number \"" + key + "\"");
    return params[key].get<double>();
  };
  if (type == "llama3") {
    rope.llama3 = true;
    rope.scaling = {need("Llama-3", "factor"), need("Llama-3", "low_freq_factor"), need("Llama-3", "high_freq_factor"),
                    need("Llama-3", "original_max_position_embeddings")};
  } else if (type == "linear") {
    rope.linear_factor = need("Linear", "factor");
    if (!(rope.linear_factor > 0)) config.fail("linear rope scaling's \"factor\" must be a positive number");
  } else if (type == "longrope") {
    read_longrope(config, params, rope);
  } else if (type != "default") {
    config.fail("rope type \"" + type + "\" is not supported; allowed: default, linear, llama3, longrope");
  }
  return rope;
}

// Rotary settings as transformers 5 writes them (`rope_parameters`) or as
// older configs do (`rope_theta` with `rope_scaling`; GPT-NeoX's
// `rotary_emb_base` and `rotary_pct`).
inline nn::RopeConfig read_rope(const ConfigReader& config, index_t head_dim, double default_fraction) {
  const nlohmann::json& j = config.json();
  nlohmann::json params = nlohmann::json::object();
  if (config.has("rope_parameters")) params = j["rope_parameters"];
  else if (config.has("rope_scaling")) params = j["rope_scaling"];
  return read_rope_parameters(config, params, head_dim, default_fraction,
                              config.number("rope_theta", config.number("rotary_emb_base", 10000.0)));
}

// Sliding windows per layer: `layer_types` when the config lists them
// (transformers 5), otherwise `sliding_window` on every layer when set
// (Mistral) and `use_sliding_window` is not false (Qwen2). A family whose
// config class has a default window passes it, and with `global_every` = k
// every k-th layer is global when layer_types is absent (Gemma 2: 2).
inline std::vector<index_t> read_sliding_windows(const ConfigReader& config, index_t layers,
                                                 index_t default_window = 0, index_t global_every = 0) {
  std::vector<index_t> windows(std::size_t(layers), 0);
  if (!config.flag("use_sliding_window", true)) return windows;  // whatever sliding_window says (Qwen2-MoE writes 0)
  const bool stated = config.json().contains("sliding_window");  // null: none
  const index_t window =
      !stated ? default_window : config.has("sliding_window") ? config.required_int("sliding_window") : 0;
  if (window == 0) return windows;
  if (config.has("layer_types")) {
    const nlohmann::json& types = config.json()["layer_types"];
    if (!types.is_array() || index_t(types.size()) != layers)
      config.fail("\"layer_types\" must list one entry per layer (" + std::to_string(layers) + ")");
    for (index_t i = 0; i < layers; ++i)
      if (types[std::size_t(i)] == "sliding_attention") windows[std::size_t(i)] = window;
    return windows;
  }
  for (index_t i = 0; i < layers; ++i)
    windows[std::size_t(i)] = global_every > 0 && (i + 1) % global_every == 0 ? 0 : window;
  return windows;
}

}  // namespace ft::models
