// Chat templates: every conversation of tests/fixtures/chat_templates renders
// byte for byte as transformers' apply_chat_template rendered it (or fails with
// the message transformers failed with), every engine case matches jinja2 in
// transformers' environment, and the engine's limits, errors and loaders behave
// as documented. Fixtures: tools/make_chat_template_fixtures.py.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/text/chat_template.hpp>
#include <ft/text/jinja/failure.hpp>

namespace test_chat_template {

namespace fs = std::filesystem;
using ft::text::ChatOptions;
using ft::text::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures/chat_templates";

json read_json(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in);
  return json::parse(in);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What ft::Error's message must end with for an exception transformers raised.
std::string expected_message(const json& c) { return ft::text::jinja::one_line(c["error"].get<std::string>()); }

std::string first_difference(const std::string& got, const std::string& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const auto around = [&](const std::string& s) {
    const std::size_t from = i < 40 ? 0 : i - 40;
    return ft::text::jinja::one_line(s.substr(from, 80));
  };
  return "byte " + std::to_string(i) + ": got [" + around(got) + "] want [" + around(want) + "]";
}

std::string render_source(const std::string& source, const json& context, const ft::text::jinja::Limits& limits = {}) {
  return ChatTemplate::parse(source, "t").render(context, limits);
}

std::string error_of(const std::string& source, const json& context = json::object(),
                     const ft::text::jinja::Limits& limits = {}) {
  try {
    render_source(source, context, limits);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A fresh directory per test, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter = 0;
    path = fs::temp_directory_path() / ("ft_chat_template_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

}  // namespace

TEST_CASE("chat templates render every conversation byte for byte as transformers does") {
  const json expected = read_json(fixtures / "expected.json");
  std::size_t rendered = 0, refused = 0;
  for (const json& c : expected["cases"]) {
    const std::string name = c["template"];
    const std::string conversation = c["conversation"];
    CAPTURE(name);
    CAPTURE(conversation);
    const bool add_generation_prompt = c["add_generation_prompt"];
    CAPTURE(add_generation_prompt);
    const ChatTemplate tmpl = ChatTemplate::parse(
        [&] {
          std::ifstream in(fixtures / (name + ".jinja"), std::ios::binary);
          return std::string(std::istreambuf_iterator<char>(in), {});
        }(),
        name + ".jinja");
    ChatOptions options = ChatOptions::from_tokenizer_config(expected["special_tokens"][name]);
    options.add_generation_prompt = add_generation_prompt;
    if (c.contains("tools")) options.tools = c["tools"];
    if (c.contains("variables"))
      for (const auto& [k, v] : c["variables"].items()) options.variables[k] = v;
    const json& messages = expected["conversations"][conversation];
    if (c.contains("expected")) {
      const std::string want = c["expected"];
      ft::text::jinja::Rendered got;
      try {
        got = ft::text::render_chat(tmpl, messages, options);
      } catch (const ft::Error& e) {
        FAIL_CHECK("unexpected error: " << e.what());
        continue;
      }
      if (got.text != want) FAIL_CHECK(first_difference(got.text, want));
      if (c.contains("generation_spans")) {
        std::vector<std::pair<std::size_t, std::size_t>> spans;
        for (const auto& s : c["generation_spans"]) spans.emplace_back(s[0], s[1]);
        CHECK(got.generation_spans == spans);
      }
      ++rendered;
    } else {
      std::string error = "(no error)";
      try {
        ft::text::apply_chat_template(tmpl, messages, options);
      } catch (const ft::Error& e) {
        error = e.what();
      }
      CAPTURE(error);
      CHECK(error.rfind(name + ".jinja:", 0) == 0);
      CHECK(ends_with(error, ": " + expected_message(c)));
      CHECK(error.find('\n') == std::string::npos);
      ++refused;
    }
  }
  MESSAGE(rendered << " renderings and " << refused << " refusals checked");
  CHECK(rendered > 400);
  CHECK(refused > 50);
}

TEST_CASE("engine cases match jinja2 as transformers configures it") {
  const json fixture = read_json(fixtures / "engine_cases.json");
  const json& context = fixture["context"];
  for (const json& c : fixture["cases"]) {
    const std::string source = c["template"];
    CAPTURE(source);
    std::string got, error;
    try {
      got = render_source(source, context);
    } catch (const ft::Error& e) {
      error = e.what();
    }
    CAPTURE(error);
    if (c.contains("expected")) {
      CHECK(error.empty());
      if (error.empty() && got != c["expected"].get<std::string>())
        FAIL_CHECK(first_difference(got, c["expected"].get<std::string>()));
      continue;
    }
    if (error.empty()) {
      FAIL_CHECK("rendered [" << got << "] where jinja2 failed with " << c["error"].get<std::string>());
      continue;
    }
    CHECK(error.find('\n') == std::string::npos);
    const std::string type = c["error_type"];
    if (type == "SyntaxError") {
      // Python's compiler refused jinja2's output ('break' outside a loop):
      // ft refuses the template itself, in its own words.
      CHECK(error.rfind("t:1:", 0) == 0);
    } else if (c.contains("line")) {
      // A syntax error: ft names the same line (and a column); jinja2's
      // wording is not reproduced, except for unknown filters and tests.
      CHECK(error.rfind("t:" + std::to_string(c["line"].get<int>()) + ":", 0) == 0);
      if (type == "TemplateAssertionError") CHECK(ends_with(error, ": " + expected_message(c)));
    } else {
      CHECK(error.rfind("t:", 0) == 0);
      CHECK(ends_with(error, ": " + expected_message(c)));
    }
  }
}

TEST_CASE("syntax errors are one line naming the origin, line and column") {
  CHECK(error_of("line1\n{{ 1 + }}") == "t:2:8: unexpected 'end of print statement'");
  CHECK(error_of("{% if true %}\nunclosed").rfind("t:2:9: unexpected end of template: the 'if' opened at line 1", 0) == 0);
  CHECK(error_of("{{ 'unterminated }}") == "t:1:4: unterminated string literal");
  CHECK(error_of("{# never closed") == "t:1:1: Missing end of comment tag");
  CHECK(error_of("a\n  {% nosuchtag %}").rfind("t:2:6: Encountered unknown tag 'nosuchtag'.", 0) == 0);
  CHECK(error_of("{% for x in l %}{% endif %}").find("Encountered unknown tag 'endif'.") != std::string::npos);
  CHECK(error_of("{{ 'a\\N{BULLET}' }}") == "t:1:4: \\N{...} escapes are not supported");
  CHECK(error_of("{{ 99999999999999999999 }}") == "t:1:4: integer literal does not fit in 64 bits");
  // A file's path is the origin.
  TempDir dir;
  dir.write("chat_template.jinja", "ok\n{% for %}");
  try {
    ChatTemplate::load(dir.path);
    FAIL("no error");
  } catch (const ft::Error& e) {
    CHECK(std::string(e.what()).rfind((dir.path / "chat_template.jinja").string() + ":2:8: ", 0) == 0);
  }
}

TEST_CASE("an unknown filter or test is an error naming it, when parsed unless inside an if") {
  CHECK(error_of("{{ 'x'|shout }}") == "t:1:8: No filter named 'shout'.");
  CHECK(error_of("{{ 1 is nice }}") == "t:1:6: No test named 'nice'.");
  CHECK(render_source("{% if false %}{{ 'x'|shout }}{% endif %}ok", json::object()) == "ok");
  CHECK(error_of("{% if true %}{{ 'x'|shout }}{% endif %}") == "t:1:21: No filter named 'shout' found.");
  // Known to jinja2 but not implemented by ft: refused when used, by name.
  CHECK(error_of("{{ [1]|random }}") == "t:1:8: the 'random' filter is not supported in chat templates by ft");
  CHECK(error_of("{{ 'x'|wordwrap }}").find("'wordwrap' filter is not supported") != std::string::npos);
  CHECK(error_of("{{ 'x'.encode() }}") == "t:1:14: str.encode() is not supported in chat templates");
  CHECK(error_of("{{ lipsum() }}").find("lipsum() is not supported") != std::string::npos);
  CHECK(error_of("{% include 'x.jinja' %}").find("'include' is not supported in chat templates") != std::string::npos);
}

TEST_CASE("raise_exception fails with the template's message, its origin and position") {
  const json context = {{"n", 5}};
  CHECK(error_of("{% if n > 3 %}\n  {{ raise_exception('n is ' ~ n) }}\n{% endif %}", context) == "t:2:21: n is 5");
  // Kept on one line.
  CHECK(error_of("{{ raise_exception('two\\nlines') }}") == "t:1:19: two\\nlines");
}

TEST_CASE("every rendering is bounded: steps, output, values, recursion and nesting") {
  ft::text::jinja::Limits small;
  small.max_steps = 1'000'000;
  small.max_output_bytes = 1 << 20;
  small.max_call_depth = 20;
  const json none = json::object();
  CHECK(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", none, small)
            .find("exceeded the limit of 1000000 steps") != std::string::npos);
  CHECK(error_of("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", none, small)
            .find("exceeded the limit of 1048576 bytes of output") != std::string::npos);
  CHECK(error_of("{{ 'x' * 100000000000 }}", none, small).find("would build a value of") != std::string::npos);
  CHECK(error_of("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 none, small)
            .find("would build a value of") != std::string::npos);
  CHECK(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", none, small)
            .find("macro calls nested deeper than 20") != std::string::npos);
  CHECK(error_of("{{ range(1000000) }}") == "t:1:9: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  CHECK(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow") != std::string::npos);
  CHECK(error_of("{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}{% endfor %}")
            .find("values nested deeper than 200 levels") != std::string::npos);
  CHECK(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nested deeper than 200") !=
        std::string::npos);
  std::string nested_ifs;
  for (int i = 0; i < 300; ++i) nested_ifs += "{% if true %}";
  CHECK(error_of(nested_ifs).find("nested deeper than 200") != std::string::npos);
  // Work hidden in printing, serialising, comparing and indexing is counted
  // too: values are shared, not copied, so printing is what would be large.
  CHECK(error_of("{% set l = ['x' * 100000] * 100 %}{{ l|length }}{{ l }}", none, small)
            .find("would build a value of more than 1048576 bytes") != std::string::npos);
  CHECK(error_of("{{ ([1] * 100000)|tojson(indent=100000) }}", none, small)
            .find("would build a value of more than 1048576 bytes") != std::string::npos);
  CHECK(error_of("{% set a = [1] * 100000 %}{% for i in range(100000) %}{% if a == a %}{% endif %}{% endfor %}", none,
                 small)
            .find("steps") != std::string::npos);
  CHECK(error_of("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}", none, small)
            .find("steps") != std::string::npos);
  CHECK(error_of("{% set s = 'ab' * 400000 %}{% for i in range(100000) %}{{ s.split('a')|length }}{% endfor %}", none,
                 small)
            .find("steps") != std::string::npos);
  // A namespace holding itself prints as Python prints it, without looping.
  CHECK(render_source("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", none) ==
        "<Namespace {'me': <Namespace {...}>}>");
}

TEST_CASE("key order: ordered_json keeps the written order, nlohmann::json sorts") {
  const ChatTemplate t = ChatTemplate::parse("{{ d|tojson }} {% for k in d %}{{ k }}{% endfor %}", "t");
  CHECK(t.render(json::parse(R"({"d": {"b": 1, "a": 2}})")) == R"({"b": 1, "a": 2} ba)");
  CHECK(t.render(nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})")) == R"({"a": 2, "b": 1} ab)");
  CHECK(error_of("{{ x }}", json::array()) == "t: the template context must be a JSON object");
}

TEST_CASE("apply_chat_template builds the context as transformers does") {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}{{ m|tojson }};{% endfor %}[{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|"
      "{{ bos_token }}|{{ eos_token }}|{{ date_string }}]",
      "context.jinja");
  ChatOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.variables = {{"eos_token", "<|end|>"}, {"date_string", "today"}};
  options.add_generation_prompt = true;
  const json messages = json::parse(R"([
    {"role": "user", "content": "hi", "name": null},
    {"role": "assistant", "content": "a", "reasoning": "r"},
    {"role": "assistant", "content": "b", "thinking": "t", "reasoning_content": "rc"}
  ])");
  CHECK(ft::text::apply_chat_template(t, messages, options) ==
        R"({"role": "user", "content": "hi"};)"
        R"({"thinking": "r", "role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "r"};)"
        R"({"thinking": "t", "role": "assistant", "content": "b", "reasoning_content": "rc"};)"
        "[None|None|True|<s>|<|end|>|today]");
  options.tools = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  CHECK(ft::text::apply_chat_template(t, json::parse(R"([{"role": "user", "content": "x"}])"), options)
            .find("[[{'type': 'function', 'function': {'name': 'f'}}]|None|") != std::string::npos);

