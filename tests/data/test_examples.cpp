// Dataset rows to examples, and examples to micro-batches.
//
// Examples: for alpaca rows with chat templates (a prefix template, Llama 2's
// that writes its own BOS, one that marks {% generation %} and is not a
// prefix, one that makes the tokenizer merge across the prompt boundary),
// alpaca rows without a template and text rows, ft's input_ids and labels are
// those transformers gives (tools/make_example_fixtures.py); tokens rows,
// truncation, JSON arrays, and every kind of bad row in fail and skip mode.
// Batches: padding, an epoch is a permutation of the rows, orders are those of
// a Python rewrite of the documented generator, packing keeps every token once
// in its own document, matches a plain best-fit-decreasing reference, and
// wastes less than padding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <ranges>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <range/v3/view/take.hpp>
#include <range/v3/view/transform.hpp>

#include <ft/data/artificial.hpp>
#include <ft/data/batches.hpp>
#include <ft/data/prepared.hpp>
#include <ft/data/examples.hpp>

#include "support/files.hpp"

namespace test_examples {

namespace fs = std::filesystem;
using ft::data::BatchPlan;
using ft::text::ChatOptions;
using ft::text::ChatTemplate;
using ft::data::Example;
using ft::data::ExampleOptions;
using ft::data::Examples;
using ft::data::epoch_order;
using ft::text::Tokenizer;
using ft::testing::error_of;
using ft::testing::TempDir;
using ft::testing::write_bytes;
using nlohmann::json;

namespace {

const fs::path root = fs::path(FT_SOURCE_DIR);
const fs::path data_fixtures = root / "tests/fixtures/data";

json read_json(const fs::path& file) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(in, "cannot open " << file);
  return json::parse(in);
}

const Tokenizer& tokenizer(const std::string& kind) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(kind);
  if (it == cache.end())
    it = cache.emplace(kind, Tokenizer::from_file(root / "tests/fixtures/tokenizers" / kind / "tokenizer.json")).first;
  return it->second;
}

ChatTemplate chat_template(const std::string& relative) {
  return ChatTemplate::parse(ft::testing::read_bytes(root / relative), relative);
}

ChatOptions specials(std::optional<std::string> bos, std::optional<std::string> eos) {
  ChatOptions o;
  o.bos_token = std::move(bos);
  o.eos_token = std::move(eos);
  return o;
}

const ChatOptions smollm2_chat = specials("<|im_start|>", "<|im_end|>");
const ChatOptions smollm2_base = specials(std::nullopt, "<|endoftext|>");

ExampleOptions options(std::string format, std::int64_t max_seq_length = 4096, std::string on_bad_row = "fail") {
  ExampleOptions o;
  o.format = std::move(format);
  o.max_seq_length = max_seq_length;
  o.on_bad_row = std::move(on_bad_row);
  return o;
}

std::vector<std::int32_t> ids_of(const json& j) { return j.get<std::vector<std::int32_t>>(); }

}  // namespace

TEST_CASE("examples: ids and labels equal transformers' for every fixture case") {
  const json cases = read_json(data_fixtures / "examples_expected.json");
  REQUIRE(cases.size() >= 15);
  int merged = 0;
  for (auto it = cases.begin(); it != cases.end(); ++it) {
    const std::string name = it.key();
    const json& c = it.value();
    CAPTURE(name);
    std::optional<ChatTemplate> chat;
    if (!c["template"].is_null()) chat = chat_template(c["template"].get<std::string>());
    ChatOptions special;
    if (c.contains("bos_token")) special.bos_token = c["bos_token"].get<std::string>();
    special.eos_token = c["eos_token"].get<std::string>();
    ExampleOptions o = options(c["format"]);
    o.fields.text = c.value("text_field", "text");
    o.response_template = c.value("response_template", "");
    o.instruction_template = c.value("instruction_template", "");
    const Examples got = ft::data::read_examples(data_fixtures / c["rows"].get<std::string>(),
                                                 &tokenizer(c["tokenizer"]), chat ? &*chat : nullptr, special, o);
    const json& expected = c["expected"];
    REQUIRE(got.rows.size() == expected.size());
    CHECK(got.skipped == 0);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(i);
      const Example& e = got.rows[i];
      CHECK(e.line == std::int64_t(i + 1));
      CHECK(e.input_ids == ids_of(expected[i]["input_ids"]));
      CHECK(e.labels == ids_of(expected[i]["labels"]));
      // The prompt is the leading run of -100.
      const auto prompt = expected[i]["prompt_tokens"].get<std::size_t>();
      REQUIRE(prompt < e.labels.size());
      for (std::size_t t = 0; t < prompt; ++t) CHECK(e.labels[t] == -100);
      CHECK(e.labels[prompt] == e.input_ids[prompt]);
      merged += expected[i]["merged"].get<bool>();
    }
  }
  CHECK(merged >= 2);  // the longest-common-prefix split is exercised
}

TEST_CASE("examples: renamed fields read the same rows") {
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  TempDir dir("ft_examples_fields");
  struct Case {
    std::string format, standard, renamed;
    ft::data::FieldNames fields;
  };
  ft::data::FieldNames alpaca, chat_fields, text, tokens;
  alpaca.instruction = "question";
  alpaca.input = "context";
  alpaca.output = "answer";
  chat_fields.messages = "conversation";
  text.text = "body";
  tokens.input_ids = "ids";
  tokens.labels = "targets";
  const std::vector<Case> cases = {
      {"alpaca", R"({"instruction": "Name a colour.", "input": "Warm ones.", "output": "Red."})",
       R"({"question": "Name a colour.", "context": "Warm ones.", "answer": "Red."})", alpaca},
      {"chat", R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]})",
       R"({"conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]})",
       chat_fields},
      {"text", R"({"text": "Plain words."})", R"({"body": "Plain words."})", text},
      {"tokens", R"({"input_ids": [5, 6, 7], "labels": [-100, 6, 7]})", R"({"ids": [5, 6, 7], "targets": [-100, 6, 7]})",
       tokens},
  };
  for (const Case& c : cases) {
    CAPTURE(c.format);
    write_bytes(dir / "standard.jsonl", c.standard + "\n");
    write_bytes(dir / "renamed.jsonl", c.renamed + "\n");
    ExampleOptions o = options(c.format);
    const Examples want = ft::data::read_examples(dir / "standard.jsonl", &tok, &chat, smollm2_chat, o);
    o.fields = c.fields;
    const Examples got = ft::data::read_examples(dir / "renamed.jsonl", &tok, &chat, smollm2_chat, o);
    REQUIRE(got.rows.size() == 1);
    CHECK(got.rows[0].input_ids == want.rows[0].input_ids);
    CHECK(got.rows[0].labels == want.rows[0].labels);
    // The standard names are no longer read.
    const std::string msg = error_of([&] { ft::data::read_examples(dir / "standard.jsonl", &tok, &chat, smollm2_chat, o); });
    CHECK(msg.find("is missing") != std::string::npos);
  }
}

