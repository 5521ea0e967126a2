// ftrun convert from the outside: dtype changes and re-sharding keep every
// value the target dtype can hold, LoRA merges equal PEFT's, and a failed
// conversion leaves nothing behind.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <ft/io/model_weights.hpp>

#include "support/files.hpp"

namespace test_convert {

namespace fs = std::filesystem;

namespace {

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_convert");
const fs::path& scratch = scratch_dir.path;
const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures";

struct Run {
  int code;
  std::string err;
};

Run ftrun(const std::string& args) {
  fs::create_directories(scratch);
  std::string cmd = FTRUN_PATH " " + args + " >/dev/null 2>" + (scratch / "err").string();
  int status = std::system(cmd.c_str());
  std::ifstream in(scratch / "err");
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, {std::istreambuf_iterator<char>(in), {}}};
}

// Every tensor of two model directories, compared as float values (or bytes).
void expect_same_weights(const fs::path& a, const fs::path& b, bool bitwise, double tolerance = 0) {
  auto wa = ft::io::ModelWeights::open(a), wb = ft::io::ModelWeights::open(b);
  REQUIRE(wa.names() == wb.names());
  for (const std::string& name : wa.names()) {
    CAPTURE(name);
    const auto &ta = wa.at(name), &tb = wb.at(name);
    REQUIRE(ta.shape == tb.shape);
    if (bitwise) {
      CHECK(ta.dtype == tb.dtype);
      CHECK(std::equal(ta.bytes.begin(), ta.bytes.end(), tb.bytes.begin(), tb.bytes.end()));
      continue;
    }
    std::vector<float> va(std::size_t(ta.numel())), vb(va.size());
    ft::io::copy_elements(wa.file_of(name), ta, va.data(), ta.numel());
    ft::io::copy_elements(wb.file_of(name), tb, vb.data(), tb.numel());
    double worst = 0;
    for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, double(std::abs(va[i] - vb[i])));
    CHECK(worst <= tolerance);
  }
}

}  // namespace

TEST_CASE("ftrun convert: re-sharding and dtype round trips are bit-exact where the dtype allows") {
  const std::string model = fixtures + "/parity/llama_gqa";
  fs::remove_all(scratch);
  REQUIRE(ftrun("convert " + model + " " + (scratch / "sharded").string() + " --max-shard-size 100KB").code == 0);
  CHECK(fs::exists(scratch / "sharded/model.safetensors.index.json"));
  CHECK(fs::exists(scratch / "sharded/model-00001-of-00004.safetensors"));  // 360 KB in 100 KB shards
  CHECK(fs::exists(scratch / "sharded/config.json"));
  expect_same_weights(model, scratch / "sharded", true);

  REQUIRE(ftrun("convert " + (scratch / "sharded").string() + " " + (scratch / "bf16").string() + " --dtype bfloat16").code == 0);
  CHECK(!fs::exists(scratch / "bf16/model.safetensors.index.json"));  // fits in one 5GB shard again
  REQUIRE(ftrun("convert " + (scratch / "bf16").string() + " " + (scratch / "f32").string() + " --dtype float32").code == 0);
  REQUIRE(ftrun("convert " + (scratch / "f32").string() + " " + (scratch / "bf16-again").string() + " --dtype bfloat16").code == 0);
  expect_same_weights(scratch / "bf16", scratch / "bf16-again", true);  // bf16 -> f32 -> bf16 loses nothing
  expect_same_weights(model, scratch / "bf16", false, 0.01);            // f32 -> bf16 rounds to 8 bits
  std::ifstream config(scratch / "bf16/config.json");
  CHECK(std::string(std::istreambuf_iterator<char>(config), {}).find("\"bfloat16\"") != std::string::npos);
}

TEST_CASE("ftrun convert --merge-lora equals PEFT's merge_and_unload, for LoRA and rsLoRA with embeddings") {
  const std::string model = fixtures + "/parity/llama_gqa";
  for (std::string adapter : {"llama_gqa_lora", "llama_gqa_rslora"}) {
    CAPTURE(adapter);
    fs::remove_all(scratch);
    fs::path out = scratch / "merged";
    REQUIRE(ftrun("convert " + model + " " + out.string() + " --merge-lora " + fixtures + "/peft/" + adapter).code == 0);
    fs::path expected = scratch / "expected";
    fs::create_directories(expected);
    fs::copy_file(fixtures + "/peft/" + adapter + ".merged.safetensors", expected / "model.safetensors");
    expect_same_weights(expected, out, false, 1e-6);
  }
}

