#pragma once
// Converting a Llama-architecture GGUF file (llama.cpp) into an HF model
// directory that transformers and ft load:
//
//   config.json              LlamaForCausalLM, from the llama.* keys
//   model.safetensors        float32 (default), bfloat16 or float16, HF tensor names; a model
//                            larger than max_shard_bytes is sharded as transformers shards
//                            (model_files.hpp)
//   tokenizer.json, tokenizer_config.json   from the tokenizer.* keys (gguf_tokenizer.hpp)
//   generation_config.json   BOS, EOS and padding ids
//
// GGUF keys read: general.architecture ("llama"), llama.context_length,
// embedding_length, block_count, feed_forward_length, attention.head_count,
// attention.head_count_kv (default: head_count), attention.key_length and
// value_length (default: embedding_length / head_count), attention.layer_norm_rms_epsilon,
// rope.freq_base (default 10000), rope.dimension_count (must equal the head size),
// rope.scaling.type and rope.scaling.factor ("none" or "linear").
//
// Tensor names, GGUF -> HF (N is the layer):
//   token_embd.weight -> model.embed_tokens.weight     output_norm.weight -> model.norm.weight
//   output.weight -> lm_head.weight (absent: tie_word_embeddings)
//   blk.N.attn_norm -> model.layers.N.input_layernorm      blk.N.ffn_norm -> ...post_attention_layernorm
//   blk.N.attn_q/attn_k/attn_v/attn_output -> ...self_attn.q_proj/k_proj/v_proj/o_proj
//   blk.N.ffn_gate/ffn_up/ffn_down -> ...mlp.gate_proj/up_proj/down_proj
//
// The rotary un-permutation. HF's Llama rotates the two halves of each head
// (dimension i with i + head_dim/2); llama.cpp rotates adjacent pairs (2i with
// 2i+1). llama.cpp's HF->GGUF converter therefore reorders the rows of attn_q
// (with the query head count) and attn_k (with the KV head count) within each
// head: GGUF row h*hd + 2j + i holds HF row h*hd + i*hd/2 + j (i in {0, 1},
// j < hd/2). unpermute_rotary_rows applies the inverse; attn_v and all else keep
// their row order.
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

