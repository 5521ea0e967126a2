// safetensors: what is written reads back byte for byte, the HF-written fixture
// reads with the shapes its config implies, sharded models resolve across
// shards, and every malformed file is refused with one line naming the file.
#include <doctest/doctest.h>

#include "support/files.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/io/model_weights.hpp>
#include <ft/io/safetensors.hpp>

namespace test_safetensors {

namespace fs = std::filesystem;
using ft::bf16;
using ft::f16;
using namespace ft::io;

using ft::testing::error_of;
using ft::testing::read_bytes;
using ft::testing::write_bytes;

struct TempDir : ft::testing::TempDir {
  TempDir() : ft::testing::TempDir("ft_safetensors") {}
};

namespace {

const fs::path llama_dir = fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity/llama_gqa";

// A fresh directory per test, removed with everything in it.

template <class T> std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// Built member by member: aggregate initialisation of members that can throw is
// miscompiled by GCC 12 when one does.
TensorToWrite tensor(std::string name, std::string dtype, std::vector<std::int64_t> shape,
                     std::span<const std::byte> bytes) {
  TensorToWrite t;
  t.name = std::move(name);
  t.dtype = std::move(dtype);
  t.shape = std::move(shape);
  t.bytes = bytes;
  return t;
}


std::string open_error(const fs::path& p) {
  return error_of([&] { SafetensorsFile::open(p); });
}



std::string u64_le(std::uint64_t n) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s;
}

// A file with the given header text and `data_size` zero bytes of data.
fs::path raw_file(const TempDir& dir, const std::string& header, std::size_t data_size) {
  fs::path p = dir / "raw.safetensors";
  write_bytes(p, u64_le(header.size()) + header + std::string(data_size, '\0'));
  return p;
}

}  // namespace

TEST_CASE("safetensors round trip: dtypes, a scalar, an empty tensor and metadata") {
  TempDir dir;
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  std::vector<bf16> b16 = {bf16(1.0f), bf16(-0.5f), bf16(3.0f)};  // 6 bytes: an F32 after it would be unaligned
  std::vector<f16> h16 = {f16(0.25f), f16(-8.0f), f16(65504.0f)};
  std::vector<double> f64 = {3.141592653589793};
  std::vector<std::int64_t> i64 = {1, -2, 1LL << 40, 4, 5};
  std::vector<float> none;

  std::vector<TensorToWrite> tensors;
  tensors.push_back(tensor("a.f32", "F32", {2, 3}, bytes_of(f32)));
  tensors.push_back(tensor("b.bf16", "BF16", {3}, bytes_of(b16)));
  tensors.push_back(tensor("c.f16", "F16", {3, 1}, bytes_of(h16)));
  tensors.push_back(tensor("d.scalar", "F64", {}, bytes_of(f64)));
  tensors.push_back(tensor("e.empty", "F32", {0, 4}, bytes_of(none)));
  tensors.push_back(tensor("f.i64", "I64", {5}, bytes_of(i64)));
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "quotes \" and\nnewlines"}};
  fs::path p = dir / "model.safetensors";
  write_safetensors(p, tensors, metadata);

  // Nothing but the final file is left behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  SafetensorsFile file = SafetensorsFile::open(p);
  CHECK(file.path() == p);
  CHECK(file.metadata() == metadata);
  REQUIRE(file.tensors().size() == tensors.size());
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, read_bytes(p).data(), 8);
  CHECK(header_size % 8 == 0);
  // Written largest element first (8-byte, then 4, then 2), each group in the given order.
  std::vector<std::string> in_file;
  for (const TensorView& t : file.tensors()) in_file.push_back(t.name);
  CHECK(in_file == std::vector<std::string>{"d.scalar", "f.i64", "a.f32", "e.empty", "b.bf16", "c.f16"});
  const std::byte* data_start = file.tensors()[0].bytes.data();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = file.at(tensors[i].name);
    CAPTURE(t.name);
    CHECK(t.dtype == tensors[i].dtype);
    CHECK(t.shape == tensors[i].shape);
    REQUIRE(t.bytes.size() == tensors[i].bytes.size());
    CHECK(std::equal(t.bytes.begin(), t.bytes.end(), tensors[i].bytes.begin()));
    CHECK(std::size_t(t.bytes.data() - data_start) % ft::io::detail::dtype_size(t.dtype) == 0);
    CHECK(file.find(t.name) == &t);
    CHECK(&file.at(t.name) == &t);
  }
  CHECK(file.at("d.scalar").numel() == 1);
  CHECK(file.at("e.empty").numel() == 0);
  CHECK(file.at("a.f32").numel() == 6);
  CHECK(file.find("nope") == nullptr);
  CHECK(error_of([&] { file.at("nope"); }) == p.string() + ": no tensor \"nope\"");

  std::vector<double> scalar(1);
  copy_elements(file, file.at("d.scalar"), scalar.data(), 1);
  CHECK(scalar[0] == f64[0]);
  std::vector<std::int64_t> ints(5);
  copy_elements(file, file.at("f.i64"), ints.data(), 5);
  CHECK(ints == i64);
  copy_elements(file, file.at("e.empty"), static_cast<float*>(nullptr), 0);

  // Without metadata there is no "__metadata__" key at all, as HF writes it.
  write_safetensors(p, tensors);
  CHECK(read_bytes(p).find("__metadata__") == std::string::npos);
  CHECK(SafetensorsFile::open(p).metadata().empty());

  // No tensors at all is a valid file too.
  write_safetensors(p, {}, {{"k", "v"}});
  SafetensorsFile nothing = SafetensorsFile::open(p);
  CHECK(nothing.tensors().empty());
  CHECK(nothing.metadata().at("k") == "v");
}