TEST_CASE("examples: ShareGPT rows (conversations of from/value) read as the same messages") {
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  TempDir dir("ft_examples_sharegpt");
  // Samantha's rows: a system line, then human and gpt turns.
  write_bytes(dir / "messages.jsonl",
              R"({"messages": [{"role": "system", "content": "You are Samantha."}, {"role": "user", "content": "Hi"}, )"
              R"({"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}, )"
              R"({"role": "assistant", "content": "Because."}]})" "\n");
  write_bytes(dir / "sharegpt.jsonl",
              R"({"id": "1", "conversations": [{"from": "system", "value": "You are Samantha."}, )"
              R"({"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}, )"
              R"({"from": "human", "value": "Why?"}, {"from": "gpt", "value": "Because."}]})" "\n");
  const ExampleOptions o = options("chat");
  const Examples want = ft::data::read_examples(dir / "messages.jsonl", &tok, &chat, smollm2_chat, o);
  const Examples got = ft::data::read_examples(dir / "sharegpt.jsonl", &tok, &chat, smollm2_chat, o);
  REQUIRE(got.rows.size() == 1);
  CHECK(got.rows[0].input_ids == want.rows[0].input_ids);
  CHECK(got.rows[0].labels == want.rows[0].labels);
  CHECK(std::count(got.rows[0].labels.begin(), got.rows[0].labels.end(), -100) > 0);

  write_bytes(dir / "unknown.jsonl", R"({"conversations": [{"from": "narrator", "value": "Once"}, {"from": "gpt", "value": "Hi"}]})" "\n");
  CHECK(error_of([&] { ft::data::read_examples(dir / "unknown.jsonl", &tok, &chat, smollm2_chat, o); }) ==
        (dir / "unknown.jsonl").string() + R"(:1: "conversations"[0] has "from": "narrator", which is no ShareGPT )"
        "speaker ft knows (human, user, gpt, assistant, chatgpt, system, tool), allowed: " R"({"messages": [{"role": )"
        R"(string, "content": string}, ...] with a non-empty assistant message}, or ShareGPT's {"conversations": )"
        R"([{"from": "human" | "gpt" | "system", "value": string}, ...]})");
  write_bytes(dir / "unanswered.jsonl", R"({"conversations": [{"from": "human", "value": "Hi"}]})" "\n");
  CHECK(error_of([&] { ft::data::read_examples(dir / "unanswered.jsonl", &tok, &chat, smollm2_chat, o); })
            .find(R"(:1: "conversations" has no assistant message with content)") != std::string::npos);
}

TEST_CASE("examples: gzip and zstd files read the plain file's rows; a truncated or corrupt one is one line") {
  const Tokenizer& tok = tokenizer("smollm2");
  TempDir dir("ft_examples_compressed");
  const fs::path plain = dir / "rows.jsonl";
  fs::copy_file(root / "tests/fixtures/train/jargon_small.jsonl", plain);
  // Two gzip members one after the other (as pigz and cat write them), and zstd's own frames.
  const std::string make = "cd " + dir.path.string() + " && head -n 20 rows.jsonl | gzip -c > rows.jsonl.gz && " +
                           "tail -n +21 rows.jsonl | gzip -c >> rows.jsonl.gz && zstd -q -19 rows.jsonl -o rows.jsonl.zst";
  REQUIRE(std::system(make.c_str()) == 0);
  const ExampleOptions o = options("alpaca", 128);
  const Examples want = ft::data::read_examples(plain, &tok, nullptr, smollm2_base, o);
  REQUIRE(want.rows.size() == 48);
  for (const char* name : {"rows.jsonl.gz", "rows.jsonl.zst"}) {
    CAPTURE(name);
    const Examples got = ft::data::read_examples(dir / name, &tok, nullptr, smollm2_base, o);
    REQUIRE(got.rows.size() == want.rows.size());
    for (std::size_t i = 0; i < got.rows.size(); ++i) {
      CHECK(got.rows[i].input_ids == want.rows[i].input_ids);
      CHECK(got.rows[i].labels == want.rows[i].labels);
      CHECK(got.rows[i].line == want.rows[i].line);
    }
  }
  const std::string zst = ft::testing::read_bytes(dir / "rows.jsonl.zst");
  write_bytes(dir / "cut.jsonl.zst", zst.substr(0, zst.size() / 2));
  CHECK(error_of([&] { ft::data::read_examples(dir / "cut.jsonl.zst", &tok, nullptr, smollm2_base, o); }) ==
        (dir / "cut.jsonl.zst").string() + ": zstd data ends early (the file is truncated) at compressed byte " +
            std::to_string(zst.size() / 2) + "; allowed: a whole zstd file of JSON Lines rows");
  const std::string gz = ft::testing::read_bytes(dir / "rows.jsonl.gz");
  write_bytes(dir / "cut.jsonl.gz", gz.substr(0, gz.size() - 30));
  CHECK(error_of([&] { ft::data::read_examples(dir / "cut.jsonl.gz", &tok, nullptr, smollm2_base, o); }) ==
        (dir / "cut.jsonl.gz").string() + ": gzip data ends early (the file is truncated) at compressed byte " +
            std::to_string(gz.size() - 30) + "; allowed: a whole gzip file of JSON Lines rows");
  std::string broken = gz;
  for (std::size_t i = 100; i < 140; ++i) broken[i] = char(broken[i] ^ 0x5a);
  write_bytes(dir / "broken.jsonl.gz", broken);
  const std::string message =
      error_of([&] { ft::data::read_examples(dir / "broken.jsonl.gz", &tok, nullptr, smollm2_base, o); });
  CHECK(message.starts_with((dir / "broken.jsonl.gz").string() + ": gzip data is corrupt ("));
  CHECK(message.find('\n') == std::string::npos);

  // Columnar files are refused with the way to write their rows out.
  write_bytes(dir / "rows.parquet", std::string("PAR1") + std::string(64, '\0'));
  CHECK(error_of([&] { ft::data::read_examples(dir / "rows.parquet", &tok, nullptr, smollm2_base, o); }) ==
        (dir / "rows.parquet").string() + ": is a Parquet file; ft reads JSON Lines or JSON rows, allowed: the rows "
        "written out once, e.g. python -c \"import datasets; datasets.Dataset.from_parquet('" +
            (dir / "rows.parquet").string() + "').to_json('rows.jsonl')\"");
}

