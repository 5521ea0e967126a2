#pragma once
// What `x.name`, `x[key]` and `x[a:b:c]` find, as jinja2's sandbox looks them
// up (transformers renders in ImmutableSandboxedEnvironment):
//  - `x.name` first looks for a Python attribute (a method such as
//    `content.strip`, a namespace's or the loop's attribute), then for the
//    item x['name']; `x['name']` first for the item, then the attribute;
//  - what is found in neither is an Undefined carrying jinja2's message
//    ("'dict object' has no attribute 'foo'", "list object has no element
//    5"), which prints as "" and fails only when used; so `message.missing`
//    is falsy and `message.missing is defined` is false, as in transformers;
//  - but a lookup on an Undefined itself fails at once ("'x' is undefined");
//  - a method that would mutate (list.append, dict.update) or a dunder
//    attribute is an Undefined with the sandbox's "is unsafe" message.
// Indexes and slices count code points on strings and accept negative
// indexes as Python does.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/methods.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

inline Value missing_attribute(const Value& obj, std::string_view name) {
  std::string message;
  repr_string(message, describe(obj));
  message += " has no attribute ";
  repr_string(message, name);
  return Value::undefined(std::move(message));
}

inline Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(describe(obj) + " has no element " + repr(key));
}

inline bool is_dunder(std::string_view name) {
  return name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__";
}

// The Python attribute `name` of `obj`, if it has one.
inline std::optional<Value> python_attribute(const Value& obj, std::string_view name, Runtime& rt) {
  if (obj.is_object()) {
    if (auto v = obj.as_object()->attribute(name)) return v;
    if (obj.as_object()->has_method(name))
      return Value::object(rt.arena.make<BoundMethod>(obj, std::string(name), rt.budget));
    return std::nullopt;
  }
  if (is_dunder(name) && !obj.is_undefined()) return Value::undefined(unsafe_message(obj, name));
  if (obj.is_number()) {
    if (name == "real") return obj.is_float() ? obj : Value::integer(obj.as_int());
    if (name == "imag") return obj.is_float() ? Value::number(0.0) : Value::integer(0);
    if (obj.is_integral() && name == "numerator") return Value::integer(obj.as_int());
    if (obj.is_integral() && name == "denominator") return Value::integer(1);
  }
  switch (method_kind(obj, name)) {
    case MethodKind::none: return std::nullopt;
    case MethodKind::unsafe: return Value::undefined(unsafe_message(obj, name));
    case MethodKind::method: return Value::object(rt.arena.make<BoundMethod>(obj, std::string(name), rt.budget));
  }
  return std::nullopt;
}

// Python's obj[key] for an integer key on a str, list or tuple; nullopt when
// the index is out of range or the object is not indexable by integers.
inline std::optional<Value> indexed_item(const Value& obj, std::int64_t index) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    charge_bytes(s.size());
    const std::vector<std::size_t> at = unicode::offsets(s);
    const std::int64_t n = std::int64_t(at.size()) - 1;
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    return Value::string(s.substr(at[std::size_t(index)], at[std::size_t(index) + 1] - at[std::size_t(index)]));
  }
  if (obj.is_sequence() && (obj.as_sequence().kind == SequenceKind::list || obj.as_sequence().kind == SequenceKind::tuple)) {
    const auto& items = obj.as_sequence().items;
    const std::int64_t n = std::int64_t(items.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    return items[std::size_t(index)];
  }
  return std::nullopt;
}

// `obj.name`.
inline Value get_attribute(const Value& obj, std::string_view name, Runtime& rt) {
  require_defined(obj);
  if (auto attr = python_attribute(obj, name, rt)) return *attr;
  if (obj.is_dict())
    if (const Value* v = obj.as_dict().find(name)) return *v;
  return missing_attribute(obj, name);
}

// `obj[key]`.
inline Value get_item(const Value& obj, const Value& key, Runtime& rt) {
  require_defined(obj);
  if (obj.is_dict() && is_hashable(key)) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (key.is_integral()) {
    if (auto v = indexed_item(obj, key.as_int())) return *v;
  }
  if (!key.is_string()) return missing_element(obj, key);
  if (auto attr = python_attribute(obj, key.as_string(), rt)) return *attr;
  return missing_attribute(obj, key.as_string());
}

// Python's slice.indices(length): normalised start, stop and step.
struct SliceBounds {
  std::int64_t start, stop, step;
};

inline SliceBounds slice_bounds(std::int64_t length, const std::optional<std::int64_t>& start,
                                const std::optional<std::int64_t>& stop, const std::optional<std::int64_t>& step) {
  const std::int64_t s = step.value_or(1);
  if (s == 0) fail("slice step cannot be zero");
  const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t missing) {
    if (!v) return missing;
    std::int64_t i = *v;
    if (i < 0) {
      i += length;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= length) {
      i = s < 0 ? length - 1 : length;
    }
    return i;
  };
  return SliceBounds{clamp(start, s < 0 ? length - 1 : 0), clamp(stop, s < 0 ? -1 : length), s};
}

template <class Pick>
void for_each_in_slice(const SliceBounds& b, Pick pick) {
  if (b.step > 0) {
    for (std::int64_t i = b.start; i < b.stop; i += b.step) pick(std::size_t(i));
  } else {
    for (std::int64_t i = b.start; i > b.stop; i += b.step) pick(std::size_t(i));
  }
}

// `obj[start:stop:step]`. jinja2 compiles slices to plain Python
// subscripts, outside the sandbox's lookup, so a bad slice is an error (not
// an Undefined) with Python's message.
inline Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  const bool sequence = obj.is_sequence() && (obj.as_sequence().kind == SequenceKind::list ||
                                              obj.as_sequence().kind == SequenceKind::tuple);
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  if (!obj.is_string() && !sequence) fail("'" + type_name(obj) + "' object is not subscriptable");
  std::optional<std::int64_t> parts[3];
  const Value* given[3] = {&start, &stop, &step};
  for (int i = 0; i < 3; ++i) {
    if (given[i]->is_integral()) {
      parts[i] = given[i]->as_int();
    } else if (!given[i]->is_none()) {
      fail("slice indices must be integers or None or have an __index__ method");
    }
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    charge_bytes(s.size());
    const std::vector<std::size_t> at = unicode::offsets(s);
    const SliceBounds b = slice_bounds(std::int64_t(at.size()) - 1, parts[0], parts[1], parts[2]);
    if (b.step == 1) return Value::string(b.start < b.stop ? s.substr(at[b.start], at[b.stop] - at[b.start]) : "");
    std::string out;
    for_each_in_slice(b, [&](std::size_t i) { out.append(s, at[i], at[i + 1] - at[i]); });
    return Value::string(std::move(out));
  }
  const auto& items = obj.as_sequence().items;
  const SliceBounds b = slice_bounds(std::int64_t(items.size()), parts[0], parts[1], parts[2]);
  std::vector<Value> out;
  for_each_in_slice(b, [&](std::size_t i) { out.push_back(items[i]); });
  return Value::list(std::move(out), obj.as_sequence().kind);
}

}  // namespace ft::text::jinja