TEST_CASE("safetensors written tensors tile the data without a gap, each aligned to its element, whatever their sizes") {
  TempDir dir;
  const fs::path p = dir.path / "mixed.safetensors";
  const std::vector<std::uint8_t> odd = {1, 2, 3};
  const std::vector<float> four = {1, 2, 3, 4};
  const std::vector<std::uint16_t> halves = {7, 8, 9};
  auto bytes = [](const auto& v) { return std::as_bytes(std::span(v)); };
  write_safetensors(p, {{"a.codes", "U8", {3}, bytes(odd)},
                        {"b.half", "BF16", {3}, bytes(halves)},
                        {"c.values", "F32", {4}, bytes(four)},
                        {"d.codes", "U8", {3}, bytes(odd)}});
  const std::string whole = read_bytes(p);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, whole.data(), 8);
  const auto header = nlohmann::json::parse(whole.substr(8, header_size));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    CHECK_MESSAGE(begin % ft::io::detail::dtype_size(t["dtype"].get<std::string>()) == 0, name);
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    CHECK(begin == at);  // safetensors' own readers refuse a hole
    at = end;
  }
  CHECK(at == whole.size() - 8 - header_size);
  const SafetensorsFile file = SafetensorsFile::open(p);
  CHECK(std::memcmp(file.at("d.codes").bytes.data(), odd.data(), 3) == 0);
  CHECK(std::memcmp(file.at("c.values").bytes.data(), four.data(), 16) == 0);
}

TEST_CASE("safetensors views outlive their file object and an overwrite of the path") {
  TempDir dir;
  fs::path p = dir / "w.safetensors";
  std::vector<float> first = {1, 2, 3, 4};
  std::vector<float> second = {9, 9, 9, 9};
  write_safetensors(p, {tensor("w", "F32", {4}, bytes_of(first))});
  TensorView view;
  {
    SafetensorsFile file = SafetensorsFile::open(p);
    view = file.at("w");
  }
  // The rename replaces the name; the mapped bytes are the old file's.
  write_safetensors(p, {tensor("w", "F32", {4}, bytes_of(second))});
  fs::remove(p);
  std::vector<float> got(4);
  std::memcpy(got.data(), view.bytes.data(), 16);
  CHECK(got == first);
}

