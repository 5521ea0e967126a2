#pragma once
// Converting a GGUF file (llama.cpp) into an HF model directory that
// transformers and ft load:
//
//   config.json              the HF class of the file's architecture, from its metadata
//   model.safetensors        float32 (default), bfloat16 or float16, HF tensor names; a model
//                            larger than max_shard_bytes is sharded as transformers shards
//                            (model_files.hpp)
//   tokenizer.json, tokenizer_config.json   from the tokenizer.* keys (gguf_tokenizer.hpp)
//   generation_config.json   BOS, EOS and padding ids
//
// Architectures (general.architecture -> HF class), each as llama.cpp's
// convert_hf_to_gguf.py writes it: llama (LlamaForCausalLM, or with experts
// MixtralForCausalLM), qwen2, qwen3, gemma, gemma2, gemma3 (Gemma3ForCausalLM,
// the text model), phi3, granite, starcoder (GPTBigCodeForCausalLM), bloom,
// qwen2moe (Qwen2MoeForCausalLM), qwen3moe (Qwen3MoeForCausalLM), granitemoe
// (GraniteMoeForCausalLM, or with a shared expert GraniteMoeSharedForCausalLM).
// Keys read, under the architecture's prefix: context_length,
// embedding_length, block_count, feed_forward_length, attention.head_count,
// attention.head_count_kv (default: head_count), attention.key_length and
// value_length (default: embedding_length / head_count),
// attention.layer_norm_rms_epsilon (layer_norm_epsilon for starcoder and
// bloom), rope.freq_base, rope.dimension_count
// (the rotary size: the whole head but for Phi-3), rope.scaling.type and
// factor ("none" or "linear"); and where the architecture has them:
// attn_logit_softcapping, final_logit_softcapping, attention.sliding_window,
// rope.freq_base_swa (Gemma 2 and 3), rope.scaling.original_context_length
// and attn_factor with the rope_factors_short/long tensors (Phi-3's
// LongRoPE), attention.scale, embedding_scale, residual_scale and
// logit_scale (Granite's and GraniteMoE's multipliers); with experts, expert_count,
// expert_used_count, expert_feed_forward_length (default: feed_forward_length,
// Mixtral's and GraniteMoE's), expert_shared_feed_forward_length (Qwen2-MoE's
// and GraniteMoeShared's shared expert)
// and expert_weights_norm. A layer is sparse where its ffn_gate_inp tensor is.
//
// What llama.cpp does not keep is what its own runtime assumes: Gemma 2 and
// 3 scale attention by 1/sqrt(head_dim) (by 1/sqrt(embedding/heads) for the
// 46-layer Gemma 2 27B and the 62-layer Gemma 3 27B), Gemma 2 alternates
// local and global layers from a local first, Gemma 3 makes every sixth
// layer global, Gemma 3's local layers rotate with base 10000 when the
// file gives none, and without expert_weights_norm the k routing weights are
// renormalised but for qwen2moe's. GraniteMoE always renormalises them, and
// every one of its layers is sparse.
//
// Tensor names, GGUF -> HF (N is the layer):
//   token_embd.weight -> model.embed_tokens.weight     output_norm.weight -> model.norm.weight
//   output.weight -> lm_head.weight (absent: tie_word_embeddings)
//   blk.N.attn_norm -> model.layers.N.input_layernorm
//   blk.N.attn_q/attn_k/attn_v/attn_output -> ...self_attn.q_proj/k_proj/v_proj/o_proj (weights;
//       Qwen2's q/k/v biases too), blk.N.attn_qkv -> ...self_attn.qkv_proj (Phi-3)
//   blk.N.attn_q_norm/attn_k_norm -> ...self_attn.q_norm/k_norm (Qwen3, Gemma 3)
//   blk.N.ffn_norm -> ...post_attention_layernorm, or with a norm after each branch (Gemma 2, 3)
//       blk.N.post_attention_norm -> ...post_attention_layernorm, blk.N.ffn_norm ->
//       ...pre_feedforward_layernorm, blk.N.post_ffw_norm -> ...post_feedforward_layernorm
//   blk.N.ffn_gate/ffn_up/ffn_down -> ...mlp.gate_proj/up_proj/down_proj, or Phi-3's
//       blk.N.ffn_up -> ...mlp.gate_up_proj
//   a sparse layer's, under ...block_sparse_moe. (Mixtral) or ...mlp. (Qwen): blk.N.ffn_gate_inp ->
//       gate (the router); blk.N.ffn_gate_exps/ffn_up_exps/ffn_down_exps, each expert's stacked
//       along the slowest dimension -> experts.E.w1/w3/w2 (Mixtral), experts.E.gate_proj/
//       up_proj/down_proj (Qwen); Qwen2-MoE's blk.N.ffn_gate_shexp/up_shexp/down_shexp ->
//       shared_expert.gate_proj/up_proj/down_proj, blk.N.ffn_gate_inp_shexp [C] ->
//       shared_expert_gate [1, C]
//   granitemoe, under ...block_sparse_moe.: blk.N.ffn_gate_inp -> router.layer; ffn_gate_exps and
//       ffn_up_exps joined, expert by expert, -> input_linear [E, 2F, C] (each expert's gate rows,
//       then its up rows); ffn_down_exps -> output_linear [E, C, F]; GraniteMoeShared's
//       blk.N.ffn_gate_shexp and ffn_up_shexp joined -> shared_mlp.input_linear [2S, C],
//       blk.N.ffn_down_shexp -> shared_mlp.output_linear
//   starcoder and bloom, weights and biases, under transformer.: token_embd -> wte
//       (word_embeddings), position_embd -> wpe, token_embd_norm -> word_embeddings_layernorm,
//       output_norm -> ln_f, blk.N.attn_norm -> h.N.ln_1 (input_layernorm), attn_qkv ->
//       attn.c_attn (self_attention.query_key_value), attn_output -> attn.c_proj
//       (self_attention.dense), ffn_norm -> ln_2 (post_attention_layernorm), ffn_up -> mlp.c_fc
//       (mlp.dense_h_to_4h), ffn_down -> mlp.c_proj (mlp.dense_4h_to_h)
//
// What the converter changed in the data is undone:
// - The rotary un-permutation (llama, granite, granitemoe, whose ggml rotation pairs
//   adjacent dimensions). HF rotates the two halves of each head (dimension i
//   with i + head_dim/2); the converter reorders the rows of attn_q (with the
//   query head count) and attn_k (with the KV head count) within each head:
//   GGUF row h*hd + 2j + i holds HF row h*hd + i*hd/2 + j (i in {0, 1},
//   j < hd/2). unpermute_rotary_rows applies the inverse; the other
//   architectures rotate halves as HF does and keep HF's order.
// - Bloom's fused q/k/v rows, which the converter regrouped as all queries,
//   then all keys, then all values: back to each head's q, k, v together.
// - Gemma's norm weights, stored as 1 + w: w is the stored value minus 1, in
//   float32 as transformers' GGUF reader computes it.
// - GraniteMoE's fused gate|up projections, which the converter split in two
//   tensors: joined again.
//
// Why it is built this way: the conversion either produces a whole directory or
// nothing. It writes into a temporary directory beside out_dir and renames that
// into place last, so an interruption never leaves a half-written model under
// out_dir, and it refuses an out_dir that already holds files. Everything that
// can be checked is checked before the first tensor is dequantised (architecture,
// every tensor present with the shape the config implies, the tokenizer), so a
// bad file fails fast. The dequantised model is held in memory, in the output
// dtype, until it is written (write_model_safetensors takes every tensor at once).
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"
#include "ft/io/gguf.hpp"
#include "ft/io/gguf_tokenizer.hpp"
#include "ft/io/model_files.hpp"
#include "ft/io/safetensors.hpp"

