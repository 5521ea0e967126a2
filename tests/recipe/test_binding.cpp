// The TOML binding: types, checks, unknown keys, overrides, and the exact
// shape of every error ("file:line:column: key: what; allowed: ...").
#include <doctest/doctest.h>

#include <ft/recipe/load.hpp>

namespace test_binding {

using namespace ft::recipe;

namespace {

struct Inner {
  std::int64_t count = 3;
  std::vector<std::string> names{"a"};
  NamedValues<std::int64_t> ranks;
  template <class V>
  void fields(V& v) {
    v.field("count", count, at_least<std::int64_t>(1), "how many");
    v.field("names", names, Check<std::vector<std::string>>{}, "which");
    v.field("ranks", ranks, patterns_of(at_least<std::int64_t>(1)), "by pattern");
  }
};

struct Outer {
  std::string mode = "fast";
  double rate = 0.5;
  bool flag = false;
  std::int32_t small = 1;
  Inner inner;
  template <class V>
  void fields(V& v) {
    v.field("mode", mode, one_of({"fast", "slow"}), "speed");
    v.field("rate", rate, between(0.0, 1.0), "a rate");
    v.field("flag", flag, Check<bool>{}, "a switch");
    v.field("small", small, Check<std::int32_t>{}, "fits 32 bits");
    v.section("inner", inner);
  }
};

Outer parse(const std::string& text, std::vector<std::string> sets = {}) {
  toml::table table = parse_toml(text, "r.toml");
  Overrides overrides;
  for (const auto& s : sets) apply_override(table, s, overrides);
  return from_table<Outer>(table, "r.toml", overrides);
}

std::string error_of(const std::string& text, std::vector<std::string> sets = {}) {
  try {
    parse(text, sets);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("defaults hold when keys are absent") {
  Outer o = parse("");
  CHECK(o.mode == "fast");
  CHECK(o.rate == 0.5);
  CHECK(o.inner.count == 3);
}

TEST_CASE("values of every supported type are read") {
  Outer o = parse("mode = 'slow'\nrate = 1\nflag = true\nsmall = -7\n[inner]\ncount = 9\nnames = 'x'\n");
  CHECK(o.mode == "slow");
  CHECK(o.rate == 1.0);
  CHECK(o.flag);
  CHECK(o.small == -7);
  CHECK(o.inner.count == 9);
  CHECK(o.inner.names == std::vector<std::string>{"x"});
  CHECK(parse("[inner]\nnames = ['p', 'q']").inner.names == std::vector<std::string>{"p", "q"});
  // A table, in its keys' order.
  CHECK(parse("[inner]\nranks = { 'q_proj' = 4, '.*\\.down' = 2 }").inner.ranks ==
        NamedValues<std::int64_t>{{".*\\.down", 2}, {"q_proj", 4}});
  CHECK(parse("[inner.ranks]\nv_proj = 8").inner.ranks == NamedValues<std::int64_t>{{"v_proj", 8}});
}

TEST_CASE("errors name file, line, column, key and what is allowed") {
  CHECK(error_of("mode = 'medium'") == "r.toml:1:8: mode: \"medium\" is not a choice; allowed: one of fast, slow");
  CHECK(error_of("\nrate = 2.5") == "r.toml:2:8: rate: 2.5 is out of range; allowed: a number from 0 to 1");
  CHECK(error_of("rate = 'x'") == "r.toml:1:8: rate: expected a number, got a string");
  CHECK(error_of("flag = 1") == "r.toml:1:8: flag: expected true or false, got an integer");
  CHECK(error_of("small = 9999999999") == "r.toml:1:9: small: 9999999999 does not fit the key's integer type");
  CHECK(error_of("[inner]\ncount = 0") == "r.toml:2:9: inner.count: 0 is too small; allowed: an integer >= 1");
  CHECK(error_of("[inner]\nnames = [1]") == "r.toml:2:10: inner.names: expected a list of strings, got an integer");
  CHECK(error_of("inner = 3") == "r.toml:1:9: inner: expected a table [inner], got an integer");
  CHECK(error_of("[inner]\nranks = 3") ==
        "r.toml:2:9: inner.ranks: expected a table of names to values, e.g. { \"q_proj\" = 16 }, got an integer");
  CHECK(error_of("[inner]\nranks = { q = 'x' }") == "r.toml:2:15: inner.ranks.q: expected an integer, got a string");
  CHECK(error_of("[inner]\nranks = { 'q(' = 1 }") ==
        "r.toml:2:9: inner.ranks: \"q(\" is not a regular expression; allowed: a table of regular expressions over "
        "module names to an integer >= 1");
  CHECK(error_of("[inner]\nranks = { q = 0 }").find("inner.ranks: \"q\": 0 is too small") != std::string::npos);
  CHECK(error_of("[inner]\nranks = { self_attn.q_proj = 4 }").find(
            "inner.ranks.self_attn: is a table; a name with dots is one key only when quoted") != std::string::npos);
}

TEST_CASE("unknown keys are refused with the allowed keys and the nearest spelling") {
  CHECK(error_of("mdoe = 'fast'") ==
        "r.toml:1:1: mdoe: unknown key (did you mean mode?); allowed in the top level: flag, inner, mode, rate, small");
  CHECK(error_of("[inner]\ncuont = 1") ==
        "r.toml:2:1: inner.cuont: unknown key (did you mean inner.count?); allowed in [inner]: count, names, ranks");
  CHECK(error_of("[elsewhere]\nx = 1") ==
        "r.toml:1:2: elsewhere: unknown key; allowed in the top level: flag, inner, mode, rate, small");
}

TEST_CASE("TOML syntax errors are located") {
  CHECK(error_of("mode = ") .rfind("r.toml:1:", 0) == 0);
  CHECK(error_of("mode = ").find("TOML syntax error") != std::string::npos);
}

TEST_CASE("--set overrides any key and is named in errors") {
  Outer o = parse("mode = 'slow'", {"mode=fast", "inner.count=12", "rate=0.25", "inner.names=[\"u\",\"v\"]"});
  CHECK(o.mode == "fast");
  CHECK(o.inner.count == 12);
  CHECK(o.rate == 0.25);
  CHECK(o.inner.names == std::vector<std::string>{"u", "v"});
  CHECK(parse("", {"inner.ranks={q_proj=3}"}).inner.ranks == NamedValues<std::int64_t>{{"q_proj", 3}});
  // Text that is not a TOML value is a string; a number typed for a string key is its text.
  CHECK(parse("", {"inner.names=q_proj"}).inner.names == std::vector<std::string>{"q_proj"});
  CHECK(error_of("", {"inner.count=zero"}) ==
        "command line (--set inner.count=zero): inner.count: expected an integer, got a string");
  CHECK(error_of("", {"inner.cout=1"}).rfind("command line (--set inner.cout=1): inner.cout: unknown key", 0) == 0);
  CHECK(error_of("", {"novalue"}) ==
        "command line (--set novalue): expected section.key=value, for example --set train.max_steps=10");
  CHECK(error_of("mode = 'slow'", {"mode.x=1"}) == "command line (--set mode.x=1): mode is a value, not a section");
}

TEST_CASE("emit writes documented TOML that reads back to the same values") {
  Outer o = parse("mode = 'slow'\nrate = 0.1\n[inner]\nnames = ['with \"quote\"', 'back\\\\slash']\n"
                  "ranks = { 'a\\.b' = 2, 'c' = 5 }");
  std::string text = emit(o);
  CHECK(text.find("mode = \"slow\"  # speed; one of fast, slow") != std::string::npos);
  CHECK(text.find("[inner]") != std::string::npos);
  Outer back = from_table<Outer>(parse_toml(text, "emitted"), "emitted");
  CHECK(back.mode == o.mode);
  CHECK(back.rate == o.rate);
  CHECK(back.inner.names == o.inner.names);
  CHECK(back.inner.ranks == o.inner.ranks);
  CHECK(text.find("ranks = { \"a\\\\.b\" = 2, \"c\" = 5 }") != std::string::npos);
  CHECK(emit(Outer{}).find("ranks = {}") != std::string::npos);
}

}  // namespace test_binding