  const auto refused = [&](const json& msgs, const ChatOptions& o = {}) {
    try {
      ft::text::apply_chat_template(t, msgs, o);
    } catch (const ft::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(refused(json::array()) ==
        "context.jinja: Cannot apply chat template to an empty conversation. Provide at least one message.");
  CHECK(refused(json::parse(R"(["hi"])")) == "context.jinja: message 0 must be a JSON object");
  CHECK(refused(json::object()) == "context.jinja: messages must be a JSON list of message objects");
  ChatOptions reserved;
  reserved.variables = {{"messages", 1}};
  CHECK(refused(json::parse(R"([{"role": "user"}])"), reserved).find("'messages' is set by apply_chat_template") !=
        std::string::npos);
  ChatOptions bad_documents;
  bad_documents.documents = json::parse(R"([1])");
  CHECK(refused(json::parse(R"([{"role": "user"}])"), bad_documents).find("Documents should be a list of dicts") !=
        std::string::npos);
}

TEST_CASE("templates load from a model directory as transformers finds them") {
  const json expected = read_json(fixtures / "expected.json");
  const json user_only = expected["conversations"]["user_only"];
  const auto render = [&](const ChatTemplate& t, const ChatOptions& o) { return ft::text::apply_chat_template(t, user_only, o); };
  // The fixture renders with tools only with the generation prompt.
  const auto want = [&](const std::string& name, bool tools) {
    for (const json& c : expected["cases"])
      if (c["template"] == name && c["conversation"] == "user_only" && c["add_generation_prompt"] == tools &&
          c.contains("tools") == tools)
        return c["expected"].get<std::string>();
    FAIL("no such case");
    return std::string();
  };
  for (const char* dir : {"tokenizer", "legacy_config"}) {
    CAPTURE(dir);
    const fs::path path = fixtures / dir;
    const ChatOptions options = ChatOptions::from_tokenizer_config(read_json(path / "tokenizer_config.json"));
    CHECK(options.eos_token == "<|im_end|>");
    CHECK(options.variables["pad_token"] == "<|endoftext|>");
    CHECK(render(ChatTemplate::load(path), options) == want("chatml", false));
    CHECK(render(ChatTemplate::load(path, "default", true), options) == want("chatml", false));
    ChatOptions with_tools = options;
    with_tools.add_generation_prompt = true;
    for (const json& c : expected["cases"])
      if (c.contains("tools")) with_tools.tools = c["tools"];
    CHECK(render(ChatTemplate::load(path, {}, true), with_tools) == want("qwen2_5", true));
    CHECK(render(ChatTemplate::load(path, "tool_use"), with_tools) == want("qwen2_5", true));
    try {
      ChatTemplate::load(path, "rag");
      FAIL("no error");
    } catch (const ft::Error& e) {
      CHECK(std::string(e.what()).find("has no chat template named 'rag' (it has 'default', 'tool_use')") !=
            std::string::npos);
    }
  }
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": {"__type": "AddedToken", "content": "<B>"},)"
            R"( "add_bos_token": true, "image_token": "<img>"})");
  const ChatOptions options = ChatOptions::from_tokenizer_config(read_json(dir.path / "tokenizer_config.json"));
  CHECK(options.bos_token == "<B>");
  CHECK(options.variables == json({{"image_token", "<img>"}}));
  CHECK(render(ChatTemplate::load(dir.path), options) == "<B>Hello!");
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "a", "template": "x"}, {"name": "b", "template": "y"}]})");
  try {
    ChatTemplate::load(dir.path);
    FAIL("no error");
  } catch (const ft::Error& e) {
    CHECK(std::string(e.what()).find("has several chat templates and none named 'default'; pick one of 'a', 'b'") !=
          std::string::npos);
  }
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  CHECK_THROWS_WITH_AS(ChatTemplate::load(dir.path), doctest::Contains("has no \"chat_template\""), ft::Error);
  dir.write("tokenizer_config.json", R"({"chat_template": )");
  CHECK_THROWS_WITH_AS(ChatTemplate::load(dir.path), doctest::Contains("not valid JSON"), ft::Error);
}

