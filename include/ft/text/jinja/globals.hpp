#pragma once
// The names every chat template can use without being given them: jinja2's
// globals (range, dict, namespace, cycler, joiner; lipsum is refused) and
// the ones transformers adds: raise_exception(message), which aborts the
// rendering with the template's message, and strftime_now(format), the local
// time formatted by strftime. `namespace` is transformers' TemplateNamespace:
// a mutable object (`{% set ns.x = ... %}` changes it even from inside a
// loop, which plain variables cannot), refusing attribute names that start
// with an underscore. `range` is the sandbox's, limited to 100000 items; it
// returns a list (Python's range object prints differently, "range(0, 3)").
#include <algorithm>
#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/text/jinja/call.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

inline constexpr std::int64_t kMaxRange = 100000;

class Namespace : public Object {
public:
  std::string type_name() const override { return "TemplateNamespace"; }
  std::string description() const override { return "transformers.utils.chat_template_utils.TemplateNamespace object"; }
  void repr(std::string& out, ReprState& state) const override {
    out += "<Namespace ";
    if (std::find(state.active.begin(), state.active.end(), this) != state.active.end()) {
      out += "{...}>";
      return;
    }
    state.active.push_back(this);
    out += '{';
    for (std::size_t i = 0; i < attributes_.size(); ++i) {
      if (i > 0) out += ", ";
      repr_string(out, attributes_[i].first);
      out += ": ";
      jinja::repr(out, attributes_[i].second, state);
    }
    out += "}>";
    state.active.pop_back();
  }
  std::optional<Value> attribute(std::string_view name) const override {
    for (const auto& [k, v] : attributes_)
      if (k == name) return v;
    return std::nullopt;
  }
  void set(std::string_view name, Value value) {
    if (!name.empty() && name[0] == '_')
      fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + std::string(name) +
           "'. Please rename the attribute.");
    for (auto& [k, v] : attributes_) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    attributes_.emplace_back(std::string(name), std::move(value));
  }

private:
  std::vector<std::pair<std::string, Value>> attributes_;
};

// A function implemented in C++.
class Builtin : public Callable {
public:
  Builtin(std::string name, std::function<Value(const Arguments&)> body) : name_(std::move(name)), body_(std::move(body)) {}
  std::string type_name() const override { return "function"; }
  void repr(std::string& out, ReprState&) const override { out += "<function " + name_ + ">"; }
  Value call(Arguments args) override { return body_(args); }

private:
  std::string name_;
  std::function<Value(const Arguments&)> body_;
};

// jinja2's cycler(*items): .next() steps through the items, .current reads.
class Cycler : public Object {
public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {
    if (items_.empty()) fail("at least one item has to be provided");
  }
  std::string type_name() const override { return "Cycler"; }
  void repr(std::string& out, ReprState&) const override { out += "<Cycler>"; }
  std::optional<Value> attribute(std::string_view name) const override {
    if (name == "current") return items_[position_];
    if (name == "items") return Value::list(items_);
    return std::nullopt;
  }
  bool has_method(std::string_view name) const override { return name == "next" || name == "reset"; }
  Value call_method(std::string_view name, const Arguments& args) override {
    require_no_arguments("cycler." + std::string(name), args);
    if (name == "reset") {
      position_ = 0;
      return Value::none();
    }
    Value current = items_[position_];
    position_ = (position_ + 1) % items_.size();
    return current;
  }

private:
  std::vector<Value> items_;
  std::size_t position_ = 0;
};

// jinja2's joiner(sep): "" the first time it is called, sep afterwards.
class Joiner : public Callable {
public:
  explicit Joiner(std::string separator) : separator_(std::move(separator)) {}
  std::string type_name() const override { return "Joiner"; }
  void repr(std::string& out, ReprState&) const override { out += "<Joiner>"; }
  Value call(Arguments args) override {
    require_no_arguments("joiner", args);
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(separator_);
  }

private:
  std::string separator_;
  bool used_ = false;
};