TEST_CASE("safetensors copy_elements converts between floating types") {
  TempDir dir;
  std::vector<bf16> b = {bf16(1.0f), bf16(-2.5f), bf16(0.15625f)};
  std::vector<float> f = {0.1f, -3.0f, 1e30f};
  std::vector<f16> h = {f16(0.5f), f16(-1.0f / 1024), f16(65504.0f)};
  std::vector<double> d = {0.1, 2.0, -1e-5};
  std::vector<std::int32_t> i32 = {-7, 0, 2147483647};
  std::vector<std::int64_t> big = {1, 1LL << 40, 3};
  fs::path p = dir / "c.safetensors";
  write_safetensors(p, {tensor("b", "BF16", {3}, bytes_of(b)), tensor("f", "F32", {3}, bytes_of(f)),
                        tensor("h", "F16", {3}, bytes_of(h)), tensor("d", "F64", {3}, bytes_of(d)),
                        tensor("i32", "I32", {3}, bytes_of(i32)), tensor("big", "I64", {3}, bytes_of(big))});
  SafetensorsFile file = SafetensorsFile::open(p);

  std::vector<float> out(3);
  copy_elements(file, file.at("b"), out.data(), 3);
  CHECK(out == std::vector<float>{1.0f, -2.5f, 0.15625f});
  copy_elements(file, file.at("h"), out.data(), 3);
  CHECK(out == std::vector<float>{0.5f, -1.0f / 1024, 65504.0f});
  copy_elements(file, file.at("d"), out.data(), 3);
  CHECK(out == std::vector<float>{0.1f, 2.0f, -1e-5f});

  std::vector<double> dout(3);
  copy_elements(file, file.at("f"), dout.data(), 3);
  CHECK(dout == std::vector<double>{double(0.1f), -3.0, double(1e30f)});

  std::vector<bf16> bout(3);
  copy_elements(file, file.at("f"), bout.data(), 3);
  CHECK(float(bout[0]) == float(bf16(0.1f)));
  copy_elements(file, file.at("b"), bout.data(), 3);
  CHECK(bout[2].bits == b[2].bits);
  std::vector<f16> hout(3);
  copy_elements(file, file.at("b"), hout.data(), 3);
  CHECK(float(hout[1]) == -2.5f);

  std::vector<std::int64_t> iout(3);
  copy_elements(file, file.at("i32"), iout.data(), 3);
  CHECK(iout == std::vector<std::int64_t>{-7, 0, 2147483647});
  std::vector<std::int32_t> i32out(3);
  copy_elements(file, file.at("i32"), i32out.data(), 3);
  CHECK(i32out == i32);

  const std::string where = p.string() + ": ";
  CHECK(error_of([&] { copy_elements(file, file.at("b"), out.data(), 2); }) ==
        where + "tensor \"b\" has 3 elements (shape [3]), but 2 were asked for");
  CHECK(error_of([&] { copy_elements(file, file.at("i32"), out.data(), 3); }) ==
        where + "tensor \"i32\" has dtype I32, which cannot be copied into float");
  CHECK(error_of([&] { copy_elements(file, file.at("f"), iout.data(), 3); }) ==
        where + "tensor \"f\" has dtype F32, which cannot be copied into int64");
  CHECK(error_of([&] { copy_elements(file, file.at("big"), i32out.data(), 3); }) ==
        where + "tensor \"big\" has value 1099511627776 at element 1, which does not fit in int32");
}