TEST_CASE("ftrun convert refuses bad input in one line and leaves no destination behind") {
  const std::string model = fixtures + "/parity/llama_gqa";
  fs::remove_all(scratch);
  fs::create_directories(scratch / "exists");
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{model + " " + (scratch / "exists").string(), "already exists"},
                        Case{fixtures + "/data " + (scratch / "out").string(), "not an HF model directory"},
                        Case{model + " " + (scratch / "out").string() + " --max-shard-size lots", "is not a size"},
                        Case{model + " " + (scratch / "out").string() + " --merge-lora " + fixtures + "/parity/qwen2_bias",
                             "not a PEFT adapter directory"},
                        Case{fixtures + "/parity/qwen2_bias " + (scratch / "out").string() + " --merge-lora " + fixtures +
                                 "/peft/llama_gqa_rslora",
                             "has another shape than the base model's"}}) {
    CAPTURE(c.args);
    Run r = ftrun("convert " + c.args);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(scratch / "out"));
  }
  // Nothing temporary is left beside the destination either.
  for (const auto& entry : fs::directory_iterator(scratch))
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("ftrun convert reads a GGUF file into an HF directory that ft then evaluates") {
  fs::remove_all(scratch);
  const fs::path out = scratch / "from-gguf";
  REQUIRE(ftrun("convert " + fixtures + "/gguf/tiny_llama.gguf " + out.string()).code == 0);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                           "generation_config.json"})
    CHECK(fs::exists(out / file));
  std::ofstream(scratch / "rows.jsonl") << "{\"input_ids\": [1, 17, 42, 300, 7]}\n";
  CHECK(ftrun("eval --model " + out.string() + " --data " + (scratch / "rows.jsonl").string()).code == 0);
  // Another architecture's GGUF, or options that only make sense for HF directories, are refused.
  Run r = ftrun("convert " + fixtures + "/gguf/tiny_llama.gguf " + (scratch / "x").string() + " --merge-lora " +
                fixtures + "/peft/llama_gqa_lora");
  CHECK(r.code == 2);
  CHECK(r.err.find("convert the GGUF first") != std::string::npos);
}

TEST_CASE("ftrun convert --add-tokens grows tokenizer and embeddings; --chat-template replaces the template") {
  fs::remove_all(scratch);
  const fs::path base = scratch / "base", out = scratch / "chat";
  REQUIRE(ftrun("convert " + fixtures + "/gguf/tiny_llama.gguf " + base.string()).code == 0);
  std::ofstream(scratch / "tokens.toml") << "special = [\"<|im_start|>\", \"<|user|>\"]\n"  // the first exists already
                                            "regular = [\"<think>\"]\n"
                                            "pad_token = \"<|pad|>\"\n";
  std::ofstream(scratch / "chatml.jinja")
      << "{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}";
  REQUIRE(ftrun("convert " + base.string() + " " + out.string() + " --add-tokens " + (scratch / "tokens.toml").string() +
                " --chat-template " + (scratch / "chatml.jinja").string())
              .code == 0);
  auto read = [](const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); };
  auto config = read(out / "config.json"), tokenizer = read(out / "tokenizer.json");
  auto tokenizer_config = read(out / "tokenizer_config.json");
  CHECK(config["vocab_size"] == 404);  // 401 + <|user|>, <think>, <|pad|>
  CHECK(config["pad_token_id"] == 403);
  CHECK(tokenizer_config["pad_token"] == "<|pad|>");
  CHECK(tokenizer_config["chat_template"].get<std::string>().find("<|user|>") != std::string::npos);
  CHECK(tokenizer["added_tokens"].size() == 7);

  auto weights = ft::io::ModelWeights::open(out), before = ft::io::ModelWeights::open(base);
  const auto& grown = weights.at("model.embed_tokens.weight");
  CHECK(grown.shape == std::vector<std::int64_t>{404, 64});
  std::vector<float> rows(std::size_t(grown.numel())), old(std::size_t(401 * 64));
  ft::io::copy_elements(weights.file_of("model.embed_tokens.weight"), grown, rows.data(), grown.numel());
  ft::io::copy_elements(before.file_of("model.embed_tokens.weight"), before.at("model.embed_tokens.weight"), old.data(),
                        401 * 64);
  CHECK(std::equal(old.begin(), old.end(), rows.begin()));  // existing rows untouched
  double mean = 0;
  for (int r = 0; r < 401; ++r) mean += old[std::size_t(r * 64)];
  CHECK(rows[std::size_t(403 * 64)] == doctest::Approx(mean / 401).epsilon(1e-5));  // new rows: the mean row

  std::ofstream(scratch / "bad.jinja") << "{% for m in messages %}{{ m.content }";
  Run bad = ftrun("convert " + base.string() + " " + (scratch / "y").string() + " --chat-template " +
                  (scratch / "bad.jinja").string());
  CHECK(bad.code == 2);
  CHECK(bad.err.find("bad.jinja:1:") != std::string::npos);
  CHECK(!fs::exists(scratch / "y"));
}

}  // namespace test_convert