namespace ft::io {

struct GgufToHfOptions {
  std::string dtype = "float32";                    // of the written weights: float32, bfloat16 or float16
  std::uint64_t max_shard_bytes = std::uint64_t(5) << 30;  // transformers' default shard size
  ProgressCallback progress;                        // bytes written so far, of all
};

// The HF module layout an architecture's tensors go to: Llama's (model.layers.N.self_attn...,
// rotary), GPTBigCode's (transformer.h.N.attn.c_attn..., learned positions) or Bloom's
// (transformer.h.N.self_attention..., ALiBi). The last two use LayerNorm with biases.
enum class GgufLayout { llama, gpt_bigcode, bloom };

// What sets one GGUF architecture apart, as llama.cpp's converter writes it.
struct GgufArchitecture {
  std::string_view name;  // general.architecture, the metadata keys' prefix
  std::string_view hf_class, model_type;
  GgufLayout layout = GgufLayout::llama;
  bool permuted_rotary = false;  // q/k rows interleaved for ggml's adjacent-pair rotation
  bool norm_shift = false;       // norm weights stored as 1 + w (Gemma)
  bool qkv_bias = false;         // q/k/v projections with biases (Qwen2)
  bool qk_norm = false;          // per-head q/k norms (Qwen3, Gemma 3)
  bool sandwich_norms = false;   // a norm after each branch besides the one before (Gemma 2, 3)
  bool fused = false;            // one qkv projection, one gate|up projection (Phi-3)
};

inline constexpr GgufArchitecture gguf_architectures[] = {
    {.name = "llama", .hf_class = "LlamaForCausalLM", .model_type = "llama", .permuted_rotary = true},
    {.name = "qwen2", .hf_class = "Qwen2ForCausalLM", .model_type = "qwen2", .qkv_bias = true},
    {.name = "qwen3", .hf_class = "Qwen3ForCausalLM", .model_type = "qwen3", .qk_norm = true},
    {.name = "gemma", .hf_class = "GemmaForCausalLM", .model_type = "gemma", .norm_shift = true},
    {.name = "gemma2", .hf_class = "Gemma2ForCausalLM", .model_type = "gemma2", .norm_shift = true,
     .sandwich_norms = true},
    {.name = "gemma3", .hf_class = "Gemma3ForCausalLM", .model_type = "gemma3_text", .norm_shift = true,
     .qk_norm = true, .sandwich_norms = true},
    {.name = "phi3", .hf_class = "Phi3ForCausalLM", .model_type = "phi3", .fused = true},
    {.name = "granite", .hf_class = "GraniteForCausalLM", .model_type = "granite", .permuted_rotary = true},
    {.name = "starcoder", .hf_class = "GPTBigCodeForCausalLM", .model_type = "gpt_bigcode",
     .layout = GgufLayout::gpt_bigcode},
    {.name = "bloom", .hf_class = "BloomForCausalLM", .model_type = "bloom", .layout = GgufLayout::bloom},
    {.name = "qwen2moe", .hf_class = "Qwen2MoeForCausalLM", .model_type = "qwen2_moe", .qkv_bias = true},
    {.name = "qwen3moe", .hf_class = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe", .qk_norm = true},
    {.name = "granitemoe", .hf_class = "GraniteMoeForCausalLM", .model_type = "granitemoe", .permuted_rotary = true},
};

// The model a GGUF file describes, with the rest of config.json.
struct GgufModelConfig {
  const GgufArchitecture* arch = nullptr;
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  std::int64_t context = 0;
  std::int64_t rotary_dim = 0;  // the rotated dimensions of a head
  double norm_eps = 0, rope_theta = 10000;
  std::optional<double> linear_rope_factor;
  bool tied = false;
  // Gemma 2 and 3.
  std::optional<double> attention_softcap, logit_softcap;
  std::int64_t sliding_window = 0;  // 0: none
  double local_rope_theta = 10000;
  // Phi-3's LongRoPE: the factors come from the rope_factors tensors.
  std::int64_t original_context = 0;
  std::optional<double> rope_attention_factor;
  std::vector<double> short_factors, long_factors;
  // Granite's multipliers.
  double attention_multiplier = 1, embedding_multiplier = 1, residual_multiplier = 1, logits_scaling = 1;
  // A mixture of experts (experts > 0): each sparse layer's experts, expert_ffn wide, of which
  // experts_used take a token; Qwen2-MoE's shared expert, shared_ffn wide.
  std::int64_t experts = 0, experts_used = 0, expert_ffn = 0, shared_ffn = 0;
  bool normalize_top_k = true;
  std::vector<bool> sparse;  // per layer

  bool mixtral() const { return experts > 0 && arch->name == "llama"; }
  bool granite_shared() const { return arch->name == "granitemoe" && shared_ffn > 0; }
  bool granite() const { return arch->name == "granite" || arch->name == "granitemoe"; }
  std::string_view hf_class() const {
    return mixtral() ? "MixtralForCausalLM" : granite_shared() ? "GraniteMoeSharedForCausalLM" : arch->hf_class;
  }
  std::string_view model_type() const {
    return mixtral() ? "mixtral" : granite_shared() ? "granitemoeshared" : arch->model_type;
  }
};

// Rows [h*hd + 2j + i] (GGUF) -> [h*hd + i*hd/2 + j] (HF) of a rows x cols matrix.
template <class T>
void unpermute_rotary_rows(const T* gguf, T* hf, std::int64_t heads, std::int64_t head_dim, std::int64_t cols) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < half; ++j) {
        const T* src = gguf + (h * head_dim + 2 * j + i) * cols;
        std::copy(src, src + cols, hf + (h * head_dim + i * half + j) * cols);
      }
}