TEST_CASE("safetensors reads the HF-written llama_gqa fixture with the shapes config.json implies") {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(llama_dir / "config.json"));
  const std::int64_t vocab = config["vocab_size"], hidden = config["hidden_size"];
  const std::int64_t inter = config["intermediate_size"], layers = config["num_hidden_layers"];
  const std::int64_t heads = config["num_attention_heads"], kv_heads = config["num_key_value_heads"];
  const std::int64_t head_dim = config["head_dim"];
  CHECK(vocab == 128);
  CHECK(hidden == 64);

  SafetensorsFile file = SafetensorsFile::open(llama_dir / "model.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(std::int64_t(file.tensors().size()) == 3 + 9 * layers);
  using Shape = std::vector<std::int64_t>;
  CHECK(file.at("model.embed_tokens.weight").shape == Shape{vocab, hidden});
  CHECK(file.at("lm_head.weight").shape == Shape{vocab, hidden});
  CHECK(file.at("model.norm.weight").shape == Shape{hidden});
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    CAPTURE(pre);
    CHECK(file.at(pre + "self_attn.q_proj.weight").shape == Shape{heads * head_dim, hidden});
    CHECK(file.at(pre + "self_attn.k_proj.weight").shape == Shape{kv_heads * head_dim, hidden});
    CHECK(file.at(pre + "self_attn.v_proj.weight").shape == Shape{kv_heads * head_dim, hidden});
    CHECK(file.at(pre + "self_attn.o_proj.weight").shape == Shape{hidden, heads * head_dim});
    CHECK(file.at(pre + "mlp.gate_proj.weight").shape == Shape{inter, hidden});
    CHECK(file.at(pre + "mlp.up_proj.weight").shape == Shape{inter, hidden});
    CHECK(file.at(pre + "mlp.down_proj.weight").shape == Shape{hidden, inter});
    CHECK(file.at(pre + "input_layernorm.weight").shape == Shape{hidden});
    CHECK(file.at(pre + "post_attention_layernorm.weight").shape == Shape{hidden});
  }
  for (std::size_t i = 1; i < file.tensors().size(); ++i)
    CHECK(file.tensors()[i - 1].bytes.data() < file.tensors()[i].bytes.data());
  for (const TensorView& t : file.tensors()) CHECK(t.dtype == "F32");

  // The same through ModelWeights, which finds model.safetensors in the directory.
  ModelWeights weights = ModelWeights::open(llama_dir);
  CHECK(weights.names().size() == file.tensors().size());
  std::vector<float> embed(std::size_t(vocab * hidden));
  copy_elements(weights, "model.embed_tokens.weight", embed.data(), vocab * hidden);
  bool finite = true, nonzero = false;
  for (float x : embed) {
    finite = finite && std::isfinite(x);
    nonzero = nonzero || x != 0.0f;
  }
  CHECK(finite);
  CHECK(nonzero);
}

TEST_CASE("safetensors refuses every truncation of the llama_gqa fixture with an Error") {
  TempDir dir;
  const std::string whole = read_bytes(llama_dir / "model.safetensors");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, whole.data(), 8);
  const std::size_t header_end = 8 + header_size;
  fs::path p = dir / "cut.safetensors";
  const std::string where = p.string() + ": ";
  for (std::size_t cut : {std::size_t(0), std::size_t(4), std::size_t(7), std::size_t(8), std::size_t(9),
                          header_end / 2, header_end - 1, header_end, header_end + 1,
                          header_end + (whole.size() - header_end) / 2, whole.size() - 1}) {
    CAPTURE(cut);
    write_bytes(p, whole.substr(0, cut));
    std::string msg = open_error(p);
    CHECK(msg.rfind(where, 0) == 0);
    if (cut < 8)
      CHECK(msg == where + "is " + std::to_string(cut) +
                       " bytes, too short for the 8-byte header length of a safetensors file");
    else if (cut < header_end)
      CHECK(msg == where + "header length " + std::to_string(header_size) + " runs past the end of the file (" +
                       std::to_string(cut) + " bytes); the file is truncated or not safetensors");
    else
      CHECK(msg.find("runs past the end of the data (" + std::to_string(cut - header_end) + " bytes)") !=
            std::string::npos);
  }
  CHECK(open_error(p).find("tensor \"model.norm.weight\" data [361472, 361728) runs past the end of the data "
                           "(361727 bytes)") != std::string::npos);
}

