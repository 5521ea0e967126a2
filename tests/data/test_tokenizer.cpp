// Tokenizers from tokenizer.json: for every kind of fixture (one per model
// family's pipeline, built and encoded by HF `tokenizers` in
// tools/make_tokenizer_fixtures.py), ft gives HF's ids for every corpus line,
// the whole corpus and seeded random strings, with and without special tokens,
// and HF's decoded text with and without skipping special tokens; added tokens
// get HF's ids; and every malformed or unsupported file is one-line ft::Error
// naming the file and the component.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/text/tokenizer.hpp>

#include "support/files.hpp"

namespace test_tokenizer {

namespace fs = std::filesystem;
using ft::testing::error_of;
using ft::text::AddedToken;
using ft::text::Tokenizer;
using nlohmann::json;

namespace {

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures/tokenizers";
const char* const kinds[] = {"gpt2", "gpt_neox", "llama3", "qwen2", "smollm2", "llama2", "mistral", "sp_metaspace",
                             "misc"};
const char* const byte_level_kinds[] = {"gpt2", "gpt_neox", "llama3", "qwen2", "smollm2"};

json read_json(const fs::path& file) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(in, "cannot open " << file);
  return json::parse(in);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::int32_t> ids_of(const json& j) { return j.get<std::vector<std::int32_t>>(); }

// Checks one expected case; returns whether everything matched.
bool matches_hf(const Tokenizer& tok, const json& c, const std::string& where) {
  const std::string text = c["text"];
  const auto ids = tok.encode(text, true);
  bool ok = true;
  auto expect = [&](bool same, const char* what) {
    if (!same) {
      ok = false;
      FAIL_CHECK(where << ": " << what << " differs from HF for " << json(text).dump());
    }
  };
  expect(ids == ids_of(c["ids"]), "ids");
  expect(tok.encode(text, false) == ids_of(c["ids_no_special"]), "ids without special tokens");
  expect(tok.decode(ids_of(c["ids"]), false) == c["decoded"].get<std::string>(), "decode");
  expect(tok.decode(ids_of(c["ids"]), true) == c["decoded_skip_special"].get<std::string>(),
         "decode skipping special tokens");
  return ok;
}

void check_one_line(const std::string& message, std::initializer_list<const char*> parts) {
  CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
  for (const std::string p : parts)
    CHECK_MESSAGE(message.find(p) != std::string::npos, "\"" << p << "\" not in: " << message);
}

// A small valid tokenizer.json to break in one place at a time.
json tiny() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4}, "merges": [["a", "b"], ["Ġ", "ab"]]}})");
}

std::string error_loading(const json& j) {
  return error_of([&] { Tokenizer::from_json(j, "tiny/tokenizer.json"); });
}

// Sets `pointer` in the tiny tokenizer to `value` and checks the one-line error.
void check_refused(const std::string& pointer, const json& value, std::initializer_list<const char*> parts) {
  CAPTURE(pointer);
  json j = tiny();
  j[json::json_pointer(pointer)] = value;
  const std::string message = error_loading(j);
  check_one_line(message, parts);
  check_one_line(message, {"tiny/tokenizer.json: "});
}

}  // namespace

TEST_CASE("tokenizer: every kind gives HF's ids and decoded text on the corpus and random strings") {
  const std::string corpus = read_text(fixtures / "corpus.txt");
  for (const std::string kind : kinds) {
    CAPTURE(kind);
    const Tokenizer tok = Tokenizer::from_file(fixtures / kind / "tokenizer.json");
    const json expected = read_json(fixtures / kind / "expected.json");
    CHECK(tok.vocab_size() == expected["vocab_size"].get<std::int32_t>());
    int failures = 0;
    std::string lines;
    for (const json& c : expected["lines"]) {
      failures += !matches_hf(tok, c, kind + " line");
      lines += c["text"].get<std::string>() + "\n";
    }
    CHECK(lines == corpus);  // the fixture was made from this corpus
    CHECK(expected["whole"]["text"].get<std::string>() == corpus);
    failures += !matches_hf(tok, expected["whole"], kind + " whole corpus");
    for (const json& c : expected["random"]) failures += !matches_hf(tok, c, kind + " random string");
    CHECK(failures == 0);
  }
}

