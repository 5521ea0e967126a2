#pragma once
// Rendering a parsed chat template: a tree walk over ast.hpp with jinja2's
// scoping, because templates depend on it:
//  - `set` assigns in the innermost scope; if statements do not open one;
//  - every iteration of a for loop runs in a fresh scope whose parent is the
//    scope around the loop, so `{% set x = ... %}` inside a loop is gone at
//    the next iteration and after the loop (templates use namespace() to
//    carry state out of a loop, and that works here as in jinja2);
//  - a macro sees the variables of the scope it was defined in as they are
//    when it is called, and its arguments; `varargs`, `kwargs` and `caller`
//    as jinja2 provides them; a {% call %} block becomes the `caller`;
//  - names not found in any scope are the render variables, then the
//    globals (globals.hpp), else an Undefined "'name' is undefined".
// Problems surface as ft::Error "<origin>:<line>:<col>: <message>", located at
// the innermost expression or statement where they arose; raise_exception's
// message is the template's own.
//
// A `{% generation %}` block (transformers' marker of assistant text) renders
// its body and records the byte range it produced, when it produces into the
// final text directly (not through a macro or a set block), which is when
// transformers' own tracking is exact too.
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/text/jinja/access.hpp"
#include "ft/text/jinja/ast.hpp"
#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/rendered.hpp"
#include "ft/text/jinja/call.hpp"
#include "ft/text/jinja/filters.hpp"
#include "ft/text/jinja/globals.hpp"
#include "ft/text/jinja/operators.hpp"
#include "ft/text/jinja/tests.hpp"

namespace ft::text::jinja {

// Nested evaluation (expressions within expressions, macro calls, blocks)
// is bounded so that the stack holds out whatever the template does.
inline constexpr std::size_t kMaxEvalDepth = 400;

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  bool captured = false;  // a macro or loop refers to it, so it is never recycled

