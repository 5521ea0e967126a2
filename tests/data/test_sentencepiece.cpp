// SentencePiece's tokenizer.model: for every kind of fixture (a BPE model
// trained by sentencepiece with a tokenizer_config.json in one of the forms
// repositories carry, loaded by transformers 5 in
// tools/make_sentencepiece_fixtures.py), ft builds the pipeline transformers
// builds, field by field, and gives its ids and decoded text for every corpus
// line, the whole corpus and seeded random strings. A model directory with
// only tokenizer.model reads it; one with tokenizer.json too reads that. A
// model ft cannot read (Unigram, another tokenizer class, a broken file) is a
// one-line error naming the file.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/data/examples.hpp>
#include <ft/text/model_text.hpp>
#include <ft/text/sentencepiece.hpp>
#include <ft/text/tokenizer.hpp>

#include "support/files.hpp"

namespace test_sentencepiece {

namespace fs = std::filesystem;
using ft::testing::error_of;
using ft::text::Tokenizer;
using nlohmann::json;

namespace {

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures/tokenizers";
const char* const kinds[] = {"spm_llama", "spm_legacy", "spm_no_prefix", "spm_gemma"};

using ft::testing::read_bytes;

json read_json(const fs::path& file) { return json::parse(read_bytes(file)); }

std::vector<std::int32_t> ids_of(const json& j) { return j.get<std::vector<std::int32_t>>(); }

// Whether ft gives HF's ids and decoded text for one expected case.
bool matches_hf(const Tokenizer& tok, const json& c) {
  const std::string text = c["text"];
  const auto ids = tok.encode(text, true);
  const bool same = ids == ids_of(c["ids"]) && tok.encode(text, false) == ids_of(c["ids_no_special"]) &&
                    tok.decode(ids_of(c["ids"]), false) == c["decoded"].get<std::string>() &&
                    tok.decode(ids_of(c["ids"]), true) == c["decoded_skip_special"].get<std::string>();
  if (!same) FAIL_CHECK("differs from HF for " << json(text).dump());
  return same;
}

void check_one_line(const std::string& message, std::initializer_list<const char*> parts) {
  CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
  for (const std::string p : parts)
    CHECK_MESSAGE(message.find(p) != std::string::npos, "\"" << p << "\" not in: " << message);
}

// A model directory holding `files` from a kind's fixture.
void copy_kind(const std::string& kind, const fs::path& dir, std::initializer_list<const char*> files) {
  for (const char* f : files) fs::copy_file(fixtures / kind / f, dir / f);
}

}  // namespace

TEST_CASE("sentencepiece: tokenizer.model builds transformers' pipeline, field by field") {
  for (const std::string kind : kinds) {
    CAPTURE(kind);
    const json built = ft::text::tokenizer_json_from_sentencepiece(fixtures / kind / "tokenizer.model",
                                                                   read_json(fixtures / kind / "tokenizer_config.json"));
    const json hf = read_json(fixtures / kind / "expected.json")["hf_tokenizer_json"];
    for (const auto& [key, value] : hf.items()) {
      CAPTURE(key);
      REQUIRE(built.contains(key));
      if (key != "model") CHECK(built[key] == value);
    }
    CHECK(built.size() == hf.size());
    for (const auto& [key, value] : hf["model"].items()) {
      CAPTURE(key);
      CHECK(built["model"][key] == value);
    }
    CHECK(built["model"].size() == hf["model"].size());
  }
}

TEST_CASE("sentencepiece: a directory with only tokenizer.model gives transformers' ids and text") {
  for (const std::string kind : kinds) {
    CAPTURE(kind);
    const ft::testing::TempDir dir("ft_sentencepiece");
    copy_kind(kind, dir.path, {"tokenizer.model", "tokenizer_config.json"});
    CHECK(ft::text::ModelText::tokenizer_file(dir.path) == dir / "tokenizer.model");
    const ft::text::ModelText text = ft::text::ModelText::load(dir.path);
    REQUIRE(text.tokenizer);
    const Tokenizer& tok = *text.tokenizer;
    const json expected = read_json(fixtures / kind / "expected.json");
    CHECK(tok.vocab_size() == expected["vocab_size"].get<std::int32_t>());
    CHECK(text.eos_id == expected["eos_id"].get<std::int32_t>());
    int failures = 0;
    for (const json& c : expected["lines"]) failures += !matches_hf(tok, c);
    failures += !matches_hf(tok, expected["whole"]);
    for (const json& c : expected["random"]) failures += !matches_hf(tok, c);
    CHECK(failures == 0);
  }
}

TEST_CASE("sentencepiece: a tokenizer.model-only directory with a chat template gives apply_chat_template's ids") {
  int checked = 0;
  for (const std::string kind : kinds) {
    const json expected = read_json(fixtures / kind / "expected.json");
    if (!expected.contains("chat")) continue;
    CAPTURE(kind);
    const ft::testing::TempDir dir("ft_sentencepiece_chat");
    copy_kind(kind, dir.path, {"tokenizer.model", "tokenizer_config.json"});
    const ft::text::ModelText text = ft::text::ModelText::load(dir.path);
    REQUIRE(text.tokenizer);
    REQUIRE(text.chat);
    ft::data::ExampleOptions options;
    options.format = "chat";
    options.max_seq_length = 4096;
    const ft::data::ExampleBuilder builder(text.tokenizer.get(), text.chat.get(), text.special, options);
    for (const json& c : expected["chat"]) {
      const ft::data::Example e = builder.build(json{{"messages", c["messages"]}});
      CHECK(e.input_ids == ids_of(c["input_ids"]));
      // Each assistant turn is scored, the rest is not.
      const auto scored = std::count_if(e.labels.begin(), e.labels.end(), [](std::int32_t l) { return l != -100; });
      CHECK(scored > 0);
      CHECK(scored < std::ptrdiff_t(e.labels.size()));
      ++checked;
    }
  }
  CHECK(checked == 4);  // two conversations over each of two kinds
}

TEST_CASE("sentencepiece: tokenizer.json is read before tokenizer.model") {
  const ft::testing::TempDir dir("ft_sentencepiece");
  copy_kind("spm_llama", dir.path, {"tokenizer.model", "tokenizer_config.json"});
  fs::copy_file(fixtures / "llama2" / "tokenizer.json", dir / "tokenizer.json");
  CHECK(ft::text::ModelText::tokenizer_file(dir.path) == dir / "tokenizer.json");
  const ft::text::ModelText text = ft::text::ModelText::load(dir.path);
  REQUIRE(text.tokenizer);
  CHECK(text.tokenizer->vocab_size() == Tokenizer::from_file(fixtures / "llama2" / "tokenizer.json").vocab_size());
  const ft::testing::TempDir empty("ft_sentencepiece");
  CHECK(ft::text::ModelText::tokenizer_file(empty.path).empty());
  check_one_line(error_of([&] { ft::text::ModelText::load(empty.path).need_tokenizer("data.format = \"text\""); }),
                 {"has no tokenizer.json or tokenizer.model", "data.format = \"text\""});
}

TEST_CASE("sentencepiece: models ft cannot read are one-line errors naming the file") {
  const ft::testing::TempDir dir("ft_sentencepiece");
  const fs::path model = dir / "tokenizer.model";
  const json llama = read_json(fixtures / "spm_llama" / "tokenizer_config.json");
  auto error_reading = [&](const json& config) {
    return error_of([&] { ft::text::tokenizer_json_from_sentencepiece(model, config); });
  };
  check_one_line(error_reading(llama), {model.string().c_str(), "cannot be opened"});

  // A Unigram model (T5's kind): one piece "a", trainer_spec.model_type = 1.
  ft::testing::write_bytes(model, std::string("\x0a\x03\x0a\x01" "a" "\x12\x02\x18\x01", 9));
  check_one_line(error_reading(llama), {model.string().c_str(), "Unigram", "reads BPE ones"});

  const std::string whole = read_bytes(fixtures / "spm_llama" / "tokenizer.model");
  ft::testing::write_bytes(model, whole.substr(0, whole.size() / 2));
  check_one_line(error_reading(llama), {model.string().c_str(), "not a SentencePiece model", "ends inside"});
  ft::testing::write_bytes(model, "{\"version\": \"1.0\"}");
  check_one_line(error_reading(llama), {model.string().c_str(), "not a SentencePiece model"});
  ft::testing::write_bytes(model, "");
  check_one_line(error_reading(llama), {model.string().c_str(), "holds no pieces"});

  ft::testing::write_bytes(model, whole);
  CHECK(error_reading(llama) == "<no error>");
  json t5 = llama;
  t5["tokenizer_class"] = "T5Tokenizer";
  check_one_line(error_reading(t5), {model.string().c_str(), "\"T5Tokenizer\"", "LlamaTokenizer", "GemmaTokenizer"});
  json bad_token = llama;
  bad_token["bos_token"] = 7;
  check_one_line(error_reading(bad_token), {"tokenizer_config.json", "\"bos_token\"", "AddedToken"});
  json bad_flag = llama;
  bad_flag["add_bos_token"] = "yes";
  check_one_line(error_reading(bad_flag), {"tokenizer_config.json", "\"add_bos_token\"", "true or false"});
  for (const char* key : {"x1", "1x", "-3", ""}) {
    json bad_id = llama;
    bad_id["added_tokens_decoder"] = {{key, {{"content", "<extra>"}, {"special", true}}}};
    check_one_line(error_reading(bad_id), {"tokenizer_config.json", "added_tokens_decoder", "not a token id"});
  }
}

}  // namespace test_sentencepiece