TEST_CASE("tokenizer: added tokens have HF's ids, strings and special flags") {
  for (const std::string kind : kinds) {
    CAPTURE(kind);
    const Tokenizer tok = Tokenizer::from_file(fixtures / kind / "tokenizer.json");
    const json expected = read_json(fixtures / kind / "expected.json");
    const auto added = tok.added_tokens();
    REQUIRE(added.size() == expected["added_tokens"].size());
    for (std::size_t i = 0; i < added.size(); ++i) {
      const json& e = expected["added_tokens"][i];
      CHECK(added[i].first == e["id"].get<std::int32_t>());
      CHECK(added[i].second.content == e["content"].get<std::string>());
      CHECK(added[i].second.special == e["special"].get<bool>());
      CHECK(tok.is_special(added[i].first) == e["special"].get<bool>());
      CHECK(tok.token_to_id(added[i].second.content) == added[i].first);
    }
  }
}

TEST_CASE("tokenizer: add_tokens assigns HF's ids and encodes with them") {
  for (const std::string kind : kinds) {
    CAPTURE(kind);
    Tokenizer tok = Tokenizer::from_file(fixtures / kind / "tokenizer.json");
    const json e = read_json(fixtures / kind / "expected.json")["after_add_tokens"];
    const auto plain = e["plain"].get<std::vector<std::string>>();
    const auto special = e["special"].get<std::vector<std::string>>();
    const std::int32_t before = tok.vocab_size();
    const int fresh = tok.add_tokens(plain, false) + tok.add_tokens(special, true);
    CHECK(tok.vocab_size() == e["vocab_size"].get<std::int32_t>());
    CHECK(fresh == tok.vocab_size() - before);  // new ids only: "the" is already in the vocabulary
    for (const auto& [content, id] : e["ids"].items()) CHECK(tok.token_to_id(content) == id.get<std::int32_t>());
    CHECK(matches_hf(tok, e["case"], kind + " after add_tokens"));
    CHECK(tok.add_tokens(special, true) == 0);  // already there
    CHECK(tok.is_special(*tok.token_to_id(special[0])));
  }
}