// The head structure a Llama GGUF describes, with the rest of config.json.
struct GgufLlamaConfig {
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  std::int64_t context = 0;
  double rms_eps = 0, rope_theta = 10000;
  std::optional<double> linear_rope_factor;
  bool tied = false;
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

inline GgufLlamaConfig read_llama_config(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  const std::string where = file.path().string() + ": ";
  const std::string arch = m.get_string("general.architecture");
  if (arch != "llama")
    throw Error(where + "general.architecture is " + detail::quoted(arch) + "; only \"llama\" GGUF files can be converted");
  auto positive = [&](const std::string& key) {
    const std::uint64_t v = m.get_u64(key);
    if (v == 0 || v > (std::uint64_t(1) << 31))
      throw Error(where + "metadata key " + detail::quoted(key) + " is " + std::to_string(v) + ", not a plausible size");
    return std::int64_t(v);
  };
  GgufLlamaConfig c;
  c.hidden = positive("llama.embedding_length");
  c.layers = positive("llama.block_count");
  c.heads = positive("llama.attention.head_count");
  c.kv_heads = m.contains("llama.attention.head_count_kv") ? positive("llama.attention.head_count_kv") : c.heads;
  c.ffn = positive("llama.feed_forward_length");
  c.context = positive("llama.context_length");
  if (m.contains("llama.expert_count") && m.get_u64("llama.expert_count") > 0)
    throw Error(where + "is a mixture-of-experts Llama (llama.expert_count), which HF's LlamaForCausalLM cannot hold");
  if (c.heads % c.kv_heads != 0)
    throw Error(where + "head_count " + std::to_string(c.heads) + " is not a multiple of head_count_kv " +
                std::to_string(c.kv_heads));
  c.head_dim = m.contains("llama.attention.key_length") ? positive("llama.attention.key_length") : c.hidden / c.heads;
  if (!m.contains("llama.attention.key_length") && c.hidden % c.heads != 0)
    throw Error(where + "embedding_length " + std::to_string(c.hidden) + " is not a multiple of head_count " +
                std::to_string(c.heads));
  if (m.contains("llama.attention.value_length") && positive("llama.attention.value_length") != c.head_dim)
    throw Error(where + "attention.value_length differs from key_length, which HF's Llama cannot express");
  if (c.head_dim % 2 != 0) throw Error(where + "head size " + std::to_string(c.head_dim) + " is odd; rotary needs pairs");
  if (m.contains("llama.rope.dimension_count") && positive("llama.rope.dimension_count") != c.head_dim)
    throw Error(where + "llama.rope.dimension_count " + std::to_string(m.get_u64("llama.rope.dimension_count")) +
                " differs from the head size " + std::to_string(c.head_dim) +
                "; HF's Llama rotates whole heads");
  c.rms_eps = shortest(m.get_f32("llama.attention.layer_norm_rms_epsilon"));
  if (m.contains("llama.rope.freq_base")) c.rope_theta = shortest(m.get_f32("llama.rope.freq_base"));
  if (m.contains("llama.rope.scaling.type")) {
    const std::string type = m.get_string("llama.rope.scaling.type");
    if (type == "linear") c.linear_rope_factor = shortest(m.get_f32("llama.rope.scaling.factor"));
    else if (type != "none")
      throw Error(where + "llama.rope.scaling.type " + detail::quoted(type) + " is not supported (supported: none, linear)");
  }
  if (file.find("rope_freqs.weight"))
    throw Error(where + "has rope_freqs.weight (Llama 3.1 rope scaling), whose HF parameters the file does not keep");
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
  std::string hf_name;
  std::vector<std::int64_t> ne;  // expected GGUF dims
  std::int64_t rotary_heads = 0;  // > 0: un-permute the rows with this many heads
};

// Every tensor of the file with its HF name and expected shape; refuses a tensor
// without an HF counterpart, and a missing or misshapen one.
inline std::vector<TensorPlan> plan_tensors(const GgufFile& file, const GgufLlamaConfig& c) {
  const std::string where = file.path().string() + ": ";
  const std::int64_t d = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  struct Rule {
    std::string_view gguf, hf;
    std::vector<std::int64_t> ne;
    std::int64_t rotary_heads;
  };
  const std::vector<Rule> global = {{"token_embd.weight", "model.embed_tokens.weight", {d, c.vocab}, 0},
                                    {"output_norm.weight", "model.norm.weight", {d}, 0},
                                    {"output.weight", "lm_head.weight", {d, c.vocab}, 0}};
  const std::vector<Rule> layer = {
      {"attn_norm.weight", "input_layernorm.weight", {d}, 0},
      {"attn_q.weight", "self_attn.q_proj.weight", {d, q}, c.heads},
      {"attn_k.weight", "self_attn.k_proj.weight", {d, kv}, c.kv_heads},
      {"attn_v.weight", "self_attn.v_proj.weight", {d, kv}, 0},
      {"attn_output.weight", "self_attn.o_proj.weight", {q, d}, 0},
      {"ffn_norm.weight", "post_attention_layernorm.weight", {d}, 0},
      {"ffn_gate.weight", "mlp.gate_proj.weight", {d, c.ffn}, 0},
      {"ffn_up.weight", "mlp.up_proj.weight", {d, c.ffn}, 0},
      {"ffn_down.weight", "mlp.down_proj.weight", {c.ffn, d}, 0},
  };
  std::map<std::string, TensorPlan, std::less<>> expected;
  auto expect = [&](const Rule& r, const std::string& gguf, const std::string& hf) {
    TensorPlan p;
    p.hf_name = hf;
    p.ne = r.ne;
    p.rotary_heads = r.rotary_heads;
    expected.emplace(gguf, std::move(p));
  };
  for (const Rule& r : global)
    if (r.gguf != "output.weight" || !c.tied) expect(r, std::string(r.gguf), std::string(r.hf));
  for (std::int64_t l = 0; l < c.layers; ++l)
    for (const Rule& r : layer)
      expect(r, "blk." + std::to_string(l) + "." + std::string(r.gguf),
             "model.layers." + std::to_string(l) + "." + std::string(r.hf));

  std::vector<TensorPlan> plan;
  for (const GgufTensor& t : file.tensors()) {
    auto it = expected.find(t.name);
    if (it == expected.end())
      throw Error(where + "tensor " + detail::quoted(t.name) + " has no counterpart in HF's LlamaForCausalLM (block_count " +
                  std::to_string(c.layers) + ")");
    TensorPlan p = std::move(it->second);
    expected.erase(it);
    if (t.ne != p.ne)
      throw Error(where + "tensor " + detail::quoted(t.name) + " has GGUF dims " + detail::shape_string(t.ne) + ", but the config implies " +
                  detail::shape_string(p.ne));
    if (!can_dequantize(t.type))
      throw Error(where + "tensor " + detail::quoted(t.name) + " has ggml type " + std::string(t.type_name()) +
                  ", which ft cannot dequantize (supported: " + std::string(dequantizable_types) + ")");
    p.source = &t;
    plan.push_back(std::move(p));
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

inline nlohmann::ordered_json hf_llama_config(const GgufLlamaConfig& c, const GgufVocab& v, const std::string& dtype) {
  auto id = [](const std::optional<std::int64_t>& i) { return i ? nlohmann::ordered_json(*i) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json rope = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  if (c.linear_rope_factor) {
    rope["rope_type"] = "linear";
    rope["factor"] = *c.linear_rope_factor;
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", id(v.bos)},
          {"eos_token_id", id(v.eos)},
          {"pad_token_id", id(v.pad)},
          {"head_dim", c.head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", c.hidden},
          {"initializer_range", 0.02},
          {"intermediate_size", c.ffn},
          {"max_position_embeddings", c.context},
          {"mlp_bias", false},
          {"num_attention_heads", c.heads},
          {"num_hidden_layers", c.layers},
          {"num_key_value_heads", c.kv_heads},
          {"pretraining_tp", 1},
          {"rms_norm_eps", c.rms_eps},
          {"rope_parameters", rope},
          {"tie_word_embeddings", c.tied},
          {"dtype", dtype},
          {"use_cache", true},
          {"vocab_size", c.vocab}};
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

// The planned tensor's values, un-permuted where it needs it, as `dtype` bytes.
inline std::vector<std::byte> hf_tensor_bytes(const GgufFile& file, const TensorPlan& p, const std::string& dtype) {
  const GgufTensor& t = *p.source;
  std::vector<float> values(std::size_t(t.numel()));
  dequantize(file, t, values.data(), t.numel());
  file.release(t);
  if (p.rotary_heads > 0) {
    std::vector<float> unpermuted(values.size());
    unpermute_rotary_rows(values.data(), unpermuted.data(), p.rotary_heads, t.ne[1] / p.rotary_heads, t.ne[0]);
    values.swap(unpermuted);
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
  const GgufLlamaConfig config = detail::read_llama_config(file);
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

  detail::write_json(temp.path / "config.json", detail::hf_llama_config(config, vocab, dtype_name).dump(2));
  detail::write_json(temp.path / "generation_config.json", detail::hf_generation_config(vocab).dump(2));
  detail::write_json(temp.path / "tokenizer.json", tokenizer);
  detail::write_json(temp.path / "tokenizer_config.json", tokenizer_config);

  std::vector<TensorToWrite> tensors;
  for (const detail::TensorPlan& p : plan)  // dequantised one at a time, as the writer reaches each
    tensors.push_back({p.hf_name, dtype, p.source->shape(), {},
                       whole_bytes([&file, &p, &dtype] { return detail::hf_tensor_bytes(file, p, dtype); })});
  write_model_safetensors(temp.path, tensors, options.max_shard_bytes, {{"format", "pt"}}, options.progress);

  // rename(2) replaces an empty directory, and only an empty one.
  if (::rename(temp.path.c_str(), target.c_str()) != 0)
    throw Error(target.string() + ": cannot be created from " + temp.path.filename().string() + " (" +
                std::strerror(errno) + ")");
  temp.keep = true;
}

}  // namespace ft::io