TEST_CASE("safetensors refuses malformed headers with one line naming the file") {
  TempDir dir;
  fs::path p = dir / "raw.safetensors";
  const std::string where = p.string() + ": ";
  auto refusal = [&](const std::string& header, std::size_t data_size) {
    return open_error(raw_file(dir, header, data_size));
  };

  SUBCASE("a well-formed file with a space-padded header opens") {
    SafetensorsFile f = SafetensorsFile::open(
        raw_file(dir, R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + std::string(37, ' '), 8));
    CHECK(f.at("x").shape == std::vector<std::int64_t>{2});
  }
  SUBCASE("garbage JSON") {
    CHECK(refusal("{\"x\": garbage}", 0) == where + "header is not valid JSON (byte 7 of 14)");
    CHECK(refusal(std::string(16, '\0'), 0).rfind(where + "header is not valid JSON", 0) == 0);
    CHECK(refusal("", 0) == where + "header is not valid JSON (byte 1 of 0)");
    CHECK(refusal("{} trailing", 0).rfind(where + "header is not valid JSON", 0) == 0);
    CHECK(refusal("{\"bad utf8 \xff\": 1}", 0).rfind(where + "header is not valid JSON", 0) == 0);
  }
  SUBCASE("a header that is not an object") {
    CHECK(refusal("[1, 2]", 0) == where + "header is not a JSON object mapping tensor names to tensors");
  }
  SUBCASE("entries of the wrong shape") {
    CHECK(refusal(R"({"x": 5})", 0) ==
          where + R"(tensor "x" must be an object with "dtype", "shape" and "data_offsets", not number)");
    CHECK(refusal(R"({"x": {"shape": [], "data_offsets": [0, 4]}})", 4) == where + R"(tensor "x" has no "dtype")");
    CHECK(refusal(R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has no "shape")");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": []}})", 4) == where + R"(tensor "x" has no "data_offsets")");
    CHECK(refusal(R"({"x": {"dtype": 1, "shape": [], "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has a "dtype" that is not a string)");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": 3, "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has a "shape" that is not a list of integers)");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has a "shape" that is not a list of integers)");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4) ==
          where + R"(tensor "x" has "data_offsets" that are not a pair of non-negative integers [begin, end])");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4) ==
          where + R"(tensor "x" has "data_offsets" that are not a pair of non-negative integers [begin, end])");
    CHECK(refusal(R"({"__metadata__": {"a": 1}})", 0) == where + R"("__metadata__" entry "a" must be a string, not number)");
    CHECK(refusal(R"({"__metadata__": []})", 0) == where + R"("__metadata__" must be an object mapping strings to strings)");
  }
  SUBCASE("bad dtype") {
    CHECK(refusal(R"({"x": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has unknown dtype "Q4_K" (known: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, )"
                  R"(I16, I8, U64, U32, U16, U8, BOOL))");
    CHECK(refusal(R"({"x": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4).find("unknown dtype \"f32\"") !=
          std::string::npos);
  }
  SUBCASE("bad shapes and offsets") {
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 4]}})", 4) ==
          where + R"(tensor "x" has negative dimension -3 in shape [2, -3])");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8) ==
          where + R"(tensor "x" data [8, 4) ends before it begins)");
    CHECK(refusal(R"({"x": {"dtype": "U8", "shape": [390], "data_offsets": [10, 400]}})", 300) ==
          where + R"(tensor "x" data [10, 400) runs past the end of the data (300 bytes))");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16) ==
          where + R"(tensor "x" data [0, 16) is 16 bytes, but shape [2, 3] of F32 needs 24)");
    CHECK(refusal(R"({"x": {"dtype": "F32", "shape": [], "data_offsets": [0, 0]}})", 4) ==
          where + R"(tensor "x" data [0, 0) is 0 bytes, but shape [] of F32 needs 4)");
    CHECK(refusal(R"({"x": {"dtype": "F64", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8) ==
          where + R"(tensor "x" has shape [4611686018427387904, 4], too large to address)");
    CHECK(refusal(R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 0]}})", 8)
              .find("ends before it begins") != std::string::npos);
  }
  SUBCASE("overlapping tensors") {
    CHECK(refusal(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                  R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                  24) == where + R"(tensors "a" [0, 16) and "b" [8, 24) overlap)");
    // A long tensor overlaps one that starts after a short one inside it.
    CHECK(refusal(R"({"long": {"dtype": "U8", "shape": [32], "data_offsets": [0, 32]},)"
                  R"( "s1": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},)"
                  R"( "s2": {"dtype": "U8", "shape": [4], "data_offsets": [20, 24]}})",
                  32) == where + R"(tensors "long" [0, 32) and "s2" [20, 24) overlap)");
    // Two empty tensors at the same offset take no bytes and are fine.
    SafetensorsFile f = SafetensorsFile::open(
        raw_file(dir, R"({"e1": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
                      R"( "e2": {"dtype": "F32", "shape": [0, 9], "data_offsets": [4, 4]},)"
                      R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                 4));
    REQUIRE(f.tensors().size() == 3);
    CHECK(f.tensors()[0].name == "w");  // in offset order
  }
  SUBCASE("names are quoted so that a message stays on one line") {
    CHECK(refusal(R"({"a\nb": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", 8) ==
          where + R"(tensor "a\nb" data [0, 8) is 8 bytes, but shape [1] of F32 needs 4)");
  }
  SUBCASE("header lengths out of range") {
    write_bytes(p, u64_le(200'000'000) + std::string(16, ' '));
    CHECK(open_error(p) == where + "header length 200000000 is absurd (more than 100000000 bytes); "
                                   "this is not a safetensors file");
    write_bytes(p, u64_le(~std::uint64_t(0)));
    CHECK(open_error(p).find("is absurd") != std::string::npos);
    write_bytes(p, u64_le(17) + "{}");
    CHECK(open_error(p) == where + "header length 17 runs past the end of the file (10 bytes); "
                                   "the file is truncated or not safetensors");
  }
}