TEST_CASE("tokenizer: merges written as \"left right\" strings read like pairs") {
  json j = read_json(fixtures / "gpt2/tokenizer.json");
  for (json& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer legacy = Tokenizer::from_json(j, "gpt2 (string merges)");
  const Tokenizer pairs = Tokenizer::from_file(fixtures / "gpt2/tokenizer.json");
  const std::string corpus = read_text(fixtures / "corpus.txt");
  CHECK(legacy.encode(corpus) == pairs.encode(corpus));
  const json expected = read_json(fixtures / "gpt2/expected.json");
  for (const json& c : expected["lines"]) CHECK(matches_hf(legacy, c, "string merges"));
}

TEST_CASE("tokenizer: byte-level kinds decode what they encode, byte for byte") {
  const std::string corpus = read_text(fixtures / "corpus.txt");
  for (const std::string kind : byte_level_kinds) {
    CAPTURE(kind);
    const Tokenizer tok = Tokenizer::from_file(fixtures / kind / "tokenizer.json");
    // NFC kinds normalise: compare with what HF decodes (no added ids: ByteLevel post-processors).
    const json expected = read_json(fixtures / kind / "expected.json");
    const bool nfc = kind == "gpt_neox" || kind == "qwen2";
    const std::string hf_decoded = expected["whole"]["decoded"];
    CHECK(tok.decode(tok.encode(corpus, false)) == (nfc ? hf_decoded : corpus));
    for (const std::string text : {"plain", "tabs\t\tand\n\nnewlines", "emoji 👩‍💻🇫🇷", "中文 한국어 עברית"})
      CHECK(tok.decode(tok.encode(text, false)) == text);
  }
}

TEST_CASE("tokenizer: skip_special_tokens leaves out special tokens only") {
  const Tokenizer tok = Tokenizer::from_file(fixtures / "llama3/tokenizer.json");
  const auto ids = tok.encode("<|start_header_id|>user<|end_header_id|>hi<|eot_id|>");
  CHECK(ids.front() == *tok.token_to_id("<|begin_of_text|>"));
  CHECK(tok.decode(ids) == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>hi<|eot_id|>");
  CHECK(tok.decode(ids, true) == "userhi");
  const Tokenizer qwen = Tokenizer::from_file(fixtures / "qwen2/tokenizer.json");
  const auto q = qwen.encode("<tool_call>x<|im_end|>");  // <tool_call> is added but not special
  CHECK(qwen.decode(q, true) == "<tool_call>x");
}

TEST_CASE("tokenizer: encode may run on several threads at once") {
  const Tokenizer tok = Tokenizer::from_file(fixtures / "qwen2/tokenizer.json");
  const std::string corpus = read_text(fixtures / "corpus.txt");
  const auto reference = tok.encode(corpus);
  std::vector<std::thread> threads;
  std::atomic<int> wrong = 0;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) wrong += tok.encode(corpus) != reference;
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("tokenizer: long inputs (one huge word, long whitespace runs)") {
  const Tokenizer sp = Tokenizer::from_file(fixtures / "llama2/tokenizer.json");
  const std::string word(200000, 'a');  // no pre-tokenizer: one word for BPE
  const auto ids = sp.encode(word, false);
  CHECK(sp.decode(ids) == word);
  const Tokenizer gpt2 = Tokenizer::from_file(fixtures / "gpt2/tokenizer.json");
  const std::string spaces = "x" + std::string(1 << 20, ' ') + "y" + std::string(1 << 16, '\n');
  CHECK(gpt2.decode(gpt2.encode(spaces)) == spaces);
}

TEST_CASE("tokenizer: ids outside the vocabulary and invalid UTF-8 are errors") {
  const Tokenizer tok = Tokenizer::from_file(fixtures / "gpt2/tokenizer.json");
  const std::vector<std::int32_t> bad{1, tok.vocab_size()};
  check_one_line(error_of([&] { tok.decode(bad); }), {"token id 1002", "not in the vocabulary"});
  check_one_line(error_of([&] { tok.id_to_token(-1); }), {"token id -1"});
  check_one_line(error_of([&] { tok.encode("ok \xC3\x28 bad"); }), {"not valid UTF-8", "byte 3"});
  CHECK(!tok.token_to_id("no such token"));
  Tokenizer copy = tok;
  const std::vector<std::string> bad_tokens{"brandnewthing", "\xFF"};
  check_one_line(error_of([&] { copy.add_tokens(bad_tokens, false); }), {"added token", "not valid UTF-8"});
  CHECK(!copy.token_to_id("brandnewthing"));  // all or nothing
  CHECK(copy.vocab_size() == tok.vocab_size());
  const std::vector<std::string> empty_token{""};
  check_one_line(error_of([&] { copy.add_tokens(empty_token, true); }), {"cannot be empty"});
  CHECK(tok.id_to_token(*tok.token_to_id("<|endoftext|>")) == "<|endoftext|>");
}

TEST_CASE("tokenizer: unreadable files are one-line errors naming the file") {
  check_one_line(error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); }),
                 {"/nonexistent/tokenizer.json", "cannot be opened"});
  const ft::testing::TempDir dir("ft_tokenizer");
  const fs::path broken = dir / "broken.json", huge_number = dir / "huge_number.json", list = dir / "list.json";
  ft::testing::write_bytes(broken, "{\"model\": ");
  check_one_line(error_of([&] { Tokenizer::from_file(broken); }), {broken.string().c_str(), "not valid JSON"});
  // A fuzzer's finding: nlohmann throws out_of_range here, not parse_error.
  ft::testing::write_bytes(huge_number, "{\"model\": 2222e1111111}");
  check_one_line(error_of([&] { Tokenizer::from_file(huge_number); }),
                 {huge_number.string().c_str(), "not valid JSON", "number overflow"});
  ft::testing::write_bytes(list, "[1, 2]");
  check_one_line(error_of([&] { Tokenizer::from_file(list); }), {list.string().c_str(), "expected an object"});
  CHECK_NOTHROW(Tokenizer::from_json(tiny(), "tiny"));
}

TEST_CASE("tokenizer: unsupported models and components are refused by name") {
  check_refused("/model/type", "Unigram", {"model: ", "\"Unigram\"", "not supported"});
  check_refused("/model/type", "WordPiece", {"\"WordPiece\"", "not supported"});
  check_refused("/model/dropout", 0.1, {"model.dropout: ", "not supported"});
  check_refused("/normalizer", {{"type", "NFKC"}}, {"normalizer: ", "\"NFKC\"", "not supported"});
  check_refused("/normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}},
                {"normalizer.normalizers[1]: ", "\"Lowercase\""});
  check_refused("/pre_tokenizer", {{"type", "Whitespace"}}, {"pre_tokenizer: ", "\"Whitespace\"", "not supported"});
  check_refused("/pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Punctuation"}}}}},
                {"pre_tokenizer.pretokenizers[0]: ", "\"Punctuation\""});
  check_refused("/decoder", {{"type", "WordPiece"}}, {"decoder: ", "\"WordPiece\"", "not supported"});
  check_refused("/post_processor", {{"type", "Fancy"}}, {"post_processor: ", "\"Fancy\"", "not supported"});
}

