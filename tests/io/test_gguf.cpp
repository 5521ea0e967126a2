// GGUF: ggml's type table and block math agree with the `gguf` Python package
// bit for bit, metadata reads back with its types, a Llama GGUF converts into an
// HF directory with the q/k rows un-permuted, and every malformed file is
// refused with one line naming the file. Fixtures: tools/make_gguf_fixtures.py.
#include <doctest/doctest.h>

#include <algorithm>

#include "support/files.hpp"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/io/gguf.hpp>
#include <ft/io/gguf_to_hf.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/safetensors.hpp>

namespace test_gguf {

namespace fs = std::filesystem;
using namespace ft::io;

using ft::testing::error_of;
using ft::testing::read_bytes;
using ft::testing::write_bytes;

struct TempDir : ft::testing::TempDir {
  TempDir() : ft::testing::TempDir("ft_gguf") {}
};

namespace {

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures/gguf";





// GGUF bytes built piece by piece, for files no converter would write.
struct Bytes {
  std::string s;
  template <class T> Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& u32(std::uint32_t v) { return put(v); }
  Bytes& u64(std::uint64_t v) { return put(v); }
  Bytes& str(std::string_view text) {
    u64(text.size());
    s.append(text);
    return *this;
  }
  Bytes& raw(std::string_view text) {
    s.append(text);
    return *this;
  }
};

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;
  std::uint32_t type = 0;  // F32
  std::uint64_t offset = 0;
};

// A whole file: header, the given key/value bytes (`kv_count` entries), tensor
// infos, padding to 32 and `data_bytes` of data.
std::string gguf_file(std::uint64_t kv_count, const std::string& kvs, const std::vector<TensorInfo>& tensors,
                      std::size_t data_bytes) {
  Bytes b;
  b.raw("GGUF").u32(3).u64(tensors.size()).u64(kv_count).raw(kvs);
  for (const TensorInfo& t : tensors) {
    b.str(t.name).u32(std::uint32_t(t.ne.size()));
    for (auto n : t.ne) b.u64(n);
    b.u32(t.type).u64(t.offset);
  }
  b.s.resize((b.s.size() + 31) / 32 * 32, '\0');
  b.s.resize(b.s.size() + data_bytes, '\x01');
  return b.s;
}

std::string string_kv(std::string_view key, std::string_view value) {
  return Bytes().str(key).u32(8).str(value).s;
}

std::string open_error(const TempDir& dir, const std::string& bytes) {
  const fs::path p = dir / "bad.gguf";
  write_bytes(p, bytes);
  std::string msg = error_of([&] { GgufFile::open(p); });
  CHECK(msg.find(p.string()) != std::string::npos);
  return msg;
}

std::vector<float> dequantized(const GgufFile& f, const GgufTensor& t) {
  std::vector<float> v(std::size_t(t.numel()));
  dequantize(f, t, v.data(), t.numel());
  return v;
}

}  // namespace

TEST_CASE("gguf: ggml's type table matches gguf's GGML_QUANT_SIZES") {
  const nlohmann::json sizes = read_json_file(fixtures / "ggml_type_sizes.json");
  for (const auto& [name, entry] : sizes.items()) {
    CAPTURE(name);
    const GgmlTypeInfo* info = ggml_type_info(entry[0].get<std::uint32_t>());
    REQUIRE(info != nullptr);
    CHECK(info->name == name);
    CHECK(info->block_size == entry[1].get<std::int64_t>());
    CHECK(info->block_bytes == entry[2].get<std::int64_t>());
  }
  CHECK(ggml_type_info(4) == nullptr);  // retired Q4_2
  CHECK(ggml_type_info(1000) == nullptr);
}