TEST_CASE("safetensors refuses paths that are not files") {
  TempDir dir;
  fs::path empty = dir / "empty.safetensors";
  write_bytes(empty, "");
  CHECK(open_error(empty) ==
        empty.string() + ": is 0 bytes, too short for the 8-byte header length of a safetensors file");
  CHECK(open_error(dir.path) == dir.path.string() + ": is a directory, not a safetensors file");
  fs::path missing = dir / "missing.safetensors";
  CHECK(open_error(missing) == missing.string() + ": cannot be opened (No such file or directory)");
  CHECK_THROWS_AS(SafetensorsFile::open(missing), ft::Error);
}

TEST_CASE("safetensors writing refuses bad tensors and leaves nothing behind") {
  TempDir dir;
  fs::path p = dir / "out.safetensors";
  const std::string where = p.string() + ": ";
  std::vector<float> four = {1, 2, 3, 4};
  auto write_error = [&](std::vector<TensorToWrite> tensors) {
    return error_of([&] { write_safetensors(p, tensors); });
  };
  CHECK(write_error({tensor("x", "F31", {4}, bytes_of(four))}).rfind(where + R"(cannot write tensor "x": unknown dtype "F31")", 0) == 0);
  CHECK(write_error({tensor("x", "F32", {3}, bytes_of(four))}) ==
        where + R"(cannot write tensor "x": it has 16 bytes, but shape [3] of F32 needs 12)");
  CHECK(write_error({tensor("x", "F32", {-4}, bytes_of(four))}) ==
        where + R"(cannot write tensor "x": negative dimension in shape [-4])");
  CHECK(write_error({tensor("x", "F32", {4}, bytes_of(four)), tensor("x", "F32", {4}, bytes_of(four))}) ==
        where + R"(cannot write tensor "x": the name is given twice)");
  CHECK(write_error({tensor("__metadata__", "F32", {4}, bytes_of(four))}) ==
        where + R"(cannot write tensor "__metadata__": the name is reserved for metadata)");
  fs::path nowhere = dir / "no/such/dir/out.safetensors";
  CHECK(error_of([&] { write_safetensors(nowhere, {}); })
            .rfind(nowhere.string() + ": cannot be written (creating out.safetensors.tmp-", 0) == 0);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("safetensors tensors made by the writer give the same file; a wrong or failing maker leaves nothing") {
  TempDir dir;
  const std::vector<float> four = {1, 2, 3, 4};
  const std::vector<std::int32_t> ids = {7, -8};
  write_safetensors(dir / "spans.safetensors", {tensor("a", "F32", {2, 2}, bytes_of(four)), tensor("b", "I32", {2}, bytes_of(ids))});
  // Whole, and in pieces of `piece` bytes.
  auto maker = [](std::span<const std::byte> bytes, std::size_t piece) {
    return [bytes, piece](const ByteSink& put) {
      for (std::size_t at = 0; at < bytes.size(); at += piece) put(bytes.subspan(at, std::min(piece, bytes.size() - at)));
    };
  };
  std::vector<TensorToWrite> made = {tensor("a", "F32", {2, 2}, {}), tensor("b", "I32", {2}, {})};
  for (std::size_t piece : {std::size_t(64), std::size_t(3)}) {
    made[0].produce = maker(bytes_of(four), piece);
    made[1].produce = maker(bytes_of(ids), piece);
    std::vector<std::uint64_t> wrote;
    write_safetensors(dir / "made.safetensors", made, {}, [&](std::uint64_t n) { wrote.push_back(n); });
    CHECK(read_bytes(dir / "made.safetensors") == read_bytes(dir / "spans.safetensors"));
    CHECK(wrote == std::vector<std::uint64_t>{16, 8});
  }
  CHECK(collect_bytes(made[0].produce) == std::vector<std::byte>(bytes_of(four).begin(), bytes_of(four).end()));

  const fs::path p = dir / "bad.safetensors";
  made[1].produce = whole_bytes([] { return std::vector<std::byte>(4); });
  CHECK(error_of([&] { write_safetensors(p, made); }) ==
        p.string() + R"(: cannot write tensor "b": it has 4 bytes, but shape [2] of I32 needs 8)");
  made[1].produce = maker(bytes_of(four), 3);  // past its size: the rest is not written, and the total is told
  CHECK(error_of([&] { write_safetensors(p, made); }) ==
        p.string() + R"(: cannot write tensor "b": it has 16 bytes, but shape [2] of I32 needs 8)");
  made[1].produce = [](const ByteSink&) { throw ft::Error("the maker failed"); };
  CHECK(error_of([&] { write_safetensors(p, made); }) == "the maker failed");
  CHECK(!fs::exists(p));
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 2);  // no temporaries
}

