// Pre-tokenised rows (data.format = "tokens") through ftrun: a model
// directory without tokenizer.json trains on them, and their ids are checked
// against the embedding's rows (config.json's vocab_size), not the
// tokenizer's size, since embeddings padded past the tokenizer are common.
// A model with SentencePiece's tokenizer.model alone reads text through it.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/command.hpp"
#include "support/files.hpp"

namespace test_token_rows {

namespace fs = std::filesystem;

namespace {

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_token_rows");
const fs::path& scratch = scratch_dir.path;
const fs::path tiny = FT_SOURCE_DIR "/models/ft-tiny-llama";

ft::testing::CommandResult ftrun(const std::string& args, const std::string& name) {
  return ft::testing::run_command(FTRUN_PATH " " + args, scratch, name);
}

// The tiny Llama's configuration with `vocab_size` embedding rows, randomly
// initialised by ftrun init; its tokenizer (512 tokens) beside it or not.
fs::path model(const std::string& name, std::int64_t vocab_size, bool with_tokenizer) {
  const fs::path source = scratch / (name + "-config"), dir = scratch / name;
  fs::create_directories(source);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tiny / "config.json"));
  config["vocab_size"] = vocab_size;
  std::ofstream(source / "config.json") << config.dump(2);
  if (with_tokenizer)
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tiny / file, source / file);
  const auto init = ftrun("init " + source.string() + " " + dir.string() + " --force", name + "-init");
  REQUIRE_MESSAGE(init.code == 0, init.err);
  return dir;
}

// Rows of token ids, the last row's first id `last_id`.
fs::path rows(const std::string& name, std::int64_t last_id) {
  fs::create_directories(scratch);
  const fs::path file = scratch / (name + ".jsonl");
  std::ofstream out(file);
  for (int r = 0; r < 7; ++r) out << nlohmann::json{{"input_ids", {(r * 37) % 500, 5, 9, 14, 3, 7, 11, 2}}}.dump() << "\n";
  out << nlohmann::json{{"input_ids", {last_id, 1, 2, 3}}}.dump() << "\n";
  return file;
}

std::string train(const fs::path& model_dir, const fs::path& data, const std::string& name, const std::string& more = "") {
  return "train " FT_SOURCE_DIR "/recipes/ft_tiny_llama/lora.toml --set model.path=" + model_dir.string() +
         " --set data.train=" + data.string() + " --set data.validation= --set data.format=tokens" +
         " --set data.packing=false --set data.max_seq_length=16 --set train.max_steps=2 --set train.eval_steps=0" +
         " --set train.per_device_train_batch_size=2 --set checkpoint.save_strategy=no --set output_dir=" +
         (scratch / name).string() + more;
}

}  // namespace

TEST_CASE("a model without tokenizer.json trains on rows of token ids, and refuses text plainly") {
  const fs::path dir = model("bare", 512, false);
  REQUIRE_FALSE(fs::exists(dir / "tokenizer.json"));
  const auto r = ftrun(train(dir, rows("bare_rows", 100), "bare"), "bare");
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("summary  step 2") != std::string::npos);

  const auto text = ftrun(train(dir, rows("bare_rows", 100), "bare_text", " --set data.format=alpaca"), "bare_text");
  CHECK(text.code == 2);
  CHECK(text.err.find("format 'alpaca' reads text, and the model has no tokenizer.json or tokenizer.model") !=
        std::string::npos);
  CHECK(std::count(text.err.begin(), text.err.end(), '\n') == 1);

  const auto preview =
      ftrun(train(dir, rows("bare_rows", 100), "bare_preview", " --set preview.prompt=hello"), "bare_preview");
  CHECK(preview.code == 2);
  CHECK(preview.err.find("has no tokenizer.json or tokenizer.model, and preview.prompt reads text") !=
        std::string::npos);
}

TEST_CASE("token ids are checked against the embedding's rows, which may exceed the tokenizer's size") {
  const fs::path padded = model("padded", 528, true);  // 512 tokens, 528 rows: padded to a multiple of 16
  const auto inside = ftrun(train(padded, rows("padded_rows", 520), "padded"), "padded");
  CHECK_MESSAGE(inside.code == 0, inside.err);
  const auto outside = ftrun(train(padded, rows("outside_rows", 528), "outside"), "outside");
  CHECK(outside.code == 2);
  CHECK(outside.err.find("outside_rows.jsonl:8: \"input_ids\"[0] = 528 is outside the vocabulary [0, 528)") !=
        std::string::npos);
}

TEST_CASE("a model with only SentencePiece's tokenizer.model trains on text; convert --add-tokens writes tokenizer.json") {
  // The tiny Llama's shape over the 1000 pieces of a SentencePiece fixture (OpenLLaMA's form).
  const fs::path spm = FT_SOURCE_DIR "/tests/fixtures/tokenizers/spm_llama";
  const fs::path source = scratch / "spm-config", dir = scratch / "spm";
  fs::create_directories(source);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tiny / "config.json"));
  config["vocab_size"] = 1000;
  config["bos_token_id"] = 1;
  config["eos_token_id"] = 2;
  std::ofstream(source / "config.json") << config.dump(2);
  for (const char* file : {"tokenizer.model", "tokenizer_config.json"}) fs::copy_file(spm / file, source / file);
  const auto init = ftrun("init " + source.string() + " " + dir.string() + " --force", "spm-init");
  REQUIRE_MESSAGE(init.code == 0, init.err);
  REQUIRE_FALSE(fs::exists(dir / "tokenizer.json"));

  const fs::path data = scratch / "spm.jsonl";
  std::ofstream rows(data);
  for (int r = 0; r < 8; ++r)
    rows << nlohmann::json{{"instruction", "Define hack number " + std::to_string(r) + "."},
                           {"output", "A quick job that produces what is needed, but not well."}}
                .dump()
         << "\n";
  rows.close();
  const auto run = ftrun(train(dir, data, "spm_text", " --set data.format=alpaca --set data.max_seq_length=128"),
                         "spm_text");
  CHECK_MESSAGE(run.code == 0, run.err);
  CHECK(run.out.find("summary  step 2") != std::string::npos);

  std::ofstream(scratch / "spm_tokens.toml") << "special = [\"<think>\"]\n";
  const fs::path grown = scratch / "spm-grown";
  const auto convert = ftrun("convert " + dir.string() + " " + grown.string() + " --add-tokens " +
                                 (scratch / "spm_tokens.toml").string(),
                             "spm-convert");
  REQUIRE_MESSAGE(convert.code == 0, convert.err);
  const auto tokenizer = nlohmann::json::parse(std::ifstream(grown / "tokenizer.json"));
  CHECK(tokenizer["added_tokens"].back()["content"] == "<think>");
  CHECK(tokenizer["added_tokens"].back()["id"] == 1000);
  CHECK(nlohmann::json::parse(std::ifstream(grown / "config.json"))["vocab_size"] == 1001);
}

}  // namespace test_token_rows