TEST_CASE("tokenizer: malformed structure is refused with the file and the path") {
  check_refused("/model/merges/1", json::array({"Ġ", "zz"}), {"model.merges[1]: ", "\"zz\"", "not in the vocabulary"});
  check_refused("/model/merges/0", json::array({"b", "a"}), {"model.merges[0]: ", "\"ba\"", "not in the vocabulary"});
  check_refused("/model/merges/0", "a  b", {"model.merges[0]: ", "exactly one space"});
  check_refused("/model/merges/0", 7, {"model.merges[0]: ", "expected a merge"});
  check_refused("/model/vocab/b", 0, {"model.vocab: ", "id 0", "\"a\"", "\"b\""});
  check_refused("/model/vocab/b", -3, {"model.vocab.\"b\": ", "expected an integer"});
  check_refused("/model/vocab/b", "one", {"model.vocab.\"b\": ", "expected an integer"});
  check_refused("/model/vocab/b", 1000000, {"model.vocab: ", "too sparse"});
  check_refused("/model/unk_token", "<unk>", {"model.unk_token: ", "not in the vocabulary"});
  check_refused("/model/vocab", json::array(), {"model.vocab: ", "expected an object"});
  check_refused("/model", nullptr, {"model: ", "expected an object"});
  check_refused("/added_tokens/0/id", 9, {"added_tokens[0]: ", "\"<s>\"", "has id 9", "gives it id 5"});
  check_refused("/added_tokens/0/content", "", {"added_tokens[0]: ", "cannot be empty"});
  check_refused("/added_tokens/0/special", "yes", {"added_tokens[0].special: ", "true or false"});
  check_refused("/pre_tokenizer/add_prefix_space", nullptr, {"pre_tokenizer.add_prefix_space: ", "true or false"});
  const json split = {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Isolated"}, {"invert", false}};
  auto with = [&](const char* key, const json& value) {
    json j = split;
    j[key] = value;
    return j;
  };
  check_refused("/pre_tokenizer", with("pattern", {{"Regex", "(unclosed"}}),
                {"pre_tokenizer.pattern: ", "does not compile"});
  check_refused("/pre_tokenizer", with("pattern", {{"Regex", "[\\W]"}}),
                {"pre_tokenizer.pattern: ", "inside a character class"});
  check_refused("/pre_tokenizer", with("pattern", {{"Glob", "*"}}), {"pre_tokenizer.pattern: ", "\"String\""});
  check_refused("/pre_tokenizer", with("behavior", "Sideways"), {"pre_tokenizer.behavior: ", "\"Sideways\""});
  check_refused("/pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "ab"}},
                {"pre_tokenizer.replacement: ", "one character"});
  check_refused("/pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}},
                {"pre_tokenizer.prepend_scheme: ", "\"sometimes\""});
  const json special_s = {{"SpecialToken", {{"id", "<s>"}}}};
  const json sequence_b = {{"Sequence", {{"id", "B"}}}};
  auto template_of = [](const json& piece) {
    return json{{"type", "TemplateProcessing"}, {"single", json::array({piece})}, {"special_tokens", json::object()}};
  };
  check_refused("/post_processor", template_of(special_s),
                {"post_processor.single[0].SpecialToken: ", "\"<s>\"", "not in special_tokens"});
  check_refused("/post_processor", template_of(sequence_b), {"post_processor.single[0].Sequence: ", "sequence A"});
  const json roberta = {{"type", "RobertaProcessing"}, {"cls", json::array({"<cls>", 77})},
                        {"sep", json::array({"<sep>", 5})}};
  check_refused("/post_processor", roberta, {"post_processor: ", "id 77", "not in the vocabulary"});
  check_refused("/decoder", {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}},
                {"decoder.start: ", "integer"});
  json nested = {{"type", "NFC"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"normalizers", json::array({nested})}};
  check_refused("/normalizer", nested, {"normalizer.normalizers[0]", "nested more than 64 levels deep"});
  json no_model = tiny();
  no_model.erase("model");
  check_one_line(error_loading(no_model), {"tiny/tokenizer.json: ", "missing required field \"model\""});
}

TEST_CASE("tokenizer: the tiny tokenizer encodes as BPE should") {
  const Tokenizer tok = Tokenizer::from_json(tiny(), "tiny");
  CHECK(tok.encode("ab ab<s>ba") == std::vector<std::int32_t>{2, 4, 5, 1, 0});
  CHECK(tok.vocab_size() == 6);
  CHECK(tok.decode(tok.encode("ab ab<s>ba")) == "ab ab<s>ba");
  CHECK(tok.decode(tok.encode("ab ab<s>ba"), true) == "ab abba");
  CHECK(tok.encode("zz ab") == std::vector<std::int32_t>{4});  // no unknown token: HF drops what it cannot encode
}

}  // namespace test_tokenizer