TEST_CASE("examples: a JSON array file gives the same examples, with each element's line") {
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  const Examples lines =
      ft::data::read_examples(data_fixtures / "alpaca_rows.jsonl", &tok, &chat, smollm2_chat, options("alpaca"));
  json array = json::array();
  std::ifstream in(data_fixtures / "alpaca_rows.jsonl");
  for (std::string line; std::getline(in, line);) array.push_back(json::parse(line));
  TempDir dir("ft_examples");
  // dump(1): "[", then each object over 5 lines (brace, three keys, brace).
  write_bytes(dir / "rows.json", "\n" + array.dump(1) + "\n");
  const Examples got = ft::data::read_examples(dir / "rows.json", &tok, &chat, smollm2_chat, options("alpaca"));
  REQUIRE(got.rows.size() == lines.rows.size());
  for (std::size_t i = 0; i < got.rows.size(); ++i) {
    CHECK(got.rows[i].input_ids == lines.rows[i].input_ids);
    CHECK(got.rows[i].labels == lines.rows[i].labels);
    CHECK(got.rows[i].line == std::int64_t(3 + 5 * i));
  }
  write_bytes(dir / "empty.json", " [ ] ");
  CHECK(error_of([&] {
          ft::data::read_examples(dir / "empty.json", &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("has no rows") != std::string::npos);
  write_bytes(dir / "open.json", "[{\"instruction\": \"a\", \"output\": \"b\"},\n{\"instruction\": \"[\"");
  CHECK(error_of([&] {
          ft::data::read_examples(dir / "open.json", &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("open.json:2: this element of the JSON array opened on line 1 is not closed") != std::string::npos);
  write_bytes(dir / "after.json", "[{\"instruction\": \"a\", \"output\": \"b\"}]\n{}");
  CHECK(error_of([&] {
          ft::data::read_examples(dir / "after.json", &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("after.json:2: text after the JSON array") != std::string::npos);
}

TEST_CASE("examples: JsonRecords reads rows lazily, with their lines, through strings that look like JSON") {
  using ft::data::JsonRecord;
  using ft::data::JsonRecords;
  auto texts = [](std::string_view content) {
    std::vector<std::pair<std::int64_t, std::string>> out;
    for (const JsonRecord& r : JsonRecords(content, "t"))
      out.emplace_back(r.line, std::string(r.text));
    return out;
  };
  using Rows = std::vector<std::pair<std::int64_t, std::string>>;
  // JSON Lines: blank lines and surrounding space are not rows; a byte order mark is dropped.
  CHECK(texts("\xEF\xBB\xBF{\"a\": 1}\n\n  {\"b\": \"x\\ny\"} \r\n{}") ==
        Rows{{1, "{\"a\": 1}"}, {3, "{\"b\": \"x\\ny\"}"}, {4, "{}"}});
  CHECK(texts("").empty());
  CHECK(texts("\n \n").empty());
  // A JSON array: commas, brackets, braces and escaped quotes inside strings belong to the element.
  const std::string array = "\n[ {\"a\": \"],{\\\"\"},\n  {\"b\": [1, {\"c\": \"}\"}]},\n\n 7 ]\n";
  CHECK(texts(array) == Rows{{2, "{\"a\": \"],{\\\"\"}"}, {3, "{\"b\": [1, {\"c\": \"}\"}]}"}, {5, "7"}});
  CHECK(texts("[]").empty());
  // A view: it composes, and reading stops where the caller stops, before a later fault.
  const auto lines = JsonRecords("[1, 2, 3, 4", "t") |
                     ranges::views::transform([](const JsonRecord& r) { return r.line; }) | ranges::views::take(2);
  std::vector<std::int64_t> taken;
  for (std::int64_t line : lines) taken.push_back(line);
  CHECK(taken == std::vector<std::int64_t>{1, 1});
  CHECK_THROWS_WITH_AS(texts("[1, 2, 3 4"), doctest::Contains("t:1: this element of the JSON array opened on line 1 is not closed"),
                       ft::Error);
  CHECK_THROWS_WITH_AS(texts("[1] x"), doctest::Contains("t:1: text after the JSON array's closing ']'"), ft::Error);
}

TEST_CASE("examples: truncation keeps HF's leading tokens; a prompt without room is a bad row") {
  const json c = read_json(data_fixtures / "examples_expected.json")["smollm2_chat"];
  const json& row = c["expected"][1];
  const auto full = ids_of(row["input_ids"]);
  const auto labels = ids_of(row["labels"]);
  const auto prompt = row["prompt_tokens"].get<std::int64_t>();
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  TempDir dir("ft_examples");
  std::ifstream in(data_fixtures / "alpaca_rows.jsonl");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  write_bytes(dir / "one.jsonl", second + "\n");

  const std::int64_t keep = prompt + 3;
  REQUIRE(keep < std::int64_t(full.size()));
  const Examples got = ft::data::read_examples(dir / "one.jsonl", &tok, &chat, smollm2_chat, options("alpaca", keep));
  REQUIRE(got.rows.size() == 1);
  CHECK(got.rows[0].input_ids == std::vector<std::int32_t>(full.begin(), full.begin() + keep));
  CHECK(got.rows[0].labels == std::vector<std::int32_t>(labels.begin(), labels.begin() + keep));

  // max_seq_length = prompt + 1: the one response token is labels[prompt], still scored.
  CHECK(ft::data::read_examples(dir / "one.jsonl", &tok, &chat, smollm2_chat, options("alpaca", prompt + 1))
            .rows[0]
            .labels.back() == full[std::size_t(prompt)]);
  const std::string msg = error_of(
      [&] { ft::data::read_examples(dir / "one.jsonl", &tok, &chat, smollm2_chat, options("alpaca", prompt)); });
  CHECK(msg.rfind((dir / "one.jsonl").string() + ":1: the prompt takes " + std::to_string(prompt) +
                      " tokens and leaves no room for a response within max_seq_length " + std::to_string(prompt),
                  0) == 0);
  CHECK(msg.find("allowed:") != std::string::npos);

  // Skipped: the short row survives, the long one is counted.
  write_bytes(dir / "two.jsonl", second + "\n" + first + "\n");
  const std::int64_t first_prompt =
      read_json(data_fixtures / "examples_expected.json")["smollm2_chat"]["expected"][0]["prompt_tokens"];
  REQUIRE(first_prompt < prompt);
  const Examples skipped =
      ft::data::read_examples(dir / "two.jsonl", &tok, &chat, smollm2_chat, options("alpaca", prompt, "skip"));
  CHECK(skipped.skipped == 1);
  REQUIRE(skipped.rows.size() == 1);
  CHECK(skipped.rows[0].line == 2);
}

TEST_CASE("examples: tokens rows") {
  const Tokenizer& tok = tokenizer("smollm2");
  TempDir dir("ft_examples");
  write_bytes(dir / "t.jsonl",
              "{\"input_ids\": [5, 6, 7, 8], \"labels\": [-100, -100, 7, 8]}\n"
              "{\"input_ids\": [9, 10, 11]}\n"
              "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9], \"labels\": null}\n");
  const Examples got = ft::data::read_examples(dir / "t.jsonl", &tok, nullptr, {}, options("tokens", 6));
  REQUIRE(got.rows.size() == 3);
  CHECK(got.rows[0].input_ids == std::vector<std::int32_t>{5, 6, 7, 8});
  CHECK(got.rows[0].labels == std::vector<std::int32_t>{-100, -100, 7, 8});
  CHECK(got.rows[1].labels == std::vector<std::int32_t>{9, 10, 11});
  CHECK(got.rows[2].input_ids == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  CHECK(got.rows[2].labels == got.rows[2].input_ids);
  CHECK(got.rows[2].line == 3);
}

TEST_CASE("examples: text rows without a known EOS get none appended") {
  const Tokenizer& tok = tokenizer("smollm2");
  TempDir dir("ft_examples");
  write_bytes(dir / "t.jsonl", "{\"text\": \"hack the planet\"}\n");
  const auto got = ft::data::read_examples(dir / "t.jsonl", &tok, nullptr, {}, options("text"));
  REQUIRE(got.rows.size() == 1);
  CHECK(got.rows[0].input_ids == tok.encode("hack the planet", true));
  CHECK(got.rows[0].labels == got.rows[0].input_ids);
}

TEST_CASE("examples: every kind of bad row, in fail mode and in skip mode") {
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  const std::string good = R"({"instruction": "Name a colour.", "input": "", "output": "Red."})";
  struct Bad {
    std::string format, row, says;
  };
  const std::vector<Bad> bad = {
      {"alpaca", R"({"instruction": "x", "output": )", "not valid JSON"},
      {"alpaca", R"(["instruction", "output"])", "the row is an array, not an object"},
      {"alpaca", R"(42)", "the row is a number, not an object"},
      {"alpaca", R"({"input": "x", "output": "y"})", "\"instruction\" is missing"},
      {"alpaca", R"({"instruction": "x"})", "\"output\" is missing"},
      {"alpaca", R"({"instruction": 3, "output": "y"})", "\"instruction\" is a number, not a string"},
      {"alpaca", R"({"instruction": "x", "input": ["a"], "output": "y"})", "\"input\" is an array, not a string"},
      {"alpaca", R"({"instruction": "x", "output": ""})", "\"output\" is empty"},
      {"alpaca", R"({"instruction": "", "output": "y"})", "\"instruction\" is empty"},
      {"alpaca", "{\"instruction\": \"caf\xE9\", \"output\": \"y\"}", "not valid UTF-8 (byte 21)"},
      {"alpaca", R"({"instruction": "\ud800", "output": "y"})", "not valid JSON"},
      {"alpaca", R"({"instruction": ")" + std::string(3000, 'z') + R"(", "output": "y"})",
       "leaves no room for a response within max_seq_length 64"},
      {"text", R"({"txt": "x"})", "\"text\" is missing"},
      {"text", R"({"text": ""})", "\"text\" is empty"},
      {"text", R"({"text": null})", "\"text\" is missing"},
      {"tokens", R"({"labels": [1]})", "\"input_ids\" is missing"},
      {"tokens", R"({"input_ids": "1 2"})", "\"input_ids\" is a string, not a list"},
      {"tokens", R"({"input_ids": []})", "\"input_ids\" is empty"},
      {"tokens", R"({"input_ids": [1, 2.5]})", "\"input_ids\"[1] is a number, not an integer"},
      {"tokens", R"({"input_ids": [1, 100000]})", "\"input_ids\"[1] = 100000 is outside the vocabulary [0, "},
      {"tokens", R"({"input_ids": [1, -100]})", "\"input_ids\"[1] = -100 is outside the vocabulary"},
      {"tokens", R"({"input_ids": [1, 2], "labels": [1]})", "\"labels\" has 1 entries and \"input_ids\" 2"},
      {"tokens", R"({"input_ids": [1, 2], "labels": [1, -5]})", "\"labels\"[1] = -5 is outside the vocabulary"},
      {"tokens", R"({"input_ids": [1, 2], "labels": [1, -100]})", "no token after the first is scored"},
      {"tokens", R"({"input_ids": [1]})", "no token after the first is scored"},
      {"chat", R"({"msgs": []})", "\"messages\" is missing"},
      {"chat", R"({"messages": "hi"})", "\"messages\" is a string, not a list"},
      {"chat", R"({"messages": [{"role": "user"}]})", "\"messages\"[0] has no string \"content\""},
      {"chat", R"({"messages": [{"role": "user", "content": "x"}, 7]})", "\"messages\"[1] is a number, not an object"},
      {"chat", R"({"messages": [{"role": "user", "content": "x"}]})", "has no assistant message with content"},
      {"chat", R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]})",
       "has no assistant message with content"},
      {"guanaco", R"({"text": "### Human: no answer here"})", "does not contain the response template"},
      {"guanaco", R"({"text": 5})", "\"text\" is a number, not a string"},
  };
  TempDir dir("ft_examples");
  const std::map<std::string, std::string> good_for = {
      {"alpaca", good},
      {"text", R"({"text": "fine"})"},
      {"tokens", R"({"input_ids": [1, 2]})"},
      {"chat", R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]})"},
      {"guanaco", R"({"text": "### Human: Hi### Assistant: Hello."})"}};
  auto good_row = [&](const std::string& format) { return good_for.at(format); };
  for (const Bad& b : bad) {
    CAPTURE(b.row.substr(0, 80));
    const fs::path file = dir / "bad.jsonl";
    // Line 2 is blank: ignored, but counted.
    write_bytes(file, good_row(b.format) + "\n  \n" + b.row + "\n" + good_row(b.format) + "\n");
    const std::string msg =
        error_of([&] { ft::data::read_examples(file, &tok, &chat, smollm2_base, options(b.format, 64)); });
    CHECK(msg.rfind(file.string() + ":3: ", 0) == 0);
    CHECK(msg.find(b.says) != std::string::npos);
    CHECK(msg.find(", allowed: ") != std::string::npos);
    const Examples skipped = ft::data::read_examples(file, &tok, &chat, smollm2_base, options(b.format, 64, "skip"));
    CHECK(skipped.skipped == 1);
    REQUIRE(skipped.rows.size() == 2);
    CHECK(skipped.rows[0].line == 1);
    CHECK(skipped.rows[1].line == 4);
    REQUIRE(skipped.first_skips.size() == 1);
    CHECK(skipped.first_skips[0] == msg);
  }

  // Many bad rows: counted, the first five kept in order; all bad: an error.
  std::string many = good + "\n";
  for (int i = 0; i < 8; ++i)
    many += R"({"instruction": "x"})"
            "\n";
  write_bytes(dir / "many.jsonl", many);
  const Examples got =
      ft::data::read_examples(dir / "many.jsonl", &tok, &chat, smollm2_chat, options("alpaca", 64, "skip"));
  CHECK(got.rows.size() == 1);
  CHECK(got.skipped == 8);
  REQUIRE(got.first_skips.size() == 5);
  CHECK(got.first_skips[4].rfind((dir / "many.jsonl").string() + ":6: ", 0) == 0);
  write_bytes(dir / "none.jsonl", "{}\n[]\n");
  const std::string none = error_of(
      [&] { ft::data::read_examples(dir / "none.jsonl", &tok, &chat, smollm2_chat, options("alpaca", 64, "skip")); });
  CHECK(none.find("none.jsonl: has no usable rows (all 2 skipped; the first: ") != std::string::npos);
}

TEST_CASE("examples: files, options and templates that cannot be used") {
  const Tokenizer& tok = tokenizer("smollm2");
  const ChatTemplate chat = chat_template("tests/fixtures/chat_templates/smollm2.jinja");
  const fs::path rows = data_fixtures / "alpaca_rows.jsonl";
  TempDir dir("ft_examples");
  CHECK(error_of([&] {
          ft::data::read_examples(dir / "missing.jsonl", &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("missing.jsonl: the dataset file does not exist") != std::string::npos);
  CHECK(error_of([&] {
          ft::data::read_examples(dir.path, &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("is a directory") != std::string::npos);
  write_bytes(dir / "blank.jsonl", "\n  \n\r\n");
  CHECK(error_of([&] {
          ft::data::read_examples(dir / "blank.jsonl", &tok, &chat, smollm2_chat, options("alpaca"));
        }).find("blank.jsonl: has no rows") != std::string::npos);
  CHECK(error_of([&] {
          ft::data::read_examples(rows, &tok, &chat, smollm2_chat, options("csv"));
        }).find("dataset format 'csv' is not known, allowed: alpaca, chat, text, guanaco, tokens") !=
        std::string::npos);
  ExampleOptions templated = options("alpaca");
  templated.response_template = "### Response:";
  CHECK(error_of([&] { ft::data::read_examples(rows, &tok, &chat, smollm2_chat, templated); })
            .find("response_template applies to text rows; format 'alpaca' marks its responses itself") !=
        std::string::npos);
  ExampleOptions instruction_only = options("text");
  instruction_only.instruction_template = "### Human:";
  CHECK(error_of([&] { ft::data::read_examples(rows, &tok, &chat, smollm2_chat, instruction_only); })
            .find("an instruction_template needs a response_template") != std::string::npos);
  CHECK(error_of([&] { ft::data::read_examples(rows, &tok, nullptr, smollm2_chat, options("chat")); })
            .find("chat rows are rendered through the model's chat template, and it has none") != std::string::npos);
  CHECK(error_of([&] {
          ft::data::read_examples(rows, &tok, &chat, smollm2_chat, options("alpaca", 4096, "ignore"));
        }).find("on_bad_row 'ignore' is not known, allowed: fail, skip") != std::string::npos);
  CHECK(error_of([&] {
          ft::data::read_examples(rows, &tok, &chat, smollm2_chat, options("alpaca", 1));
        }).find("max_seq_length 1 is too small") != std::string::npos);
  CHECK(error_of([&] { ft::data::read_examples(rows, &tok, nullptr, {}, options("alpaca")); }).find("none is known") !=
        std::string::npos);
  CHECK(error_of([&] {
          ft::data::read_examples(rows, &tok, nullptr, specials(std::nullopt, "</s>"), options("alpaca"));
        }).find("eos_token '</s>' is not a token of the tokenizer") != std::string::npos);

  // A generation prompt that is not a prefix, without {% generation %} marks.
  const ChatTemplate unmarked = ChatTemplate::parse(
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}",
      "unmarked.jinja");
  for (const char* mode : {"fail", "skip"}) {
    const std::string msg =
        error_of([&] { ft::data::read_examples(rows, &tok, &unmarked, smollm2_chat, options("alpaca", 4096, mode)); });
    CHECK(msg.rfind(rows.string() + ":1: chat template unmarked.jinja: the prompt it renders", 0) == 0);
    CHECK(msg.find("{% generation %}") != std::string::npos);
  }
}

TEST_CASE("examples: the Stanford Alpaca prompt") {
  CHECK(ft::data::alpaca_prompt("Do X.", "") ==
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\nDo X.\n\n### Response:");
  CHECK(ft::data::alpaca_prompt("Do X.", "with Y") ==
        "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
        "response that appropriately completes the request.\n\n### Instruction:\nDo X.\n\n### Input:\nwith Y\n\n### "
        "Response:");
}

// ---------------------------------------------------------------------------
// Batches

namespace {

// Example i has tokens 1000 * (i + 1) + t (so every token says whose it is) and
// labels -100 over its first third.
std::vector<Example> synthetic(const std::vector<std::int64_t>& lengths) {
  std::vector<Example> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    Example e;
    e.line = std::int64_t(i + 1);
    for (std::int64_t t = 0; t < lengths[i]; ++t) {
      e.input_ids.push_back(std::int32_t(1000 * (i + 1) + std::size_t(t)));
      e.labels.push_back(t < lengths[i] / 3 ? -100 : e.input_ids.back());
    }
    out.push_back(std::move(e));
  }
  return out;
}

// Lengths from 1 to max, skewed short, from a small LCG (fixed here, so the test
// data never changes).
std::vector<std::int64_t> mixed_lengths(std::size_t n, std::int64_t max) {
  std::vector<std::int64_t> out;
  std::uint32_t x = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const double u = double(x >> 8) / double(1u << 24);
    out.push_back(1 + std::int64_t(u * u * double(max - 1)));
  }
  return out;
}

std::int64_t owner(std::int32_t token) { return token / 1000 - 1; }

constexpr std::int32_t pad = 7;

}  // namespace

TEST_CASE("batches: ft::Rng and epoch orders equal the reference") {
  const json ref = read_json(data_fixtures / "shuffle_expected.json");
  // Also splitmix64.c's published first outputs for seed 1234567.
  ft::Rng rng(ref["splitmix64"]["seed"].get<std::uint64_t>());
  for (const auto& v : ref["splitmix64"]["outputs"]) CHECK(rng.next() == std::stoull(v.get<std::string>()));
  for (const auto& o : ref["orders"])
    CHECK(epoch_order(o["n"], o["seed"].get<std::uint64_t>(), o["epoch"]) ==
          o["order"].get<std::vector<std::int64_t>>());
}

TEST_CASE("batches: padding, targets and an epoch as a permutation") {
  const auto lengths = mixed_lengths(40, 60);
  const auto examples = synthetic(lengths);
  const std::int64_t R = 4, max_T = 60;
  const BatchPlan plan(examples, R, max_T, false, pad, 99);
  REQUIRE(plan.batches_per_epoch() == 10.0);
  std::vector<std::int64_t> seen0, seen1;
  for (std::int64_t epoch : {0, 1}) {
    for (std::int64_t i = 0; i < 10; ++i) {
      const auto [index, rows, batch, dataset_tokens] = plan.micro_batch(epoch * 10 + i);
      CHECK(index == epoch * 10 + i);
      CHECK(batch.B == R);
      CHECK(batch.documents.empty());
      std::int64_t longest = 0, tokens = 0;
      for (std::int64_t b = 0; b < R; ++b) {
        const std::int64_t e = owner(batch.input_ids[std::size_t(b * batch.T)]);
        (epoch == 0 ? seen0 : seen1).push_back(e);
        longest = std::max(longest, lengths[std::size_t(e)]);
        tokens += lengths[std::size_t(e)];
      }
      CHECK(batch.T == std::min<std::int64_t>(max_T, (longest + 7) / 8 * 8));
      CHECK(dataset_tokens == tokens);
      for (std::int64_t b = 0; b < R; ++b) {
        const std::int64_t e = owner(batch.input_ids[std::size_t(b * batch.T)]);
        const Example& ex = examples[std::size_t(e)];
        const auto n = std::int64_t(ex.input_ids.size());
        for (std::int64_t t = 0; t < batch.T; ++t) {
          const auto k = std::size_t(b * batch.T + t);
          CHECK(batch.input_ids[k] == (t < n ? ex.input_ids[std::size_t(t)] : pad));
          CHECK(batch.targets[k] == (t + 1 < n ? ex.labels[std::size_t(t + 1)] : -100));
          CHECK(batch.positions[k] == t);
        }
      }
    }
  }
  auto sorted0 = seen0, sorted1 = seen1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  std::vector<std::int64_t> all(40);
  std::iota(all.begin(), all.end(), std::int64_t(0));
  CHECK(sorted0 == all);
  CHECK(sorted1 == all);
  CHECK(seen0 != seen1);

  // The same seed gives the same batches; another seed another order.
  const BatchPlan same(examples, R, max_T, false, pad, 99), other(examples, R, max_T, false, pad, 100);
  CHECK(same.batch(13).input_ids == plan.batch(13).input_ids);
  CHECK(same.order(0) == plan.order(0));
  CHECK(other.order(0) != plan.order(0));

  // 42 rows in batches of 4: batch 10 holds epoch 0's last two rows and
  // epoch 1's first two, so every row is seen once per epoch and no batch is
  // short. A cap below the rounded length.
  const BatchPlan odd(synthetic(mixed_lengths(42, 61)), R, 61, false, pad, 1);
  CHECK(odd.batches_per_epoch() == 10.5);
  std::vector<std::int64_t> stream;
  bool capped = false;
  for (const auto& m : odd.micro_batches() | std::views::take(21)) {  // two epochs
    CHECK(m.batch.B == R);
    CHECK((m.batch.T % 8 == 0 || m.batch.T == 61));
    capped |= m.batch.T == 61;
    for (std::int64_t b = 0; b < R; ++b) stream.push_back(owner(m.batch.input_ids[std::size_t(b * m.batch.T)]));
  }
  CHECK(capped);
  REQUIRE(stream.size() == 84);
  const auto epoch0 = odd.order(0), epoch1 = odd.order(1);
  CHECK(std::vector<std::int64_t>(stream.begin(), stream.begin() + 42) == epoch0);
  CHECK(std::vector<std::int64_t>(stream.begin() + 42, stream.end()) == epoch1);

  // Evaluation reads epoch 0 once; its last batch is short.
  const BatchPlan pass(synthetic(mixed_lengths(42, 61)), R, 61, false, pad, 1, ft::data::Cover::one_pass);
  CHECK(pass.pass_batches() == 11);
  std::vector<std::int64_t> once;
  for (const auto& m : pass.micro_batches())
    for (std::int64_t b = 0; b < m.batch.B; ++b) once.push_back(owner(m.batch.input_ids[std::size_t(b * m.batch.T)]));
  CHECK(pass.batch(10).B == 2);
  CHECK(once == epoch0);
  CHECK(error_of([&] { pass.batch(11); }).find("micro-batch 11 is past the evaluation pass") != std::string::npos);
}

TEST_CASE("batches: refusals") {
  const auto examples = synthetic({5, 6, 7});
  CHECK(error_of([&] {
          BatchPlan(examples, 4, 16, false, pad, 0);
        }).find("the dataset makes 3 rows, fewer than one batch of rows_per_batch 4") != std::string::npos);
  CHECK(error_of([&] {
          BatchPlan(examples, 1, 6, false, pad, 0);
        }).find("the example of line 3 has 7 tokens, allowed: 1 to max_seq_length (6)") != std::string::npos);
  CHECK(error_of([&] {
          BatchPlan(examples, 2, 18, true, pad, 0);
        }).find("the dataset makes 1 packed rows, fewer than one batch") != std::string::npos);
  CHECK(error_of([&] { BatchPlan(std::vector<Example>{}, 1, 16, false, pad, 0); }).find("no examples") != std::string::npos);
  auto broken = examples;
  broken[1].labels.pop_back();
  CHECK(error_of([&] { BatchPlan(broken, 1, 16, false, pad, 0); }).find("has 5 labels for 6 tokens") !=
        std::string::npos);
}

namespace {

// Best-fit decreasing the plain way: a linear scan over the bins for each item.
std::vector<std::vector<std::int64_t>> plain_best_fit(const std::vector<std::int64_t>& lengths, std::int64_t cap) {
  std::vector<std::int64_t> items(lengths.size());
  std::iota(items.begin(), items.end(), std::int64_t(0));
  std::stable_sort(items.begin(), items.end(),
                   [&](std::int64_t a, std::int64_t b) { return lengths[std::size_t(a)] > lengths[std::size_t(b)]; });
  std::vector<std::vector<std::int64_t>> bins;
  std::vector<std::int64_t> room;
  for (std::int64_t item : items) {
    std::int64_t best = -1;
    for (std::size_t b = 0; b < bins.size(); ++b)
      if (room[b] >= lengths[std::size_t(item)] && (best < 0 || room[b] < room[std::size_t(best)]))
        best = std::int64_t(b);
    if (best < 0) {
      best = std::int64_t(bins.size());
      bins.emplace_back();
      room.push_back(cap);
    }
    bins[std::size_t(best)].push_back(item);
    room[std::size_t(best)] -= lengths[std::size_t(item)];
  }
  return bins;
}

}  // namespace

TEST_CASE("batches: packing keeps every token once, in its own document, and beats padding") {
  const std::int64_t max_T = 64;
  const auto lengths = mixed_lengths(300, max_T);
  const auto examples = synthetic(lengths);
  const BatchPlan packed(examples, 1, max_T, true, pad, 5);
  CHECK(ft::data::pack_best_fit(lengths, max_T) == plain_best_fit(lengths, max_T));
  const std::int64_t total = std::accumulate(lengths.begin(), lengths.end(), std::int64_t(0));
  CHECK(packed.rows() >= (total + max_T - 1) / max_T);
  CHECK(packed.batches_per_epoch() == double(packed.rows()));

  std::vector<int> count(examples.size(), 0);
  std::int64_t packed_tokens = 0, packed_slots = 0;
  for (std::int64_t i = 0; i < packed.rows(); ++i) {
    const auto [index, rows, batch, dataset_tokens] = packed.micro_batch(2 * packed.rows() + i);  // epoch 2
    REQUIRE(batch.T == max_T);
    REQUIRE(batch.documents.size() == std::size_t(max_T));
    packed_tokens += dataset_tokens;
    packed_slots += batch.rows();
    std::set<std::int32_t> documents_seen;
    std::int64_t t = 0;
    while (t < max_T && batch.input_ids[std::size_t(t)] != pad) {
      const std::int64_t e = owner(batch.input_ids[std::size_t(t)]);
      const Example& ex = examples[std::size_t(e)];
      const auto n = std::int64_t(ex.input_ids.size());
      REQUIRE(t + n <= max_T);
      ++count[std::size_t(e)];
      const std::int32_t document = batch.documents[std::size_t(t)];
      CHECK(documents_seen.insert(document).second);  // a new id for every example of the row
      for (std::int64_t k = 0; k < n; ++k) {
        const auto at = std::size_t(t + k);
        CHECK(batch.input_ids[at] == ex.input_ids[std::size_t(k)]);
        CHECK(batch.documents[at] == document);
        CHECK(batch.positions[at] == k);
        CHECK(batch.targets[at] == (k + 1 < n ? ex.labels[std::size_t(k + 1)] : -100));
      }
      t += n;
    }
    // The tail: padding, one document of its own, never scored.
    if (t < max_T) CHECK(documents_seen.insert(batch.documents[std::size_t(t)]).second);
    for (; t < max_T; ++t) {
      CHECK(batch.input_ids[std::size_t(t)] == pad);
      CHECK(batch.targets[std::size_t(t)] == -100);
      CHECK(batch.documents[std::size_t(t)] == *documents_seen.rbegin());
    }
  }
  CHECK(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
  CHECK(packed_tokens == total);

  // With rows_per_batch 4, the same packed rows, shuffled per epoch.
  const BatchPlan packed4(examples, 4, max_T, true, pad, 5);
  CHECK(packed4.rows() == packed.rows());
  CHECK(packed4.order(0) != packed4.order(1));
  CHECK(packed4.batch(0).B == 4);

  const BatchPlan padded(examples, 4, max_T, false, pad, 5, ft::data::Cover::one_pass);
  std::int64_t padded_tokens = 0, padded_slots = 0;
  for (const auto& m : padded.micro_batches()) {
    padded_tokens += m.dataset_tokens;
    padded_slots += m.batch.rows();
  }
  CHECK(padded_tokens == total);
  const double packed_efficiency = double(packed_tokens) / double(packed_slots);
  const double padded_efficiency = double(padded_tokens) / double(padded_slots);
  MESSAGE("packing " << packed_efficiency << ", padding " << padded_efficiency);
  CHECK(packed_efficiency > padded_efficiency);
  CHECK(packed_efficiency > 0.9);
}

TEST_CASE("batches: data-parallel ranks see disjoint rows, together every row once per epoch") {
  const auto lengths = mixed_lengths(103, 32);
  const auto examples = synthetic(lengths);
  const std::int64_t R = 4, n = 103;
  for (const std::int64_t world : {1, 2, 3, 4}) {
    CAPTURE(world);
    // Two epochs' worth of steps; step g of rank r holds stream positions (g R + j) world + r.
    const auto steps = std::int64_t(std::ceil(2.0 * double(n) / double(R * world)));
    std::vector<std::int64_t> stream(std::size_t(steps * R * world), -1);
    std::vector<int> evaluated(examples.size(), 0);
    std::int64_t fewest = n, most = 0;
    for (std::int64_t rank = 0; rank < world; ++rank) {
      const BatchPlan plan(examples, R, 32, false, pad, 9, ft::data::Cover::epochs, 0, {rank, world});
      CHECK(plan.batches_per_epoch() == double(n) / double(R * world));
      for (const auto& m : plan.micro_batches() | std::views::take(steps)) {
        REQUIRE(m.batch.B == R);  // every rank, every step: a full batch
        for (std::int64_t j = 0; j < R; ++j)
          stream[std::size_t((m.index * R + j) * world + rank)] = owner(m.batch.input_ids[std::size_t(j * m.batch.T)]);
      }
      const BatchPlan eval(examples, R, 32, false, pad, 9, ft::data::Cover::one_pass, 0, {rank, world});
      fewest = std::min(fewest, eval.pass_batches());
      most = std::max(most, eval.pass_batches());
      for (const auto& m : eval.micro_batches())
        for (std::int64_t b = 0; b < m.batch.B; ++b) ++evaluated[std::size_t(owner(m.batch.input_ids[std::size_t(b * m.batch.T)]))];
    }
    const auto epoch0 = epoch_order(n, 9, 0), epoch1 = epoch_order(n, 9, 1);
    CHECK(std::vector<std::int64_t>(stream.begin(), stream.begin() + n) == epoch0);
    CHECK(std::vector<std::int64_t>(stream.begin() + n, stream.begin() + 2 * n) == epoch1);
    for (std::size_t p = std::size_t(2 * n); p < stream.size(); ++p) CHECK(stream[p] == epoch_order(n, 9, 2)[p - 2 * n]);
    CHECK(std::all_of(evaluated.begin(), evaluated.end(), [](int c) { return c == 1; }));
    CHECK(most - fewest <= 1);
  }
  CHECK_THROWS_WITH_AS(BatchPlan(examples, 4, 32, false, pad, 9, ft::data::Cover::epochs, 0, {2, 2}),
                       doctest::Contains("rank 2 of 2 is not allowed"), ft::Error);
  CHECK_THROWS_WITH_AS(BatchPlan(examples, 40, 32, false, pad, 9, ft::data::Cover::epochs, 0, {0, 4}),
                       doctest::Contains("103 rows, fewer than one batch of rows_per_batch 40 for each of 4 ranks"),
                       ft::Error);
}

TEST_CASE("artificial datasets: the layouts of ado's SFTTrainer actuator, the same rows for the same seed") {
  using ft::data::parse_artificial;
  REQUIRE(parse_artificial("news-chars-512-entries-4096"));
  CHECK(parse_artificial("news-chars-512-entries-4096")->length == 512);
  CHECK(parse_artificial("news-tokens-16384plus-entries-4096")->tokens);
  CHECK(parse_artificial("chars-8-entries-2"));
  CHECK(!parse_artificial("news-chars-0-entries-4"));
  CHECK(!parse_artificial("chars-8"));
  CHECK(!parse_artificial("Chars-8-entries-2"));
  // ado's size suffixes: k = 1024, m = 1024^2.
  REQUIRE(parse_artificial("news-tokens-128kplus-entries-320"));
  CHECK(parse_artificial("news-tokens-128kplus-entries-320")->length == 128 * 1024);
  CHECK(parse_artificial("news-tokens-128kplus-entries-320")->entries == 320);
  CHECK(parse_artificial("tokens-1m-entries-2k")->length == 1024 * 1024);
  CHECK(parse_artificial("tokens-1m-entries-2k")->entries == 2048);
  CHECK(!parse_artificial("tokens-8g-entries-2"));
  CHECK(!parse_artificial("tokens-8kk-entries-2"));

  const Tokenizer& tok = tokenizer("smollm2");
  ExampleOptions o = options("text");
  o.fields.text = "output";
  o.response_template = "\n### Response:";  // ado's settings
  const ft::data::ExampleBuilder builder(&tok, nullptr, smollm2_base, o);
  const Examples a = ft::data::artificial_examples("news-chars-64-entries-6", builder, tok.vocab_size(), 3);
  const Examples b = ft::data::artificial_examples("news-chars-64-entries-6", builder, tok.vocab_size(), 3);
  const Examples c = ft::data::artificial_examples("news-chars-64-entries-6", builder, tok.vocab_size(), 4);
  REQUIRE(a.rows.size() == 6);
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    CAPTURE(i);
    CHECK(a.rows[i].input_ids == b.rows[i].input_ids);
    CHECK(a.rows[i].input_ids != c.rows[i].input_ids);
    CHECK(a.rows[i].line == std::int64_t(i + 1));
    // 64 + 127 + 64 characters: decoding gives them back, and only the part after the template is scored.
    const std::string text = tok.decode(a.rows[i].input_ids, true);
    CHECK(text.size() == 64 + 127 + 64);
    const std::size_t response = text.find("\n### Response:") + 14;
    CHECK(response == 64 + 127);
    const auto first = std::find_if(a.rows[i].labels.begin(), a.rows[i].labels.end(), [](int l) { return l != -100; });
    REQUIRE(first != a.rows[i].labels.end());
    std::vector<std::int32_t> before(a.rows[i].input_ids.begin(),
                                     a.rows[i].input_ids.begin() + (first - a.rows[i].labels.begin()));
    CHECK(tok.decode(before, true).size() == response);
  }

  const ft::data::ExampleBuilder tokens(&tok, nullptr, smollm2_base, options("tokens", 4096));
  const Examples t = ft::data::artificial_examples("tokens-100plus-entries-3", tokens, tok.vocab_size(), 1);
  REQUIRE(t.rows.size() == 3);
  for (const Example& e : t.rows) {
    CHECK(e.input_ids.size() == 100);
    CHECK(e.labels == e.input_ids);
    CHECK(std::all_of(e.input_ids.begin(), e.input_ids.end(), [&](int id) { return id >= 0 && id < tok.vocab_size(); }));
  }
  CHECK_THROWS_WITH_AS(ft::data::artificial_examples("tokens-10-entries-3", builder, tok.vocab_size(), 1),
                       doctest::Contains("has token ids, which format \"text\" does not read"), ft::Error);
  CHECK_THROWS_WITH_AS(ft::data::artificial_examples("words-10-entries-3", builder, tok.vocab_size(), 1),
                       doctest::Contains("is not an artificial dataset name, allowed: artificial:"), ft::Error);
}

TEST_CASE("prepared cache: the mapped tokens are the examples, in order, and a split sends every k-th row") {
  TempDir dir("ft_prepared");
  ft::recipe::Recipe r;
  r.output_dir = (dir / "run").string();
  r.model.path = (root / "tests/fixtures/train/tiny_llama").string();
  r.data.train = (root / "tests/fixtures/train/jargon_small.jsonl").string();
  r.data.max_seq_length = 128;
  r.data.validation_split = 0.25;
  const ft::text::ModelText text = ft::text::ModelText::load(r.model.path);
  const ft::data::PreparedData first = ft::data::load_prepared(r, text);
  CHECK(!first.reused);
  CHECK(fs::exists(dir / "run/data-cache/metadata.json"));

  ExampleOptions o = options("alpaca", 128);
  const Examples all = ft::data::read_examples(r.data.train, text.tokenizer.get(), text.chat.get(), text.special, o);
  REQUIRE(first.train.size() + first.validation.size() == std::int64_t(all.rows.size()));
  std::int64_t t = 0, v = 0;
  for (std::size_t i = 0; i < all.rows.size(); ++i) {
    const bool validation = i % 4 == 3;
    const ft::data::TokenCorpus& c = validation ? first.validation : first.train;
    const std::int64_t k = validation ? v++ : t++;
    CAPTURE(i);
    CHECK(c.line(k) == all.rows[i].line);
    const auto ids = c.input_ids(k), labels = c.labels(k);
    CHECK(std::vector<std::int32_t>(ids.begin(), ids.end()) == all.rows[i].input_ids);
    CHECK(std::vector<std::int32_t>(labels.begin(), labels.end()) == all.rows[i].labels);
  }

  // The same recipe reuses it; another max_seq_length rebuilds it and says why.
  CHECK(ft::data::load_prepared(r, text).reused);
  r.data.max_seq_length = 100;
  const ft::data::PreparedData again = ft::data::load_prepared(r, text);
  CHECK(!again.reused);
  CHECK(again.rebuilt_because.find("was built for another max_seq_length") != std::string::npos);

  // A damaged cache is an error that says so, never silently used.
  fs::resize_file(dir / "run/data-cache/train/input_ids.bin", 12);
  CHECK(error_of([&] { ft::data::load_prepared(r, text); }).find("the cache is damaged") != std::string::npos);

  // A directory ft did not write is never replaced.
  fs::create_directories(dir / "mine");
  write_bytes(dir / "mine/notes.txt", "keep me");
  r.data.cache_dir = (dir / "mine").string();
  CHECK(error_of([&] { ft::data::load_prepared(r, text); }).find("is not an ft token cache") != std::string::npos);
  CHECK(fs::exists(dir / "mine/notes.txt"));
}

}  // namespace test_examples