  const Value* find(std::string_view name) const {
    for (const auto& [k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  void set(std::string_view name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }
};

class Renderer;

// A macro, or the body of a {% call %} block passed as `caller`.
class Macro : public Callable {
public:
  Macro(Renderer& renderer, const Stmt& definition, Scope* closure, std::string name)
      : renderer_(renderer), definition_(definition), closure_(closure), name_(std::move(name)) {}
  std::string type_name() const override { return "Macro"; }
  std::string description() const override { return "jinja2.runtime.Macro object"; }
  void repr(std::string& out, ReprState&) const override { out += "<Macro '" + name_ + "'>"; }
  std::optional<Value> attribute(std::string_view name) const override {
    if (name == "name") return Value::string(name_);
    return std::nullopt;
  }
  Value call(Arguments args) override;

  const Stmt& definition() const { return definition_; }
  Scope* closure() const { return closure_; }
  const std::string& name() const { return name_; }

private:
  Renderer& renderer_;
  const Stmt& definition_;
  Scope* closure_;
  std::string name_;
};

// jinja2's LoopContext: the `loop` variable of a for loop.
class Loop : public Callable {
public:
  Loop(Renderer& renderer, const Stmt& loop, Scope* outer, std::size_t depth, std::vector<Value> items)
      : renderer_(renderer), loop_(loop), outer_(outer), depth_(depth), items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string description() const override { return "jinja2.runtime.LoopContext object"; }
  void repr(std::string& out, ReprState&) const override {
    out += "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_.size()) + ">";
  }
  std::optional<Value> attribute(std::string_view name) const override {
    const auto n = std::int64_t(items_.size());
    const auto i = std::int64_t(index_);
    if (name == "index0") return Value::integer(i);
    if (name == "index") return Value::integer(i + 1);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i + 1 == n);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(std::int64_t(depth_));
    if (name == "depth0") return Value::integer(std::int64_t(depth_) - 1);
    if (name == "previtem") return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
    return std::nullopt;
  }
  bool has_method(std::string_view name) const override { return name == "cycle" || name == "changed"; }
  Value call_method(std::string_view name, const Arguments& args) override {
    if (!args.keywords.empty()) fail("loop." + std::string(name) + "() takes no keyword arguments");
    if (name == "cycle") {
      if (args.positional.empty()) fail("no items for cycling given");
      return args.positional[index_ % args.positional.size()];
    }
    const Value value = Value::list(args.positional, SequenceKind::tuple);
    if (last_changed_ && equals(*last_changed_, value)) return Value::boolean(false);
    last_changed_ = value;
    return Value::boolean(true);
  }
  Value call(Arguments args) override;

  const Value& item(std::size_t i) const { return items_[i]; }
  std::size_t size() const { return items_.size(); }
  void set_index(std::size_t i) { index_ = i; }

private:
  Renderer& renderer_;
  const Stmt& loop_;
  Scope* outer_;
  std::size_t depth_;
  std::vector<Value> items_;
  std::size_t index_ = 0;
  std::optional<Value> last_changed_;
};

class Renderer {
public:
  Renderer(const Template& t, const Limits& limits) : template_(t), budget_(limits), rt_{arena_, budget_} {}

  // `variables`: a dict of the names the template sees (messages, ...).
  Rendered render(const Value& variables) {
    ActiveBudget active(budget_);
    Scope& root = new_scope(nullptr);
    root.captured = true;
    for (const auto& [k, v] : variables.as_dict().entries) root.set(to_str(k), v);
    Scope& top = new_scope(&root);
    top.captured = true;
    Rendered result;
    top_output_ = &result.text;
    spans_ = &result.generation_spans;
    try {
      exec_body(template_.body, top, result.text);
    } catch (const Failure& f) {
      throw located_error(template_.origin, Location{}, f.message);
    }
    return result;
  }

  Value call_macro(const Macro& macro, Arguments args) {
    if (call_depth_ >= budget_.limits().max_call_depth)
      fail("macro calls nested deeper than " + std::to_string(budget_.limits().max_call_depth) + " (runaway recursion?)");
    struct CallDepth {
      std::size_t& depth;
      explicit CallDepth(std::size_t& d) : depth(d) { ++depth; }
      ~CallDepth() { --depth; }
    } call_depth(call_depth_);
    const Signature& sig = macro.definition().signature;
    const std::string& name = macro.name();
    ScopeLease lease(*this, macro.closure());
    Scope& scope = lease.scope;
    std::vector<bool> given(sig.params.size(), false);
    std::vector<Value> extra;
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
      if (i < sig.params.size()) {
        scope.set(sig.params[i], std::move(args.positional[i]));
        given[i] = true;
      } else if (sig.varargs) {
        extra.push_back(std::move(args.positional[i]));
      } else {
        fail("macro '" + name + "' takes not more than " + std::to_string(sig.params.size()) + " argument(s)");
      }
    }
    DictBuilder kwargs;
    std::optional<Value> caller;
    for (auto& [key, value] : args.keywords) {
      const auto it = std::find(sig.params.begin(), sig.params.end(), key);
      if (it != sig.params.end() && !given[std::size_t(it - sig.params.begin())]) {
        scope.set(key, std::move(value));
        given[std::size_t(it - sig.params.begin())] = true;
      } else if (key == "caller" && sig.caller) {
        caller = std::move(value);
      } else if (sig.kwargs) {
        kwargs.set(Value::string(key), std::move(value));
      } else {
        fail("macro '" + name + "' takes no keyword argument '" + key + "'");
      }
    }
    const std::size_t first_default = sig.params.size() - sig.defaults.size();
    for (std::size_t i = 0; i < sig.params.size(); ++i) {
      if (given[i]) continue;
      scope.set(sig.params[i], i >= first_default ? eval(*sig.defaults[i - first_default], scope)
                                                  : Value::undefined("parameter '" + sig.params[i] + "' was not provided"));
    }
    if (sig.varargs) scope.set("varargs", Value::list(std::move(extra), SequenceKind::tuple));
    if (sig.kwargs) scope.set("kwargs", kwargs.build());
    if (sig.caller) scope.set("caller", caller ? *caller : Value::undefined("No caller defined"));
    std::string out;
    exec_body(macro.definition().bodies[0], scope, out);
    return Value::string(std::move(out));
  }

  // A recursive loop's `loop(items)`: the loop body over new items, one level deeper.
  std::string recurse(const Stmt& loop, Scope& outer, std::size_t depth, const Value& iterable) {
    std::string out;
    run_loop(loop, loop_items(loop, iterable, outer), outer, depth + 1, out);
    return out;
  }

private:
  enum class Flow { normal, loop_break, loop_continue };

  // A scope for the duration of a block, recycled afterwards unless a macro
  // or loop object kept a reference to it.
  struct ScopeLease {
    Renderer& renderer;
    Scope& scope;
    ScopeLease(Renderer& r, Scope* parent) : renderer(r), scope(r.new_scope(parent)) {}
    ~ScopeLease() { renderer.release(scope); }
    ScopeLease(const ScopeLease&) = delete;
    ScopeLease& operator=(const ScopeLease&) = delete;
  };

  struct DepthGuard {
    std::size_t& depth;
    explicit DepthGuard(std::size_t& d) : depth(d) {
      if (++depth > kMaxEvalDepth) {
        --depth;
        fail("template evaluation nested deeper than " + std::to_string(kMaxEvalDepth) + " levels");
      }
    }
    ~DepthGuard() { --depth; }
  };

  Scope& new_scope(Scope* parent) {
    Scope* s;
    if (!free_scopes_.empty()) {
      s = free_scopes_.back();
      free_scopes_.pop_back();
    } else {
      s = &scopes_.emplace_back();
    }
    s->parent = parent;
    return *s;
  }

  void release(Scope& s) {
    if (s.captured) return;
    s.vars.clear();
    free_scopes_.push_back(&s);
  }

  // ---- output ---------------------------------------------------------------
  void emit(std::string& out, std::string_view text) {
    if (text.size() > budget_.limits().max_output_bytes - out.size())
      fail("rendering exceeded the limit of " + std::to_string(budget_.limits().max_output_bytes) + " bytes of output");
    budget_.step(text.size() / 64);
    out += text;
  }

  // ---- names ----------------------------------------------------------------
  Value lookup(const std::string& name, const Scope& scope) {
    for (const Scope* s = &scope; s; s = s->parent)
      if (const Value* v = s->find(name)) return *v;
    for (const auto& [k, v] : globals_)
      if (k == name) return v;
    if (auto g = make_global(name, rt_)) {
      globals_.emplace_back(name, *g);
      return *g;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const Expr& target, Value value, Scope& scope) {
    switch (target.kind) {
      case Expr::Kind::name: scope.set(target.name, std::move(value)); return;
      case Expr::Kind::ns_ref: {
        Namespace* ns = lookup(target.name, scope).object_as<Namespace>();
        if (!ns) fail("cannot assign attribute on non-namespace object");
        ns->set(target.attribute, std::move(value));
        return;
      }
      default: break;
    }
    if (!is_iterable(value)) fail("cannot unpack non-iterable " + type_name(value) + " object");
    const std::vector<Value> items = iterate(value);
    const std::size_t n = target.items.size();
    if (items.size() < n)
      fail("not enough values to unpack (expected " + std::to_string(n) + ", got " + std::to_string(items.size()) + ")");
    if (items.size() > n) fail("too many values to unpack (expected " + std::to_string(n) + ")");
    for (std::size_t i = 0; i < n; ++i) assign(*target.items[i], items[i], scope);
  }

  // ---- expressions ------------------------------------------------------------
  Value eval(const Expr& e, Scope& scope) {
    DepthGuard guard(depth_);
    budget_.step();
    try {
      return eval_node(e, scope);
    } catch (const Failure& f) {
      throw located_error(template_.origin, e.where, f.message);
    }
  }

  Arguments eval_args(const CallArgs& args, Scope& scope) {
    Arguments out;
    for (const auto& a : args.positional) out.positional.push_back(eval(*a, scope));
    for (const auto& [k, a] : args.keywords) out.keywords.emplace_back(k, eval(*a, scope));
    return out;
  }

  Value eval_node(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name, scope);
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        budget_.check_size(e.items.size());
        std::vector<Value> items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == Expr::Kind::list ? SequenceKind::list : SequenceKind::tuple);
      }
      case Expr::Kind::dict: {
        DictBuilder d;
        for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value key = eval(*e.items[i], scope);
          d.set(std::move(key), eval(*e.items[i + 1], scope));
        }
        return d.build();
      }
      case Expr::Kind::attribute: return get_attribute(eval(*e.items[0], scope), e.name, rt_);
      case Expr::Kind::subscript: {
        Value obj = eval(*e.items[0], scope);
        return get_item(obj, eval(*e.items[1], scope), rt_);
      }
      case Expr::Kind::slice: return eval_slice(e, scope);
      case Expr::Kind::call: return eval_call(e, scope);
      case Expr::Kind::filter: return eval_filter(e, scope, nullptr);
      case Expr::Kind::test: {
        Value v = eval(*e.items[0], scope);
        Arguments args = eval_args(e.args, scope);
        if (!test_exists(e.name)) fail("No test named '" + e.name + "' found.");
        return Value::boolean(apply_test(e.name, v, args, rt_));
      }
      case Expr::Kind::negative: return negate(eval(*e.items[0], scope));
      case Expr::Kind::positive: return positive(eval(*e.items[0], scope));
      case Expr::Kind::logical_not: return Value::boolean(!truthy(eval(*e.items[0], scope)));
      case Expr::Kind::binary: {
        Value a = eval(*e.items[0], scope);
        return arithmetic(e.name, a, eval(*e.items[1], scope), budget_);
      }
      case Expr::Kind::concat: {
        std::string s;
        for (const auto& item : e.items) {
          s += to_str(eval(*item, scope));
          budget_.check_size(s.size());
        }
        return Value::string(std::move(s));
      }
      case Expr::Kind::compare: return eval_compare(e, scope);
      case Expr::Kind::logical_and: {
        Value a = eval(*e.items[0], scope);
        return truthy(a) ? eval(*e.items[1], scope) : a;
      }
      case Expr::Kind::logical_or: {
        Value a = eval(*e.items[0], scope);
        return truthy(a) ? a : eval(*e.items[1], scope);
      }
      case Expr::Kind::conditional:
        if (truthy(eval(*e.items[1], scope))) return eval(*e.items[0], scope);
        if (e.items[2]) return eval(*e.items[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.where.line) +
                                " evaluated to false and no else section was defined.");
      case Expr::Kind::ns_ref: break;
    }
    fail("a namespace attribute reference can only be assigned to");
  }

  Value eval_slice(const Expr& e, Scope& scope) {
    Value obj = eval(*e.items[0], scope);
    Value parts[3];
    for (int i = 0; i < 3; ++i)
      if (e.items[std::size_t(i) + 1]) parts[i] = eval(*e.items[std::size_t(i) + 1], scope);
    return get_slice(obj, parts[0], parts[1], parts[2]);
  }

  Value eval_compare(const Expr& e, Scope& scope) {
    Value left = eval(*e.items[0], scope);
    for (std::size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.items[i + 1], scope);
      const std::string& op = e.ops[i];
      bool result;
      if (op == "in") {
        result = contains(right, left);
      } else if (op == "notin") {
        result = !contains(right, left);
      } else {
        result = compare(op, left, right);
      }
      if (!result) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  Value call_value(const Value& f, Arguments args) {
    if (f.is_undefined()) fail(f.undefined_message());
    if (auto* c = f.object_as<Callable>()) return c->call(std::move(args));
    fail("'" + type_name(f) + "' object is not callable");
  }

  Value eval_call(const Expr& e, Scope& scope, std::optional<Value> caller = std::nullopt) {
    const Expr& callee = *e.items[0];
    if (callee.kind == Expr::Kind::attribute) {
      // A method call on a str, dict or list runs directly, with no bound
      // method object in between.
      Value receiver = eval(*callee.items[0], scope);
      if (!receiver.is_object() && !receiver.is_undefined() && !is_dunder(callee.name) &&
          method_kind(receiver, callee.name) != MethodKind::none) {
        Arguments args = eval_args(e.args, scope);
        if (caller) args.keywords.emplace_back("caller", *caller);
        return call_method(receiver, callee.name, args, budget_);
      }
      Value f = get_attribute(receiver, callee.name, rt_);
      Arguments args = eval_args(e.args, scope);
      if (caller) args.keywords.emplace_back("caller", *caller);
      return call_value(f, std::move(args));
    }
    Value f = eval(callee, scope);
    Arguments args = eval_args(e.args, scope);
    if (caller) args.keywords.emplace_back("caller", *caller);
    return call_value(f, std::move(args));
  }

  // A filter expression; in a {% filter %} or {% set %} block the innermost
  // filter has no operand and takes `input`.
  Value eval_filter(const Expr& e, Scope& scope, const Value* input) {
    Value value;
    if (!e.items[0]) {
      value = *input;
    } else if (input) {
      value = eval_filter(*e.items[0], scope, input);
    } else {
      value = eval(*e.items[0], scope);
    }
    Arguments args = eval_args(e.args, scope);
    try {
      // A filter the parser let through (in an if) fails here, when used.
      if (!filter_exists(e.name)) fail("No filter named '" + e.name + "' found.");
      return apply_filter(e.name, value, args, rt_);
    } catch (const Failure& f) {
      throw located_error(template_.origin, e.where, f.message);
    }
  }

  // ---- statements ---------------------------------------------------------------
  Flow exec_body(const Body& body, Scope& scope, std::string& out) {
    for (const auto& s : body) {
      const Flow flow = exec(*s, scope, out);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, Scope& scope, std::string& out) {
    DepthGuard guard(depth_);
    budget_.step();
    try {
      return exec_node(s, scope, out);
    } catch (const Failure& f) {
      throw located_error(template_.origin, s.where, f.message);
    }
  }

  std::string render_block(const Body& body, Scope& scope) {
    ScopeLease lease(*this, &scope);
    std::string out;
    exec_body(body, lease.scope, out);
    return out;
  }

  Flow exec_node(const Stmt& s, Scope& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::text: emit(out, s.text); break;
      case Stmt::Kind::print: emit(out, to_str(eval(*s.value, scope))); break;
      case Stmt::Kind::if_chain:
        for (std::size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i], scope))) return exec_body(s.bodies[i], scope, out);
        if (s.bodies.size() > s.conditions.size()) return exec_body(s.bodies.back(), scope, out);
        break;
      case Stmt::Kind::for_loop: {
        Value iterable = eval(*s.value, scope);
        run_loop(s, loop_items(s, iterable, scope), scope, 1, out);
        break;
      }
      case Stmt::Kind::set: assign(*s.target, eval(*s.value, scope), scope); break;
      case Stmt::Kind::set_block: {
        Value text = Value::string(render_block(s.bodies[0], scope));
        assign(*s.target, s.value ? eval_filter(*s.value, scope, &text) : text, scope);
        break;
      }
      case Stmt::Kind::macro:
        scope.captured = true;
        scope.set(s.text, Value::object(arena_.make<Macro>(*this, s, &scope, s.text)));
        break;
      case Stmt::Kind::call_block: {
        scope.captured = true;
        const Value caller = Value::object(arena_.make<Macro>(*this, s, &scope, "caller"));
        emit(out, to_str(eval_call(*s.value, scope, caller)));
        break;
      }
      case Stmt::Kind::filter_block: {
        const Value text = Value::string(render_block(s.bodies[0], scope));
        emit(out, to_str(eval_filter(*s.value, scope, &text)));
        break;
      }
      case Stmt::Kind::with: {
        std::vector<Value> values;
        for (const auto& [target, value] : s.bindings) values.push_back(eval(*value, scope));
        ScopeLease lease(*this, &scope);
        for (std::size_t i = 0; i < values.size(); ++i) assign(*s.bindings[i].first, values[i], lease.scope);
        return exec_body(s.bodies[0], lease.scope, out);
      }
      case Stmt::Kind::generation: {
        const std::size_t begin = out.size();
        ScopeLease lease(*this, &scope);
        const Flow flow = exec_body(s.bodies[0], lease.scope, out);
        if (&out == top_output_) spans_->emplace_back(begin, out.size());
        return flow;
      }
      case Stmt::Kind::loop_break: return Flow::loop_break;
      case Stmt::Kind::loop_continue: return Flow::loop_continue;
    }
    return Flow::normal;
  }

  // The items a for loop runs over: those of `iterable` that pass its `if`.
  std::vector<Value> loop_items(const Stmt& loop, const Value& iterable, Scope& scope) {
    std::vector<Value> items = iterate(iterable);
    if (!loop.condition) return items;
    std::vector<Value> kept;
    for (Value& item : items) {
      ScopeLease lease(*this, &scope);
      assign(*loop.target, item, lease.scope);
      if (truthy(eval(*loop.condition, lease.scope))) kept.push_back(std::move(item));
    }
    return kept;
  }

  void run_loop(const Stmt& s, std::vector<Value> items, Scope& outer, std::size_t depth, std::string& out) {
    if (items.empty()) {
      ScopeLease lease(*this, &outer);
      exec_body(s.bodies[1], lease.scope, out);
      return;
    }
    if (s.recursive) outer.captured = true;
    Loop* loop = arena_.make<Loop>(*this, s, &outer, depth, std::move(items));
    for (std::size_t i = 0; i < loop->size(); ++i) {
      budget_.step();
      loop->set_index(i);
      ScopeLease lease(*this, &outer);
      lease.scope.set("loop", Value::object(loop));
      assign(*s.target, loop->item(i), lease.scope);
      if (exec_body(s.bodies[0], lease.scope, out) == Flow::loop_break) break;
    }
  }

  const Template& template_;
  Arena arena_;
  Budget budget_;
  Runtime rt_;
  std::deque<Scope> scopes_;
  std::vector<Scope*> free_scopes_;
  std::vector<std::pair<std::string, Value>> globals_;
  std::string* top_output_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>>* spans_ = nullptr;
  std::size_t depth_ = 0;
  std::size_t call_depth_ = 0;
};

inline Value Macro::call(Arguments args) { return renderer_.call_macro(*this, std::move(args)); }

inline Value Loop::call(Arguments args) {
  if (!loop_.recursive)
    fail("The loop must be recursive to be called: add the 'recursive' modifier to the for loop");
  const auto a = bind("loop", args, {"iterable"}, 1);
  return Value::string(renderer_.recurse(loop_, *outer_, depth_, *a[0]));
}

}  // namespace ft::text::jinja