// Rows [p*H*hd + h*hd + i] (GGUF: all queries, then keys, then values) ->
// [(h*3 + p)*hd + i] (Bloom's query_key_value: each head's q, k, v together)
// of a rows x cols matrix, p in {0, 1, 2}.
template <class T>
void interleave_bloom_qkv(const T* gguf, T* hf, std::int64_t heads, std::int64_t head_dim, std::int64_t cols) {
  for (std::int64_t part = 0; part < 3; ++part)
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* src = gguf + (part * heads + h) * head_dim * cols;
      std::copy(src, src + head_dim * cols, hf + (h * 3 + part) * head_dim * cols);
    }
}

namespace detail {

// The shortest decimal that reads back as the same float: config.json then says
// 1e-05 where the file stored the f32 nearest to it.
inline double shortest(float f) {
  char text[64];
  auto end = std::to_chars(text, text + sizeof text, f).ptr;
  double d = 0;
  std::from_chars(text, end, d);
  return d;
}

inline const GgufArchitecture& gguf_architecture(const std::string& arch, const std::string& where) {
  std::string names;
  for (const GgufArchitecture& a : gguf_architectures) {
    if (a.name == arch) return a;
    names += std::string(names.empty() ? "" : ", ") + std::string(a.name);
  }
  throw Error(where + "general.architecture is " + detail::quoted(arch) + "; ft converts GGUF files of: " + names);
}

// A rope_factors tensor (Phi-3's LongRoPE) as its rotary_dim / 2 numbers.
inline std::vector<double> rope_factors(const GgufFile& file, const std::string& name, std::int64_t count,
                                        const std::string& where) {
  const GgufTensor& t = file.at(name);
  if (t.numel() != count)
    throw Error(where + "tensor " + detail::quoted(name) + " has " + std::to_string(t.numel()) +
                " factors; the rotary size implies " + std::to_string(count));
  std::vector<float> values(std::size_t(t.numel()));
  dequantize(file, t, values.data(), t.numel());
  return {values.begin(), values.end()};
}

inline GgufModelConfig read_gguf_config(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  const std::string where = file.path().string() + ": ";
  GgufModelConfig c;
  c.arch = &gguf_architecture(m.get_string("general.architecture"), where);
  const std::string prefix = std::string(c.arch->name) + ".";
  auto key = [&](const char* name) { return prefix + name; };
  auto has = [&](const char* name) { return m.contains(key(name)); };
  auto positive = [&](const char* name) {
    const std::uint64_t v = m.get_u64(key(name));
    if (v == 0 || v > (std::uint64_t(1) << 31))
      throw Error(where + "metadata key " + detail::quoted(key(name)) + " is " + std::to_string(v) +
                  ", not a plausible size");
    return std::int64_t(v);
  };
  auto number = [&](const char* name) { return shortest(m.get_f32(key(name))); };
  c.hidden = positive("embedding_length");
  c.layers = positive("block_count");
  c.heads = positive("attention.head_count");
  c.kv_heads = has("attention.head_count_kv") ? positive("attention.head_count_kv") : c.heads;
  c.ffn = positive("feed_forward_length");
  c.context = positive("context_length");
  const bool moe = c.arch->name == "qwen2moe" || c.arch->name == "qwen3moe" || c.arch->name == "granitemoe";
  if (has("expert_count") && m.get_u64(key("expert_count")) > 0) {
    if (c.arch->name != "llama" && !moe)
      throw Error(where + "is a mixture of experts (" + key("expert_count") + "), which ft converts for llama, "
                  "qwen2moe, qwen3moe and granitemoe");
    c.experts = positive("expert_count");
    c.experts_used = positive("expert_used_count");
    if (c.experts_used > c.experts)
      throw Error(where + key("expert_used_count") + " " + std::to_string(c.experts_used) + " exceeds " +
                  key("expert_count") + " " + std::to_string(c.experts));
    c.expert_ffn = has("expert_feed_forward_length") ? positive("expert_feed_forward_length") : c.ffn;
    if (has("expert_shared_feed_forward_length")) c.shared_ffn = positive("expert_shared_feed_forward_length");
    c.normalize_top_k = has("expert_weights_norm") ? m.get_bool(key("expert_weights_norm")) : c.arch->name != "qwen2moe";
    for (std::int64_t l = 0; l < c.layers; ++l)
      c.sparse.push_back(file.find("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr);
    if (c.arch->name == "granitemoe") {
      // HF's GraniteMoE has no dense layers and always renormalises the top k.
      if (!c.normalize_top_k)
        throw Error(where + key("expert_weights_norm") + " is false; HF's GraniteMoE always renormalises the top k");
      const auto dense = std::ranges::find(c.sparse, false);
      if (dense != c.sparse.end())
        throw Error(where + "layer " + std::to_string(dense - c.sparse.begin()) +
                    " has no ffn_gate_inp (a dense layer); every layer of HF's GraniteMoE has experts");
    }
  } else if (moe) {
    throw Error(where + "metadata key " + detail::quoted(key("expert_count")) + " is missing; " +
                std::string(c.arch->name) + " is a mixture of experts");
  }
  if (c.heads % c.kv_heads != 0)
    throw Error(where + "head_count " + std::to_string(c.heads) + " is not a multiple of head_count_kv " +
                std::to_string(c.kv_heads));
  c.head_dim = has("attention.key_length") ? positive("attention.key_length") : c.hidden / c.heads;
  if (!has("attention.key_length") && c.hidden % c.heads != 0)
    throw Error(where + "embedding_length " + std::to_string(c.hidden) + " is not a multiple of head_count " +
                std::to_string(c.heads));
  if (has("attention.value_length") && positive("attention.value_length") != c.head_dim)
    throw Error(where + "attention.value_length differs from key_length, which HF's " +
                std::string(c.arch->hf_class) + " cannot express");
  const bool rotary = c.arch->layout == GgufLayout::llama;
  if (rotary && c.head_dim % 2 != 0)
    throw Error(where + "head size " + std::to_string(c.head_dim) + " is odd; rotary needs pairs");
  c.rotary_dim = has("rope.dimension_count") ? positive("rope.dimension_count") : c.head_dim;
  if (rotary && (c.arch->name == "phi3" ? c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim : c.rotary_dim != c.head_dim))
    throw Error(where + key("rope.dimension_count") + " " + std::to_string(c.rotary_dim) + " does not fit the head size " +
                std::to_string(c.head_dim) + "; HF's " + std::string(c.arch->hf_class) +
                (c.arch->name == "phi3" ? " rotates an even part of a head" : " rotates whole heads"));
  c.norm_eps = number(rotary ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon");
  if (c.arch->layout == GgufLayout::gpt_bigcode && c.kv_heads != 1 && c.kv_heads != c.heads)
    throw Error(where + "head_count_kv " + std::to_string(c.kv_heads) +
                " is neither 1 nor head_count; GPTBigCode's attention is multi-query or multi-head");
  if (c.arch->layout == GgufLayout::bloom && (c.kv_heads != c.heads || c.ffn != 4 * c.hidden))
    throw Error(where + "Bloom has as many key/value heads as heads and a feed-forward 4 x embedding_length wide");
  if (c.arch->name == "gemma3") c.rope_theta = 1e6;  // Gemma3TextConfig's global base
  if (has("rope.freq_base")) c.rope_theta = number("rope.freq_base");
  if (has("rope.scaling.type")) {
    const std::string type = m.get_string(key("rope.scaling.type"));
    if (type == "linear") c.linear_rope_factor = number("rope.scaling.factor");
    else if (type != "none")
      throw Error(where + key("rope.scaling.type") + " " + detail::quoted(type) +
                  " is not supported (supported: none, linear)");
  }
  if (file.find("rope_freqs.weight"))
    throw Error(where + "has rope_freqs.weight (Llama 3.1 rope scaling), whose HF parameters the file does not keep");

  if (c.arch->name == "gemma2" || c.arch->name == "gemma3") {
    if (has("attn_logit_softcapping")) c.attention_softcap = number("attn_logit_softcapping");
    if (has("final_logit_softcapping")) c.logit_softcap = number("final_logit_softcapping");
    c.sliding_window = has("attention.sliding_window") ? positive("attention.sliding_window") : 4096;
    if (has("rope.freq_base_swa")) c.local_rope_theta = number("rope.freq_base_swa");
  }
  if (c.arch->name == "phi3") {
    c.sliding_window = has("attention.sliding_window") ? std::int64_t(m.get_u64(key("attention.sliding_window"))) : 0;
    const bool longrope = file.find("rope_factors_short.weight") || file.find("rope_factors_long.weight");
    if (longrope) {
      if (!has("rope.scaling.original_context_length"))
        throw Error(where + "has LongRoPE factors but no " + key("rope.scaling.original_context_length"));
      c.original_context = positive("rope.scaling.original_context_length");
      if (has("rope.scaling.attn_factor")) c.rope_attention_factor = number("rope.scaling.attn_factor");
      c.short_factors = rope_factors(file, "rope_factors_short.weight", c.rotary_dim / 2, where);
      c.long_factors = rope_factors(file, "rope_factors_long.weight", c.rotary_dim / 2, where);
    }
  }
  if (c.granite()) {
    if (has("attention.scale")) c.attention_multiplier = number("attention.scale");
    if (has("embedding_scale")) c.embedding_multiplier = number("embedding_scale");
    if (has("residual_scale")) c.residual_multiplier = number("residual_scale");
    if (has("logit_scale")) c.logits_scaling = number("logit_scale");
  }
  const GgufTensor& embedding = file.at("token_embd.weight");
  if (embedding.ne.size() != 2)
    throw Error(where + "tensor \"token_embd.weight\" has " + std::to_string(embedding.ne.size()) +
                " dimensions, expected 2");
  c.vocab = embedding.ne[1];
  c.tied = file.find("output.weight") == nullptr;
  return c;
}

struct TensorPlan {
  const GgufTensor* source = nullptr;
  // Joined with source: for each run of the slowest dimension (an expert, or the whole of a
  // matrix), source's rows and then second's (GraniteMoE's gate and up, fused again).
  const GgufTensor* second = nullptr;
  int part = -1;  // while planning: which of the two parts this GGUF tensor is
  std::string hf_name;
  std::vector<std::int64_t> ne;  // expected GGUF dims
  std::vector<std::int64_t> shape;  // the HF tensor's, when not the source's (an expert's slice, [1, C])
  std::int64_t expert = -1;         // >= 0: expert e's slice of experts stacked along the slowest dimension
  std::int64_t rotary_heads = 0;  // > 0: un-permute the rows with this many heads
  std::int64_t bloom_heads = 0;   // > 0: GGUF's [Q; K; V] rows back to Bloom's q, k, v per head
  bool norm_shift = false;        // stored as 1 + w
};

// Every tensor of the file with its HF name and expected shape; refuses a tensor
// without an HF counterpart, and a missing or misshapen one.
inline std::vector<TensorPlan> plan_tensors(const GgufFile& file, const GgufModelConfig& c) {
  const std::string where = file.path().string() + ": ";
  const GgufArchitecture& a = *c.arch;
  const std::int64_t d = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  struct Rule {
    std::string gguf, hf;
    std::vector<std::int64_t> ne;
    std::int64_t rotary_heads = 0;  // the heads whose rows to restore (Bloom: its per-head q/k/v interleaving)
    std::int64_t experts = 0;       // > 0: stacked experts, one HF tensor each (hf's "{e}" their index)
    std::vector<std::int64_t> shape = {};  // the HF shape, when not the file's
    int part = -1;                  // >= 0: this part of an HF tensor joined from two (GraniteMoE's gate|up)
  };
  std::vector<Rule> global, layer, dense, sparse;
  std::string layer_prefix = "model.layers.";
  if (a.layout == GgufLayout::llama) {
    global = {{"token_embd.weight", "model.embed_tokens.weight", {d, c.vocab}},
              {"output_norm.weight", "model.norm.weight", {d}}};
    layer = {{"attn_norm.weight", "input_layernorm.weight", {d}},
             {"attn_output.weight", "self_attn.o_proj.weight", {q, d}}};
    dense = {{"ffn_down.weight", "mlp.down_proj.weight", {c.ffn, d}}};
    const std::int64_t rotary_q = a.permuted_rotary ? c.heads : 0, rotary_k = a.permuted_rotary ? c.kv_heads : 0;
    if (a.fused) {
      layer.push_back({"attn_qkv.weight", "self_attn.qkv_proj.weight", {d, q + 2 * kv}});
      dense.push_back({"ffn_up.weight", "mlp.gate_up_proj.weight", {d, 2 * c.ffn}});
    } else {
      layer.push_back({"attn_q.weight", "self_attn.q_proj.weight", {d, q}, rotary_q});
      layer.push_back({"attn_k.weight", "self_attn.k_proj.weight", {d, kv}, rotary_k});
      layer.push_back({"attn_v.weight", "self_attn.v_proj.weight", {d, kv}});
      dense.push_back({"ffn_gate.weight", "mlp.gate_proj.weight", {d, c.ffn}});
      dense.push_back({"ffn_up.weight", "mlp.up_proj.weight", {d, c.ffn}});
    }
    if (c.experts > 0 && a.name == "granitemoe") {
      const std::int64_t E = c.experts, F = c.expert_ffn, S = c.shared_ffn;
      const std::string moe = "block_sparse_moe.";
      sparse = {{"ffn_gate_inp.weight", moe + "router.layer.weight", {d, E}},
                {"ffn_gate_exps.weight", moe + "input_linear.weight", {d, F, E}, 0, 0, {}, 0},
                {"ffn_up_exps.weight", moe + "input_linear.weight", {d, F, E}, 0, 0, {}, 1},
                {"ffn_down_exps.weight", moe + "output_linear.weight", {F, d, E}}};
      if (S > 0) {
        sparse.push_back({"ffn_gate_shexp.weight", "shared_mlp.input_linear.weight", {d, S}, 0, 0, {}, 0});
        sparse.push_back({"ffn_up_shexp.weight", "shared_mlp.input_linear.weight", {d, S}, 0, 0, {}, 1});
        sparse.push_back({"ffn_down_shexp.weight", "shared_mlp.output_linear.weight", {S, d}});
      }
    } else if (c.experts > 0) {
      const std::string moe = c.mixtral() ? "block_sparse_moe." : "mlp.";
      const std::int64_t E = c.experts, F = c.expert_ffn, S = c.shared_ffn;
      const bool m = c.mixtral();
      sparse = {{"ffn_gate_inp.weight", moe + "gate.weight", {d, E}},
                {"ffn_gate_exps.weight", moe + "experts.{e}." + (m ? "w1" : "gate_proj") + ".weight", {d, F, E}, 0, E},
                {"ffn_up_exps.weight", moe + "experts.{e}." + (m ? "w3" : "up_proj") + ".weight", {d, F, E}, 0, E},
                {"ffn_down_exps.weight", moe + "experts.{e}." + (m ? "w2" : "down_proj") + ".weight", {F, d, E}, 0, E}};
      if (S > 0) {
        sparse.push_back({"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", {d}, 0, 0, {1, d}});
        sparse.push_back({"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", {d, S}});
        sparse.push_back({"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", {d, S}});
        sparse.push_back({"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", {S, d}});
      }
    }
    if (a.qkv_bias) {
      layer.push_back({"attn_q.bias", "self_attn.q_proj.bias", {q}, rotary_q});
      layer.push_back({"attn_k.bias", "self_attn.k_proj.bias", {kv}, rotary_k});
      layer.push_back({"attn_v.bias", "self_attn.v_proj.bias", {kv}});
    }
    if (a.qk_norm) {
      layer.push_back({"attn_q_norm.weight", "self_attn.q_norm.weight", {c.head_dim}});
      layer.push_back({"attn_k_norm.weight", "self_attn.k_norm.weight", {c.head_dim}});
    }
    if (a.sandwich_norms) {
      layer.push_back({"post_attention_norm.weight", "post_attention_layernorm.weight", {d}});
      layer.push_back({"ffn_norm.weight", "pre_feedforward_layernorm.weight", {d}});
      layer.push_back({"post_ffw_norm.weight", "post_feedforward_layernorm.weight", {d}});
    } else {
      layer.push_back({"ffn_norm.weight", "post_attention_layernorm.weight", {d}});
    }
  } else {
    // LayerNorms and projections with biases: each rule below stands for its .weight and .bias.
    const bool bloom = a.layout == GgufLayout::bloom;
    layer_prefix = "transformer.h.";
    std::vector<Rule> global_parts, layer_parts;
    if (bloom) {
      global_parts = {{"token_embd_norm", "transformer.word_embeddings_layernorm", {d}}};
      layer_parts = {{"attn_norm", "input_layernorm", {d}},
                     {"attn_qkv", "self_attention.query_key_value", {d, 3 * d}, c.heads},
                     {"attn_output", "self_attention.dense", {d, d}},
                     {"ffn_norm", "post_attention_layernorm", {d}},
                     {"ffn_up", "mlp.dense_h_to_4h", {d, c.ffn}},
                     {"ffn_down", "mlp.dense_4h_to_h", {c.ffn, d}}};
    } else {
      layer_parts = {{"attn_norm", "ln_1", {d}},
                     {"attn_qkv", "attn.c_attn", {d, q + 2 * kv}},
                     {"attn_output", "attn.c_proj", {d, d}},
                     {"ffn_norm", "ln_2", {d}},
                     {"ffn_up", "mlp.c_fc", {d, c.ffn}},
                     {"ffn_down", "mlp.c_proj", {c.ffn, d}}};
    }
    global_parts.push_back({"output_norm", "transformer.ln_f", {d}});
    global = {{"token_embd.weight", bloom ? "transformer.word_embeddings.weight" : "transformer.wte.weight",
               {d, c.vocab}}};
    if (!bloom) global.push_back({"position_embd.weight", "transformer.wpe.weight", {d, c.context}});
    auto with_bias = [](const std::vector<Rule>& parts, std::vector<Rule>& into) {
      for (const Rule& r : parts) {
        into.push_back({r.gguf + ".weight", r.hf + ".weight", r.ne, r.rotary_heads});
        into.push_back({r.gguf + ".bias", r.hf + ".bias", {r.ne.back()}, r.rotary_heads});
      }
    };
    with_bias(global_parts, global);
    with_bias(layer_parts, layer);
  }
  if (c.experts > 0 && a.fused) throw Error(where + "has experts and fused projections, which ft does not convert");
  if (!c.tied) global.push_back({"output.weight", "lm_head.weight", {d, c.vocab}});

  std::map<std::string, TensorPlan, std::less<>> expected;
  auto expect = [&](const Rule& r, const std::string& gguf, const std::string& hf) {
    TensorPlan p;
    p.hf_name = hf;
    p.ne = r.ne;
    p.shape = r.shape;
    p.part = r.part;
    p.expert = r.experts > 0 ? r.experts : -1;  // how many, until the file's tensor is found
    if (a.layout == GgufLayout::bloom) p.bloom_heads = r.rotary_heads;
    else p.rotary_heads = r.rotary_heads;
    p.norm_shift = a.norm_shift && hf.ends_with("norm.weight");
    expected.emplace(gguf, std::move(p));
  };
  for (const Rule& r : global) expect(r, r.gguf, r.hf);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const bool sparse_layer = c.experts > 0 && c.sparse[std::size_t(l)];
    for (const std::vector<Rule>* rules : {&layer, sparse_layer ? &sparse : &dense})
      for (const Rule& r : *rules)
        expect(r, "blk." + std::to_string(l) + "." + r.gguf, layer_prefix + std::to_string(l) + "." + r.hf);
  }

  std::vector<TensorPlan> plan;
  for (const GgufTensor& t : file.tensors()) {
    if (!c.short_factors.empty() && (t.name == "rope_factors_short.weight" || t.name == "rope_factors_long.weight"))
      continue;  // config.json's rope_parameters
    auto it = expected.find(t.name);
    if (it == expected.end())
      throw Error(where + "tensor " + detail::quoted(t.name) + " has no counterpart in HF's " +
                  std::string(c.hf_class()) + " (block_count " + std::to_string(c.layers) + ")");
    TensorPlan p = std::move(it->second);
    expected.erase(it);
    if (t.ne != p.ne)
      throw Error(where + "tensor " + detail::quoted(t.name) + " has GGUF dims " + detail::shape_string(t.ne) +
                  ", but the config implies " + detail::shape_string(p.ne));
    if (!can_dequantize(t.type))
      throw Error(where + "tensor " + detail::quoted(t.name) + " has ggml type " + std::string(t.type_name()) +
                  ", which ft cannot dequantize (supported: " + std::string(dequantizable_types) + ")");
    p.source = &t;
    if (p.part >= 0) {
      const auto joined = std::ranges::find(plan, p.hf_name, &TensorPlan::hf_name);
      if (joined == plan.end()) {  // the first part found; the HF tensor is twice its rows
        p.shape = t.shape();
        p.shape[t.ne.size() == 3 ? 1 : 0] *= 2;
        if (p.part == 1) std::swap(p.source, p.second);
        plan.push_back(std::move(p));
      } else {
        (p.part == 0 ? joined->source : joined->second) = &t;
      }
      continue;
    }
    if (p.expert < 0) {
      plan.push_back(std::move(p));
      continue;
    }
    // One HF tensor per expert, each a slice of the stack.
    const std::int64_t experts = p.expert;
    const std::string name = p.hf_name;
    p.shape = {p.ne[1], p.ne[0]};
    for (std::int64_t e = 0; e < experts; ++e) {
      p.expert = e;
      p.hf_name = name;
      p.hf_name.replace(p.hf_name.find("{e}"), 3, std::to_string(e));
      plan.push_back(p);
    }
  }
  if (!expected.empty())
    throw Error(where + "tensor " + detail::quoted(expected.begin()->first) + " is missing (" +
                std::to_string(expected.size()) + " expected tensors in all are missing)");
  return plan;
}

inline void write_json(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << '\n';
  out.flush();
  if (!out) throw Error(path.string() + ": cannot be written");
}

template <class Json> std::string dump_json(const Json& j, const std::filesystem::path& gguf, const char* what) {
  try {
    return j.dump(2);
  } catch (const nlohmann::json::exception&) {
    throw Error(gguf.string() + ": " + what + " cannot be written: the file holds text that is not valid UTF-8");
  }
}

inline nlohmann::ordered_json hf_id(const std::optional<std::int64_t>& i) {
  return i ? nlohmann::ordered_json(*i) : nlohmann::ordered_json(nullptr);
}

// GPTBigCode's and Bloom's config.json, in their own keys.
inline nlohmann::ordered_json hf_layer_norm_config(const GgufModelConfig& c, const GgufVocab& v,
                                                   const std::string& dtype) {
  const GgufArchitecture& a = *c.arch;
  nlohmann::ordered_json j = {{"architectures", {a.hf_class}},
                              {"model_type", a.model_type},
                              {"bos_token_id", hf_id(v.bos)},
                              {"eos_token_id", hf_id(v.eos)},
                              {"pad_token_id", hf_id(v.pad)},
                              {"initializer_range", 0.02},
                              {"layer_norm_epsilon", c.norm_eps}};
  if (a.layout == GgufLayout::gpt_bigcode) {
    j["activation_function"] = "gelu_pytorch_tanh";
    j["multi_query"] = c.kv_heads == 1;
    j["n_embd"] = c.hidden;
    j["n_head"] = c.heads;
    j["n_inner"] = c.ffn;
    j["n_layer"] = c.layers;
    j["n_positions"] = c.context;
    j["scale_attn_weights"] = true;
  } else {
    j["apply_residual_connection_post_layernorm"] = false;
    j["hidden_size"] = c.hidden;
    j["n_head"] = c.heads;
    j["n_layer"] = c.layers;
  }
  j["tie_word_embeddings"] = c.tied;
  j["dtype"] = dtype;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab;
  return j;
}

inline nlohmann::ordered_json hf_model_config(const GgufModelConfig& c, const GgufVocab& v, const std::string& dtype) {
  const GgufArchitecture& a = *c.arch;
  if (a.layout != GgufLayout::llama) return hf_layer_norm_config(c, v, dtype);
  auto optional = [](const std::optional<double>& x) { return x ? nlohmann::ordered_json(*x) : nlohmann::ordered_json(nullptr); };
  const bool gemma2 = a.name == "gemma2", gemma3 = a.name == "gemma3", phi3 = a.name == "phi3";
  nlohmann::ordered_json rope = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  if (c.linear_rope_factor) {
    rope["rope_type"] = "linear";
    rope["factor"] = *c.linear_rope_factor;
  }
  if (c.rotary_dim != c.head_dim) rope["partial_rotary_factor"] = double(c.rotary_dim) / double(c.head_dim);
  if (!c.short_factors.empty()) {
    rope["rope_type"] = "longrope";
    rope["short_factor"] = c.short_factors;
    rope["long_factor"] = c.long_factors;
    rope["original_max_position_embeddings"] = c.original_context;
    if (c.rope_attention_factor) rope["attention_factor"] = *c.rope_attention_factor;
  }

  nlohmann::ordered_json j = {{"architectures", {c.hf_class()}},
                              {"model_type", c.model_type()},
                              {"attention_dropout", 0.0},
                              {"bos_token_id", hf_id(v.bos)},
                              {"eos_token_id", hf_id(v.eos)},
                              {"pad_token_id", hf_id(v.pad)},
                              {"head_dim", c.head_dim},
                              {"hidden_act", a.norm_shift ? "gelu_pytorch_tanh" : "silu"},
                              {"hidden_size", c.hidden},
                              {"initializer_range", 0.02},
                              {"intermediate_size", c.mixtral() || a.name == "granitemoe" ? c.expert_ffn : c.ffn},
                              {"max_position_embeddings", c.context},
                              {"num_attention_heads", c.heads},
                              {"num_hidden_layers", c.layers},
                              {"num_key_value_heads", c.kv_heads},
                              {"rms_norm_eps", c.norm_eps}};
  if (a.name == "llama" || a.name == "granite" || a.name == "qwen3" || a.name == "qwen3moe") {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (a.name == "granitemoe") j["attention_bias"] = false;
  if (a.name == "qwen2" || a.name == "qwen3" || a.name == "qwen2moe" || a.name == "qwen3moe")
    j["use_sliding_window"] = false;
  if (c.mixtral() || a.name == "granitemoe") {
    j["num_local_experts"] = c.experts;
    j["num_experts_per_tok"] = c.experts_used;
    if (c.mixtral()) j["sliding_window"] = nullptr;
    if (c.granite_shared()) j["shared_intermediate_size"] = c.shared_ffn;
  } else if (c.experts > 0) {
    j["num_experts"] = c.experts;
    j["num_experts_per_tok"] = c.experts_used;
    j["moe_intermediate_size"] = c.expert_ffn;
    j["norm_topk_prob"] = c.normalize_top_k;
    j["decoder_sparse_step"] = 1;
    nlohmann::ordered_json dense = nlohmann::ordered_json::array();
    for (std::int64_t l = 0; l < c.layers; ++l)
      if (!c.sparse[std::size_t(l)]) dense.push_back(l);
    j["mlp_only_layers"] = dense;
    if (a.name == "qwen2moe") j["shared_expert_intermediate_size"] = c.shared_ffn;
  }
  if (a.norm_shift) j["hidden_activation"] = "gelu_pytorch_tanh";
  if (gemma2 || gemma3) {
    // llama.cpp's own scale: 1/sqrt(head_dim), but 1/sqrt(embedding/heads) for the two 27B shapes.
    const bool wide = (gemma2 && c.layers == 46) || (gemma3 && c.layers == 62);
    j["query_pre_attn_scalar"] = wide ? c.hidden / c.heads : c.head_dim;
    j["attn_logit_softcapping"] = optional(c.attention_softcap);
    j["final_logit_softcapping"] = optional(c.logit_softcap);
    j["sliding_window"] = c.sliding_window;
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (std::int64_t l = 0; l < c.layers; ++l)
      types.push_back((gemma2 ? l % 2 == 0 : (l + 1) % 6 != 0) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (phi3) {
    j["original_max_position_embeddings"] = c.short_factors.empty() ? c.context : c.original_context;
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nlohmann::ordered_json(nullptr);
  }
  if (c.granite()) {
    j["attention_multiplier"] = c.attention_multiplier;
    j["embedding_multiplier"] = c.embedding_multiplier;
    j["residual_multiplier"] = c.residual_multiplier;
    j["logits_scaling"] = c.logits_scaling;
  }
  if (gemma3)
    j["rope_parameters"] = {{"full_attention", rope},
                            {"sliding_attention", {{"rope_theta", c.local_rope_theta}, {"rope_type", "default"}}}};
  else
    j["rope_parameters"] = rope;
  if (a.name == "llama") j["pretraining_tp"] = 1;
  j["tie_word_embeddings"] = c.tied;
  j["dtype"] = dtype;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab;
  return j;
}

inline nlohmann::ordered_json hf_generation_config(const GgufVocab& v) {
  nlohmann::ordered_json g = nlohmann::ordered_json::object();
  if (v.bos) g["bos_token_id"] = *v.bos;
  if (v.eos) g["eos_token_id"] = *v.eos;
  if (v.pad) g["pad_token_id"] = *v.pad;
  return g;
}

// Removes the temporary directory unless the conversion got to the end.
struct TempTree {
  std::filesystem::path path;
  bool keep = false;
  explicit TempTree(std::filesystem::path p) : path(std::move(p)) {}
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  ~TempTree() {
    std::error_code ec;
    if (!keep) std::filesystem::remove_all(path, ec);
  }
};

// The rows of expert e of a tensor whose slowest dimension stacks the experts
// (ggml's rows are whole blocks, so each expert's rows are a run of bytes).
inline GgufTensor expert_slice(const GgufTensor& stack, std::int64_t e) {
  GgufTensor t = stack;
  t.ne.pop_back();
  const std::size_t bytes = stack.bytes.size() / std::size_t(stack.ne.back());
  t.bytes = stack.bytes.subspan(std::size_t(e) * bytes, bytes);
  t.offset += std::uint64_t(e) * bytes;
  return t;
}

inline std::vector<float> dequantized(const GgufFile& file, const GgufTensor& t) {
  std::vector<float> values(std::size_t(t.numel()));
  dequantize(file, t, values.data(), t.numel());
  file.release(t);
  return values;
}

// Two tensors of one shape joined run by run along their slowest dimension
// (experts) or, for a matrix, one after the other.
inline std::vector<float> joined(const GgufFile& file, const TensorPlan& p) {
  const std::vector<float> first = dequantized(file, *p.source), second = dequantized(file, *p.second);
  const std::size_t runs = p.source->ne.size() == 3 ? std::size_t(p.source->ne.back()) : 1;
  const std::size_t run = first.size() / runs;
  std::vector<float> values;
  values.reserve(2 * first.size());
  for (std::size_t e = 0; e < runs; ++e)
    for (const std::vector<float>* part : {&first, &second})
      values.insert(values.end(), part->begin() + std::ptrdiff_t(e * run), part->begin() + std::ptrdiff_t((e + 1) * run));
  return values;
}

// The planned tensor's values, un-permuted where it needs it, as `dtype` bytes.
inline std::vector<std::byte> hf_tensor_bytes(const GgufFile& file, const TensorPlan& p, const std::string& dtype) {
  if (p.second) return encode_floats(joined(file, p), dtype);
  const GgufTensor t = p.expert >= 0 ? expert_slice(*p.source, p.expert) : *p.source;
  std::vector<float> values = dequantized(file, t);
  if (p.norm_shift)  // in float32, as transformers' GGUF reader subtracts it
    for (float& x : values) x -= 1.0f;
  if (p.rotary_heads > 0) {
    std::vector<float> unpermuted(values.size());
    const std::int64_t rows = t.ne.size() == 2 ? t.ne[1] : t.ne[0], cols = t.ne.size() == 2 ? t.ne[0] : 1;
    unpermute_rotary_rows(values.data(), unpermuted.data(), p.rotary_heads, rows / p.rotary_heads, cols);
    values.swap(unpermuted);
  }
  if (p.bloom_heads > 0) {
    std::vector<float> interleaved(values.size());
    const std::int64_t rows = t.ne.size() == 2 ? t.ne[1] : t.ne[0], cols = t.ne.size() == 2 ? t.ne[0] : 1;
    interleave_bloom_qkv(values.data(), interleaved.data(), p.bloom_heads, rows / 3 / p.bloom_heads, cols);
    values.swap(interleaved);
  }
  return encode_floats(values, dtype);
}

}  // namespace detail

inline void convert_gguf_to_hf(const std::filesystem::path& gguf, const std::filesystem::path& out_dir,
                               const GgufToHfOptions& options = {}) {
  namespace fs = std::filesystem;
  const std::string dtype = safetensors_dtype(options.dtype, gguf.string());
  const std::string dtype_name = dtype == "F32" ? "float32" : dtype == "BF16" ? "bfloat16" : "float16";
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    throw Error(out_dir.string() + ": already exists and is not an empty directory; choose a new output directory");

  const GgufFile file = GgufFile::open(gguf);
  const GgufModelConfig config = detail::read_gguf_config(file);
  const std::vector<detail::TensorPlan> plan = detail::plan_tensors(file, config);
  const GgufVocab vocab = read_gguf_vocab(file);
  if (vocab.size() != config.vocab)
    throw Error(gguf.string() + ": the tokenizer has " + std::to_string(vocab.size()) +
                " tokens, but token_embd.weight has " + std::to_string(config.vocab) + " rows");
  const std::string tokenizer = detail::dump_json(hf_tokenizer_json(vocab, gguf.string()), gguf, "tokenizer.json");
  const std::string tokenizer_config =
      detail::dump_json(hf_tokenizer_config(vocab, config.context), gguf, "tokenizer_config.json");

  const fs::path target = out_dir.has_filename() ? out_dir : out_dir.parent_path();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::create_directories(parent, ec);
  if (ec) throw Error(parent.string() + ": cannot be created (" + ec.message() + ")");
  detail::TempTree temp(parent / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid())));
  fs::remove_all(temp.path, ec);
  if (!fs::create_directory(temp.path, ec))
    throw Error(temp.path.string() + ": cannot be created (" + ec.message() + ")");

  detail::write_json(temp.path / "config.json", detail::hf_model_config(config, vocab, dtype_name).dump(2));
  detail::write_json(temp.path / "generation_config.json", detail::hf_generation_config(vocab).dump(2));
  detail::write_json(temp.path / "tokenizer.json", tokenizer);
  detail::write_json(temp.path / "tokenizer_config.json", tokenizer_config);

  std::vector<TensorToWrite> tensors;
  for (const detail::TensorPlan& p : plan)  // dequantised one at a time, as the writer reaches each
    tensors.push_back({p.hf_name, dtype, p.shape.empty() ? p.source->shape() : p.shape, {},
                       whole_bytes([&file, &p, &dtype] { return detail::hf_tensor_bytes(file, p, dtype); })});
  write_model_safetensors(temp.path, tensors, options.max_shard_bytes, {{"format", "pt"}}, options.progress);

  // rename(2) replaces an empty directory, and only an empty one.
  if (::rename(temp.path.c_str(), target.c_str()) != 0)
    throw Error(target.string() + ": cannot be created from " + temp.path.filename().string() + " (" +
                std::strerror(errno) + ")");
  temp.keep = true;
}

}  // namespace ft::io