TEST_CASE("gguf: dequantisation is bitwise that of gguf.quants for every supported type") {
  const GgufFile f = GgufFile::open(fixtures / "quants.gguf");
  const SafetensorsFile expected = SafetensorsFile::open(fixtures / "quants_expected.safetensors");
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  REQUIRE(f.tensors().size() == 9);
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"}) {
    CAPTURE(name);
    const GgufTensor& t = f.at(name);
    const TensorView& e = expected.at(name);
    CHECK(t.ne == std::vector<std::int64_t>{512, 3});
    CHECK(t.shape() == e.shape);
    const std::vector<float> got = dequantized(f, t);
    REQUIRE(got.size() * 4 == e.bytes.size());
    CHECK(std::memcmp(got.data(), e.bytes.data(), e.bytes.size()) == 0);

    // bf16 output is the float result rounded once.
    std::vector<ft::bf16> half(got.size());
    dequantize(f, t, half.data(), t.numel());
    std::size_t same = 0;
    for (std::size_t i = 0; i < got.size(); ++i) same += half[i].bits == ft::bf16(got[i]).bits;
    CHECK(same == got.size());
  }
}

TEST_CASE("gguf: metadata reads back with its types; wrong or missing keys are one-line errors") {
  const fs::path path = fixtures / "tiny_llama.gguf";
  const GgufFile f = GgufFile::open(path);
  const GgufMetadata& m = f.metadata();
  CHECK(m.get_string("general.architecture") == "llama");
  CHECK(m.get_u32("llama.block_count") == 2);
  CHECK(m.get_u64("llama.embedding_length") == 64);
  CHECK(m.get_f32("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
  CHECK_FALSE(m.get_bool("tokenizer.ggml.add_bos_token"));
  const auto tokens = m.get_strings("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() > 300);
  CHECK(tokens[1] == "<|im_start|>");
  CHECK(m.get_integers("tokenizer.ggml.token_type").size() == tokens.size());
  CHECK(m.get_array("tokenizer.ggml.merges").item_type == GgufType::String);

  auto has = [&](const std::string& msg, const std::string& part) {
    CAPTURE(msg);
    CHECK(msg.find(path.string()) != std::string::npos);
    CHECK(msg.find(part) != std::string::npos);
  };
  has(error_of([&] { m.get_u32("general.architecture"); }),
      "metadata key \"general.architecture\" has type string, expected u32");
  has(error_of([&] { m.get_string("llama.block_count"); }), "\"llama.block_count\" has type u32, expected string");
  has(error_of([&] { m.get_string("no.such.key"); }), "metadata key \"no.such.key\" is missing");
  has(error_of([&] { m.get_strings("tokenizer.ggml.token_type"); }), "has type array of i32, expected array of string");
  has(error_of([&] { m.get_floats("tokenizer.ggml.tokens"); }), "expected array of f32 or f64");
  has(error_of([&] { f.at("no.such.tensor"); }), "no tensor \"no.such.tensor\"");

  const GgufFile spm = GgufFile::open(fixtures / "tiny_llama_spm.gguf");
  CHECK(spm.metadata().get_floats("tokenizer.ggml.scores").size() ==
        spm.metadata().get_strings("tokenizer.ggml.tokens").size());
}

TEST_CASE("gguf: integer getters accept any integer type that fits") {
  TempDir dir;
  std::string kvs = Bytes().str("neg").u32(5).put(std::int32_t(-3)).s + Bytes().str("small").u32(0).put(std::uint8_t(7)).s +
                    Bytes().str("big").u32(10).u64(std::uint64_t(1) << 40).s;
  const fs::path p = dir / "ints.gguf";
  write_bytes(p, gguf_file(3, kvs, {}, 0));
  const GgufFile f = GgufFile::open(p);
  CHECK(f.metadata().get_i64("neg") == -3);
  CHECK(f.metadata().get_u32("small") == 7);
  CHECK(f.metadata().get_u64("big") == std::uint64_t(1) << 40);
  CHECK(error_of([&] { f.metadata().get_u32("neg"); }).find("value -3, which does not fit in u32") != std::string::npos);
  CHECK(error_of([&] { f.metadata().get_u32("big"); }).find("does not fit in u32") != std::string::npos);
}

TEST_CASE("gguf: a Llama GGUF converts into an HF directory") {
  TempDir dir;
  const fs::path gguf = fixtures / "tiny_llama.gguf";
  const fs::path out = dir / "model";
  std::vector<std::size_t> seen;
  std::size_t all = 0;
  GgufToHfOptions options;
  options.progress = [&](std::size_t done, std::size_t total) {  // bytes, after each of the 20 tensors
    all = total;
    seen.push_back(done);
  };
  convert_gguf_to_hf(gguf, out, options);
  CHECK(seen.size() == 20);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(seen.back() == all);
  // Nothing but the model directory is left beside it.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  const nlohmann::json config = read_json_file(out / "config.json");
  CHECK(config["architectures"][0] == "LlamaForCausalLM");
  CHECK(config["hidden_size"] == 64);
  CHECK(config["num_hidden_layers"] == 2);
  CHECK(config["num_attention_heads"] == 4);
  CHECK(config["num_key_value_heads"] == 2);
  CHECK(config["head_dim"] == 16);
  CHECK(config["intermediate_size"] == 128);
  CHECK(config["max_position_embeddings"] == 256);
  CHECK(config["rms_norm_eps"] == 1e-5);
  CHECK(config["rope_parameters"]["rope_theta"] == 10000.0);
  CHECK(config["tie_word_embeddings"] == true);
  CHECK(config["bos_token_id"] == 1);
  CHECK(config["eos_token_id"] == 2);
  CHECK(config["dtype"] == "float32");

  const GgufFile source = GgufFile::open(gguf);
  const std::int64_t vocab = std::int64_t(source.metadata().get_strings("tokenizer.ggml.tokens").size());
  CHECK(config["vocab_size"] == vocab);
  const ModelWeights weights = ModelWeights::open(out);
  CHECK(weights.names().size() == 2 + 2 * 9);
  CHECK(weights.find("lm_head.weight") == nullptr);
  CHECK(weights.at("model.embed_tokens.weight").shape == std::vector<std::int64_t>{vocab, 64});
  CHECK(weights.at("model.layers.1.self_attn.q_proj.weight").shape == std::vector<std::int64_t>{64, 64});
  CHECK(weights.at("model.layers.1.self_attn.k_proj.weight").shape == std::vector<std::int64_t>{32, 64});
  CHECK(weights.at("model.layers.1.self_attn.o_proj.weight").shape == std::vector<std::int64_t>{64, 64});
  CHECK(weights.at("model.layers.0.mlp.down_proj.weight").shape == std::vector<std::int64_t>{64, 128});
  CHECK(weights.at("model.layers.0.mlp.gate_proj.weight").shape == std::vector<std::int64_t>{128, 64});
  CHECK(weights.at("model.norm.weight").shape == std::vector<std::int64_t>{64});

  // Layer 0's attn_q/attn_k hold 1000 * (GGUF row) + column: HF row h*16 + i*8 + j
  // must come from GGUF row h*16 + 2j + i.
  for (const char* proj : {"q_proj", "k_proj"}) {
    CAPTURE(proj);
    const std::string name = std::string("model.layers.0.self_attn.") + proj + ".weight";
    const TensorView& t = weights.at(name);
    std::vector<float> hf(std::size_t(t.numel()));
    copy_elements(weights, name, hf.data(), t.numel());
    int wrong = 0;
    for (std::int64_t r = 0; r < t.shape[0]; ++r) {
      const std::int64_t h = r / 16, i = (r % 16) / 8, j = r % 8;
      for (std::int64_t c = 0; c < 64; ++c)
        wrong += hf[std::size_t(r * 64 + c)] != float(1000 * (h * 16 + 2 * j + i) + c);
    }
    CHECK(wrong == 0);
  }
  // Everything else keeps its order and its values.
  for (auto [gguf_name, hf_name] : {std::pair{"blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"},
                                    std::pair{"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
                                    std::pair{"token_embd.weight", "model.embed_tokens.weight"}}) {
    CAPTURE(gguf_name);
    const std::vector<float> want = dequantized(source, source.at(gguf_name));
    std::vector<float> got(want.size());
    copy_elements(weights, hf_name, got.data(), std::int64_t(got.size()));
    CHECK(got == want);
  }

  const nlohmann::json tokenizer = read_json_file(out / "tokenizer.json");
  CHECK(tokenizer["model"]["type"] == "BPE");
  CHECK(tokenizer["model"]["vocab"].size() == std::size_t(vocab));
  CHECK(tokenizer["model"]["vocab"]["<|im_end|>"] == 2);
  CHECK(tokenizer["model"]["merges"].size() == source.metadata().get_strings("tokenizer.ggml.merges").size());
  CHECK(tokenizer["pre_tokenizer"]["pretokenizers"][0]["type"] == "Digits");
  CHECK(tokenizer["pre_tokenizer"]["pretokenizers"][1]["type"] == "ByteLevel");
  CHECK(tokenizer["decoder"]["type"] == "ByteLevel");
  REQUIRE(tokenizer["added_tokens"].size() == 4);
  CHECK(tokenizer["added_tokens"][1]["content"] == "<|im_start|>");
  CHECK(tokenizer["added_tokens"][1]["special"] == true);
  CHECK(tokenizer["added_tokens"][3]["content"] == "<tool>");
  CHECK(tokenizer["added_tokens"][3]["special"] == false);

  const nlohmann::json tokenizer_config = read_json_file(out / "tokenizer_config.json");
  CHECK(tokenizer_config["chat_template"] == source.metadata().get_string("tokenizer.chat_template"));
  CHECK(tokenizer_config["bos_token"] == "<|im_start|>");
  CHECK(tokenizer_config["eos_token"] == "<|im_end|>");
  CHECK(tokenizer_config["pad_token"] == "<|im_end|>");
  CHECK(tokenizer_config["unk_token"] == "<|endoftext|>");
  CHECK(tokenizer_config["add_bos_token"] == false);
  const nlohmann::json generation = read_json_file(out / "generation_config.json");
  CHECK(generation["eos_token_id"] == 2);
  CHECK(generation["pad_token_id"] == 2);
}

TEST_CASE("gguf: bfloat16 output and shards") {
  TempDir dir;
  GgufToHfOptions options;
  options.dtype = "bfloat16";
  options.max_shard_bytes = 40000;
  convert_gguf_to_hf(fixtures / "tiny_llama.gguf", dir / "model", options);
  CHECK(read_json_file(dir / "model/config.json")["dtype"] == "bfloat16");
  CHECK_FALSE(fs::exists(dir / "model/model.safetensors"));
  const ModelWeights weights = ModelWeights::open(dir / "model");
  CHECK(weights.files().size() > 2);
  CHECK(weights.names().size() == 20);
  CHECK(weights.at("model.norm.weight").dtype == "BF16");
}

TEST_CASE("gguf: a SentencePiece vocabulary becomes a byte-fallback BPE tokenizer") {
  TempDir dir;
  convert_gguf_to_hf(fixtures / "tiny_llama_spm.gguf", dir / "model");
  const nlohmann::json tokenizer = read_json_file(dir / "model/tokenizer.json");
  CHECK(tokenizer["model"]["type"] == "BPE");
  CHECK(tokenizer["model"]["byte_fallback"] == true);
  CHECK(tokenizer["model"]["unk_token"] == "<unk>");
  CHECK(tokenizer["model"]["merges"].size() > 100);
  CHECK(tokenizer["normalizer"]["normalizers"][0]["type"] == "Prepend");
  CHECK(tokenizer["post_processor"]["single"][0]["SpecialToken"]["id"] == "<s>");
  CHECK(read_json_file(dir / "model/tokenizer_config.json")["add_bos_token"] == true);
}

TEST_CASE("gguf: conversion refuses what it cannot convert, and leaves nothing behind") {
  TempDir dir;
  const fs::path tiny = fixtures / "tiny_llama.gguf";
  auto convert_error = [&](const fs::path& gguf, const fs::path& out, GgufToHfOptions options = {}) {
    std::string msg = error_of([&] { convert_gguf_to_hf(gguf, out, options); });
    CHECK_FALSE(fs::exists(out));
    return msg;
  };

  const fs::path gpt2 = dir / "gpt2.gguf";
  write_bytes(gpt2, gguf_file(1, string_kv("general.architecture", "gpt2"), {}, 0));
  const std::string arch = convert_error(gpt2, dir / "a");
  CHECK(arch.find(gpt2.string()) != std::string::npos);
  CHECK(arch.find("general.architecture is \"gpt2\"; ft converts GGUF files of: llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, granite, starcoder, bloom") != std::string::npos);

  GgufToHfOptions f8;
  f8.dtype = "float8";
  CHECK(convert_error(tiny, dir / "b", f8).find("dtype \"float8\" is not supported") != std::string::npos);

  // A progress callback that throws stops the conversion half-way.
  GgufToHfOptions stop;
  int calls = 0;
  stop.progress = [&](std::size_t, std::size_t) {
    if (++calls == 5) throw ft::Error("stopped");
  };
  CHECK(convert_error(tiny, dir / "c", stop) == "stopped");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);  // gpt2.gguf

  fs::create_directories(dir / "full");
  write_bytes(dir / "full/keep.txt", "x");
  CHECK(error_of([&] { convert_gguf_to_hf(tiny, dir / "full"); }).find("already exists and is not an empty directory") !=
        std::string::npos);
  CHECK(fs::exists(dir / "full/keep.txt"));
  fs::create_directories(dir / "empty");
  convert_gguf_to_hf(tiny, dir / "empty");
  CHECK(fs::exists(dir / "empty/model.safetensors"));
}

TEST_CASE("gguf: the converter checks tensors and the tokenizer against the config") {
  TempDir dir;
  std::string base = string_kv("general.architecture", "llama");
  auto u32_kv = [](std::string_view key, std::uint32_t v) { return Bytes().str(key).u32(4).u32(v).s; };
  for (auto [key, v] : {std::pair{"llama.embedding_length", 32u}, std::pair{"llama.block_count", 1u},
                        std::pair{"llama.attention.head_count", 2u}, std::pair{"llama.feed_forward_length", 32u},
                        std::pair{"llama.context_length", 16u}})
    base += u32_kv(key, v);
  base += Bytes().str("llama.attention.layer_norm_rms_epsilon").u32(6).put(1e-5f).s;

  auto error_for = [&](const std::vector<TensorInfo>& tensors, std::size_t data, const std::string& extra_kv = "",
                       std::uint64_t extra_count = 0) {
    const fs::path p = dir / "llama.gguf";
    write_bytes(p, gguf_file(7 + extra_count, base + extra_kv, tensors, data));
    std::string msg = error_of([&] { convert_gguf_to_hf(p, dir / "out"); });
    CHECK(msg.find(p.string()) != std::string::npos);
    return msg;
  };
  CHECK(error_for({}, 0).find("no tensor \"token_embd.weight\"") != std::string::npos);
  CHECK(error_for({{"token_embd.weight", {32, 4}, 0, 0}}, 512).find("is missing") != std::string::npos);
  CHECK(error_for({{"token_embd.weight", {32, 4}, 0, 0}, {"blk.7.attn_q.weight", {32, 32}, 0, 512}}, 4608)
            .find("tensor \"blk.7.attn_q.weight\" has no counterpart") != std::string::npos);
  CHECK(error_for({{"token_embd.weight", {32, 4}, 0, 0}, {"output_norm.weight", {16}, 0, 512}}, 576)
            .find("has GGUF dims [16], but the config implies [32]") != std::string::npos);

  // A complete model whose tokenizer names a pre-tokenizer ft has no rule for.
  std::vector<TensorInfo> tensors = {{"token_embd.weight", {32, 4}, 0, 0}, {"output_norm.weight", {32}, 0, 0}};
  for (const char* n : {"attn_norm", "ffn_norm"}) tensors.push_back({std::string("blk.0.") + n + ".weight", {32}, 0, 0});
  for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
    tensors.push_back({std::string("blk.0.") + n + ".weight", {32, 32}, 0, 0});
  std::uint64_t offset = 0;
  for (TensorInfo& t : tensors) {
    t.offset = offset;
    std::uint64_t n = 4;
    for (auto d : t.ne) n *= d;
    offset += (n + 31) / 32 * 32;
  }
  std::string vocab = Bytes().str("tokenizer.ggml.tokens").u32(9).u32(8).u64(4).str("a").str("b").str("ab").str("c").s;
  vocab += Bytes().str("tokenizer.ggml.merges").u32(9).u32(8).u64(1).str("a b").s;
  vocab += string_kv("tokenizer.ggml.model", "gpt2");
  CHECK(error_for(tensors, offset, vocab + string_kv("tokenizer.ggml.pre", "mystery"), 4)
            .find("tokenizer.ggml.pre \"mystery\" is not supported; ft knows how llama.cpp splits text for: gpt-2") !=
        std::string::npos);
  CHECK(error_for(tensors, offset, vocab, 3).find("\"tokenizer.ggml.pre\" is missing") != std::string::npos);
  const fs::path ok = dir / "ok.gguf";
  write_bytes(ok, gguf_file(11, base + vocab + string_kv("tokenizer.ggml.pre", "gpt-2"), tensors, offset));
  convert_gguf_to_hf(ok, dir / "out");
  CHECK(read_json_file(dir / "out/config.json")["vocab_size"] == 4);
}

TEST_CASE("gguf: malformed files are refused with one line naming the file") {
  TempDir dir;
  auto refused = [&](const std::string& bytes, const std::string& part) {
    const std::string msg = open_error(dir, bytes);
    CAPTURE(msg);
    CHECK(msg.find(part) != std::string::npos);
  };
  const std::string arch = string_kv("general.architecture", "llama");

  refused("GGUF", "too short for the 24-byte header");
  refused(Bytes().raw("GGML").u32(3).u64(0).u64(0).s, "is not a GGUF file (it starts with \"GGML\"");
  refused(Bytes().raw("GGUF").u32(1).u64(0).u64(0).s, "GGUF version 1, which is not supported");
  refused(Bytes().raw("GGUF").u32(7).u64(0).u64(0).s, "GGUF version 7, which is not supported");
  refused(Bytes().raw("GGUF").u32(0x03000000).u64(0).u64(0).s, "big-endian GGUF");
  refused(Bytes().raw("GGUF").u32(3).u64(0).u64(std::uint64_t(1) << 40).s, "metadata count 1099511627776 is absurd");
  refused(Bytes().raw("GGUF").u32(3).u64(std::uint64_t(1) << 62).u64(0).s, "tensor count 4611686018427387904 is absurd");
  refused(gguf_file(1, Bytes().u64(1000).raw("general").s, {}, 0), "metadata key 0 at byte 24 has length 1000, past the end");
  refused(gguf_file(1, Bytes().str("k").u32(8).u64(std::uint64_t(-1)).s, {}, 0), "the value of metadata key \"k\"");
  refused(gguf_file(1, Bytes().str("k").u32(13).u32(0).s, {}, 0), "metadata key \"k\" has unknown value type 13");
  refused(gguf_file(1, Bytes().str("k").u32(9).u32(99).u64(1).s, {}, 0), "array of unknown value type 99");
  refused(gguf_file(1, Bytes().str("k").u32(9).u32(0).u64(std::uint64_t(1) << 40).s, {}, 0),
          "is an array of 1099511627776 u8 items, which cannot fit");
  refused(gguf_file(1, Bytes().str("k").u32(7).put(std::uint8_t(2)).s, {}, 0), "is a bool of value 2");
  refused(gguf_file(2, arch + arch, {}, 0), "metadata key \"general.architecture\" at byte 69 appears twice");
  {
    Bytes nested;
    nested.str("deep").u32(9);
    for (int i = 0; i < 12; ++i) nested.u32(9).u64(1);
    nested.u32(0).u64(0);
    refused(gguf_file(1, nested.s, {}, 0), "nests arrays more than 8 deep");
  }
  refused(gguf_file(1, string_kv("general.alignment", "32"), {}, 0), "\"general.alignment\" is string, expected u32");
  refused(gguf_file(1, Bytes().str("general.alignment").u32(4).u32(48).s, {}, 0), "is 48, not a power of two");

  refused(gguf_file(0, "", {{"t", {1, 1, 1, 1, 1}, 0, 0}}, 32), "tensor \"t\" has 5 dimensions (ggml allows at most 4)");
  refused(gguf_file(0, "", {{"t", {4}, 99, 0}}, 32), "tensor \"t\" has unknown ggml type id 99");
  refused(gguf_file(0, "", {{"t", {48}, 2, 0}}, 64), "of type Q4_0 has row length 48, not a multiple of its block size 32");
  refused(gguf_file(0, "", {{"t", {4}, 0, 8}}, 64), "has data offset 8, not a multiple of the alignment 32");
  refused(gguf_file(0, "", {{"t", {16}, 0, 32}}, 64), "tensor \"t\" data [32, 32 + 64) runs past the end of the data section (64 bytes)");
  refused(gguf_file(0, "", {{"t", {std::uint64_t(1) << 62, 1 << 20}, 0, 0}}, 64), "tensor \"t\" is too large to address");
  refused(gguf_file(0, "", {{"t", {std::uint64_t(1) << 63}, 0, 0}}, 64), "of size 9223372036854775808, too large");
  refused(gguf_file(0, "", {{"a", {16}, 0, 0}, {"b", {16}, 0, 32}}, 96), "tensors \"a\" [0, 64) and \"b\" [32, 96) overlap");
  refused(gguf_file(0, "", {{"a", {4}, 0, 0}, {"a", {4}, 0, 32}}, 64), "tensor \"a\" at byte 57 appears twice");
  refused(gguf_file(0, "", {{"", {4}, 0, 0}}, 64), "tensor 0 at byte 24 has an empty name");
  {
    std::string file = gguf_file(0, "", {{"t", {4}, 0, 0}}, 16);
    file.resize(60);  // the tensor info ends at byte 57, the padding would reach 64
    refused(file, "the data section would start at byte 64, past the end of the file (60 bytes)");
  }

  // An unsupported block type opens, and refuses to dequantise by name.
  const fs::path p = dir / "q2k.gguf";
  write_bytes(p, gguf_file(0, "", {{"t", {256}, 10, 0}}, 96));
  const GgufFile f = GgufFile::open(p);
  std::vector<float> out(256);
  const std::string msg = error_of([&] { dequantize(f, f.at("t"), out.data(), 256); });
  CHECK(msg.find(p.string()) != std::string::npos);
  CHECK(msg.find("tensor \"t\" has ggml type Q2_K, which ft cannot dequantize (supported: F32, F16") != std::string::npos);
}

TEST_CASE("gguf: a file cut short anywhere is refused") {
  TempDir dir;
  const std::string whole = read_bytes(fixtures / "tiny_llama.gguf");
  const fs::path p = dir / "cut.gguf";
  std::vector<std::size_t> cuts;
  for (std::size_t n = 0; n < 600; ++n) cuts.push_back(n);
  for (std::size_t n = 600; n < whole.size(); n += 97) cuts.push_back(n);
  cuts.push_back(whole.size() - 1);
  int refused = 0;
  for (std::size_t n : cuts) {
    write_bytes(p, whole.substr(0, n));
    const std::string msg = error_of([&] { GgufFile::open(p); });
    CAPTURE(n);
    CAPTURE(msg);
    CHECK(msg.find(p.string()) != std::string::npos);
    refused += msg != "<no error>";
  }
  CHECK(refused == int(cuts.size()));
}

}  // namespace test_gguf