TEST_CASE("safetensors released pages read back the same; memory outside the mapping is left alone") {
  TempDir dir;
  std::vector<float> values(300000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.5f;
  write_safetensors(dir / "big.safetensors", {tensor("v", "F32", {std::int64_t(values.size())}, bytes_of(values))});
  const SafetensorsFile file = SafetensorsFile::open(dir / "big.safetensors");
  const TensorView& v = file.at("v");
  std::vector<float> before(values.size()), after(values.size());
  copy_elements(file, v, before.data(), v.numel());
  file.release(v);
  copy_elements(file, v, after.data(), v.numel());
  CHECK(before == values);
  CHECK(after == values);
  // Bytes that are not in the mapping (a torch checkpoint's gathered storage lives on the heap) are never
  // dropped: on anonymous memory that would zero them.
  const auto mapping = map_file_readonly(dir / "big.safetensors", "a file", 1, "a file");
  std::vector<float> heap = values;
  mapping->release(std::as_bytes(std::span(heap)));
  CHECK(heap == values);
  mapping->release(mapping->bytes());
  CHECK(std::memcmp(mapping->bytes().data() + mapping->bytes().size() - 4, &values.back(), 4) == 0);
}

TEST_CASE("safetensors ModelWeights resolves names across shards") {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<bf16> b = {bf16(0.5f), bf16(-1.0f)};
  std::vector<float> c = {7};
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {tensor("layer.a", "F32", {2, 3}, bytes_of(a)), tensor("layer.b", "BF16", {2}, bytes_of(b))});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {tensor("head.c", "F32", {1}, bytes_of(c))});
  nlohmann::json index = {{"metadata", {{"total_size", 36}}},
                          {"weight_map",
                           {{"layer.a", "model-00001-of-00002.safetensors"},
                            {"layer.b", "model-00001-of-00002.safetensors"},
                            {"head.c", "model-00002-of-00002.safetensors"}}}};
  fs::path index_path = dir / "model.safetensors.index.json";
  auto write_index = [&] { std::ofstream(index_path) << index.dump(2); };
  write_index();

  ModelWeights w = ModelWeights::open(dir.path);
  CHECK(w.source() == index_path);
  CHECK(w.files().size() == 2);
  CHECK(w.names() == std::vector<std::string>{"head.c", "layer.a", "layer.b"});
  CHECK(w.at("layer.a").shape == std::vector<std::int64_t>{2, 3});
  CHECK(w.find("head.c")->dtype == "F32");
  CHECK(w.find("absent") == nullptr);
  CHECK(error_of([&] { w.at("absent"); }) == index_path.string() + ": no tensor \"absent\"");
  CHECK(w.file_of("head.c").path() == dir / "model-00002-of-00002.safetensors");
  std::vector<float> out(2);
  copy_elements(w, "layer.b", out.data(), 2);
  CHECK(out == std::vector<float>{0.5f, -1.0f});
  ModelWeights copy = w;  // a copy resolves into its own files
  CHECK(copy.find("layer.a") != w.find("layer.a"));
  CHECK(copy.find("layer.a")->bytes.data() == w.find("layer.a")->bytes.data());
  CHECK(error_of([&] { copy_elements(w, "layer.b", out.data(), 3); }) ==
        (dir / "model-00001-of-00002.safetensors").string() +
            ": tensor \"layer.b\" has 2 elements (shape [2]), but 3 were asked for");

  SUBCASE("a name the index lists but its shard lacks") {
    index["weight_map"]["ghost"] = "model-00002-of-00002.safetensors";
    write_index();
    CHECK(error_of([&] { ModelWeights::open(dir.path); }) ==
          (dir / "model-00002-of-00002.safetensors").string() +
              ": no tensor \"ghost\", which model.safetensors.index.json says this shard holds");
  }
  SUBCASE("a missing shard") {
    index["weight_map"]["head.c"] = "model-00003-of-00002.safetensors";
    write_index();
    CHECK(error_of([&] { ModelWeights::open(dir.path); }) ==
          index_path.string() + ": shard \"model-00003-of-00002.safetensors\" (holding \"head.c\") does not exist");
  }
  SUBCASE("a shard outside the directory") {
    index["weight_map"]["head.c"] = "../elsewhere.safetensors";
    write_index();
    CHECK(error_of([&] { ModelWeights::open(dir.path); }) ==
          index_path.string() +
              ": shard \"../elsewhere.safetensors\" for \"head.c\" must be a file name in the same directory");
  }
  SUBCASE("an index that is not JSON or has no weight_map") {
    std::ofstream(index_path) << "{ nope";
    CHECK(error_of([&] { ModelWeights::open(dir.path); }).rfind(index_path.string() + ": not valid JSON (byte", 0) == 0);
    std::ofstream(index_path) << R"({"weight_map": []})";
    CHECK(error_of([&] { ModelWeights::open(dir.path); }) ==
          index_path.string() + ": has no \"weight_map\" object mapping tensor names to shard files");
  }
  SUBCASE("neither file, or not a directory") {
    fs::remove(index_path);
    CHECK(error_of([&] { ModelWeights::open(dir.path); }) ==
          dir.path.string() + ": has no weights (model.safetensors, model.safetensors.index.json, "
                                 "pytorch_model.bin or pytorch_model.bin.index.json)");
    fs::path file = dir / "model-00002-of-00002.safetensors";
    CHECK(error_of([&] { ModelWeights::open(file); }) ==
          file.string() + ": is not a directory (expected a model directory holding model.safetensors)");
  }
}

}  // namespace test_safetensors