// Python's dict(*args, **kwargs): a mapping or an iterable of pairs, then keywords.
inline Value make_dict(const Arguments& args) {
  if (args.positional.size() > 1)
    fail("dict expected at most 1 argument, got " + std::to_string(args.positional.size()));
  DictBuilder out;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      for (const auto& [k, v] : source.as_dict().entries) out.set(k, v);
    } else {
      std::size_t i = 0;
      for (const Value& pair : iterate(source)) {
        const std::vector<Value> kv = is_iterable(pair) ? iterate(pair) : std::vector<Value>{};
        if (kv.size() != 2)
          fail("dictionary update sequence element #" + std::to_string(i) + " has length " +
               std::to_string(kv.size()) + "; 2 is required");
        out.set(kv[0], kv[1]);
        ++i;
      }
    }
  }
  for (const auto& [k, v] : args.keywords) out.set(Value::string(k), v);
  return out.build();
}

inline Value make_range(const Arguments& args, Budget& budget) {
  if (!args.keywords.empty()) fail("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  const std::int64_t start = p.size() == 1 ? 0 : int_argument("range", p[0]);
  const std::int64_t stop = int_argument("range", p.size() == 1 ? p[0] : p[1]);
  const std::int64_t step = p.size() == 3 ? int_argument("range", p[2]) : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  std::int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) count = (start - stop - 1) / -step + 1;
  if (count > kMaxRange) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  budget.check_size(std::size_t(count));
  std::vector<Value> items;
  items.reserve(std::size_t(count));
  for (std::int64_t i = 0; i < count; ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

inline Value strftime_now(const Arguments& args) {
  const auto a = bind("strftime_now", args, {"format"}, 1);
  const std::string& format = string_argument("strftime_now", *a[0]);
  if (format.empty()) return Value::string("");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  // strftime reports a too-small buffer and an empty result alike; retry with
  // more room, up to a bound no sane format reaches.
  for (std::size_t size = 256; size <= (std::size_t(1) << 20); size *= 4) {
    std::string out(size, '\0');
    const std::size_t n = std::strftime(out.data(), size, format.c_str(), &local);
    if (n > 0) {
      out.resize(n);
      return Value::string(std::move(out));
    }
  }
  return Value::string("");
}

// The global `name`, created in `rt`'s arena, or nullopt if there is none.
inline std::optional<Value> make_global(std::string_view name, Runtime& rt) {
  const auto builtin = [&](std::function<Value(const Arguments&)> body) {
    return Value::object(rt.arena.make<Builtin>(std::string(name), std::move(body)));
  };
  if (name == "raise_exception") {
    return builtin([](const Arguments& args) -> Value {
      const auto a = bind("raise_exception", args, {"message"}, 1);
      fail(to_str(*a[0]));
    });
  }
  if (name == "strftime_now") return builtin(strftime_now);
  if (name == "range") return builtin([&budget = rt.budget](const Arguments& args) { return make_range(args, budget); });
  if (name == "dict") return builtin(make_dict);
  if (name == "namespace") {
    return builtin([&arena = rt.arena](const Arguments& args) {
      Namespace* ns = arena.make<Namespace>();
      const Value attributes = make_dict(args);
      for (const auto& [k, v] : attributes.as_dict().entries) {
        if (!k.is_string()) fail("namespace attribute names must be strings, not " + type_name(k));
        ns->set(k.as_string(), v);
      }
      return Value::object(ns);
    });
  }
  if (name == "cycler") {
    return builtin([&arena = rt.arena](const Arguments& args) {
      if (!args.keywords.empty()) fail("cycler() takes no keyword arguments");
      return Value::object(arena.make<Cycler>(args.positional));
    });
  }
  if (name == "joiner") {
    return builtin([&arena = rt.arena](const Arguments& args) {
      const auto a = bind("joiner", args, {"sep"});
      return Value::object(arena.make<Joiner>(a[0] ? to_str(*a[0]) : ", "));
    });
  }
  if (name == "lipsum") {
    return builtin([](const Arguments&) -> Value { fail("lipsum() is not supported in chat templates by ft"); });
  }
  return std::nullopt;
}

}  // namespace ft::text::jinja