TEST_CASE("generation blocks report the byte range of the assistant text") {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
      "{% else %}{{ m.content }}{% endif %}{% endfor %}{% macro inner() %}{% generation %}no{% endgeneration %}{% endmacro %}"
      "{{ inner() }}",
      "t");
  const auto r = ft::text::render_chat(
      t, json::parse(R"([{"role": "user", "content": "é"}, {"role": "assistant", "content": "añb"}, {"role": "assistant", "content": ""}])"));
  CHECK(r.text == "<user>é<assistant>añb<assistant>no");
  // Byte offsets; only blocks rendered straight into the result are tracked.
  const std::vector<std::pair<std::size_t, std::size_t>> spans = {{19, 23}, {34, 34}};
  CHECK(r.generation_spans == spans);
}

TEST_CASE("text is UTF-8 for Python's code points, and other bytes pass through unchanged") {
  json context = {{"s", "h\xc3\xa9llo"}, {"bad", std::string("\xff\xfe" "ab", 4)}};
  CHECK(render_source("{{ s|length }} {{ s[1] }} {{ s[::-1] }} {{ s.upper() }} {{ s|tojson }}", context) ==
        "5 \xc3\xa9 oll\xc3\xa9h H\xc3\x89LLO \"h\xc3\xa9llo\"");
  CHECK(render_source("{{ bad|length }} {{ bad[1:] }} {{ bad[::-1] }}", context) == "4 \xfe" "ab ba\xfe\xff");
  CHECK(render_source("raw \xff bytes {{ '\xfe' }}", json::object()) == "raw \xff bytes \xfe");
}

TEST_CASE("strftime_now formats the local time") {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char year[8];
  std::strftime(year, sizeof year, "%Y", &local);
  CHECK(render_source("{{ strftime_now('%Y') }}|{{ strftime_now('') }}", json::object()) == std::string(year) + "|");
}

}  // namespace test_chat_template
