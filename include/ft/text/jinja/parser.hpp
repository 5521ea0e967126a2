#pragma once
// Parsing chat-template tokens into the tree of ast.hpp, by jinja2's grammar
// (its precedence, from loosest: `x if c else y`, or, and, not, comparisons
// and `in`, + -, ~, * / // %, **, unary - +, then filters `|f`, tests `is t`,
// calls, `.attr` and `[index]` on a primary). The statements are the ones
// transformers' environment knows: for (with else, a filtering `if` and
// `recursive`), if/elif/else, set (also `ns.attr = ...` and `set x %}...
// {% endset`), macro, call, filter, with, print, break/continue (the
// loopcontrols extension) and generation (transformers' assistant marker).
// Template inheritance and inclusion (extends, block, include, import) need
// a loader that a chat template does not have and are refused.
//
// An unknown filter or test is an error when the template is parsed, as in
// jinja2, unless it sits in an if statement or an inline if, whose branch
// may never run; there jinja2 (and ft) fail only if it is evaluated.
//
// Nesting is bounded (kMaxParseDepth) so that no source, however
// adversarial, can exhaust the stack. Errors are one line with origin, line
// and column.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/text/jinja/ast.hpp"
#include "ft/text/jinja/builtin_names.hpp"
#include "ft/text/jinja/lexer.hpp"

namespace ft::text::jinja {

inline constexpr std::size_t kMaxParseDepth = 200;

class Parser {
public:
  Parser(std::vector<Token> tokens, std::string origin) : tokens_(std::move(tokens)), origin_(std::move(origin)) {}

  Template parse() {
    Template t;
    t.origin = origin_;
    t.body = subparse({});
    check_names(t.body, false);
    return t;
  }

private:
  using Names = std::initializer_list<std::string_view>;

  // ---- token stream -------------------------------------------------------
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  static bool is_name(const Token& t, std::string_view name) { return t.type == TokenType::name && t.text == name; }
  static bool is_op(const Token& t, std::string_view op) { return t.type == TokenType::op && t.text == op; }
  bool skip_name(std::string_view name) {
    if (!is_name(current(), name)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(current(), op)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::data: return "template data / text";
      case TokenType::variable_begin: return "begin of print statement";
      case TokenType::variable_end: return "end of print statement";
      case TokenType::block_begin: return "begin of statement block";
      case TokenType::block_end: return "end of statement block";
      case TokenType::name:
      case TokenType::op: return t.text;
      case TokenType::string: return "string";
      case TokenType::integer: return "integer";
      case TokenType::number: return "float";
      case TokenType::eof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void error(Location where, std::string_view message) const {
    throw located_error(origin_, where, message);
  }
  [[noreturn]] void unexpected(std::string_view expected) const {
    if (current().type == TokenType::eof)
      error(current().where, "unexpected end of template, expected '" + std::string(expected) + "'");
    error(current().where, "expected '" + std::string(expected) + "', got '" + describe(current()) + "'");
  }
  void expect(TokenType type, std::string_view description) {
    if (current().type != type) unexpected(description);
    next();
  }
  void expect_op(std::string_view op) {
    if (!is_op(current(), op)) unexpected(op);
    next();
  }
  void expect_name(std::string_view name) {
    if (!is_name(current(), name)) unexpected(name);
    next();
  }
  const Token& expect_identifier() {
    if (current().type != TokenType::name) unexpected("name");
    return next();
  }

  // Counts recursion into nested expressions and blocks.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth)
        p.error(p.current().where, "template nested deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
  };

  static ExprPtr make(Expr::Kind kind, Location where) { return std::make_unique<Expr>(kind, where); }
  static ExprPtr make(Expr::Kind kind, Location where, ExprPtr a) {
    auto e = make(kind, where);
    e->items.push_back(std::move(a));
    return e;
  }
  static ExprPtr make(Expr::Kind kind, Location where, ExprPtr a, ExprPtr b) {
    auto e = make(kind, where, std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  // ---- statements -----------------------------------------------------------
  struct OpenTag {
    std::string name;
    Location where;
    std::vector<std::string_view> ends;
  };

  Body subparse(std::vector<std::string_view> ends) {
    Body body;
    while (current().type != TokenType::eof) {
      const Token& t = current();
      if (t.type == TokenType::data) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::text, t.where);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::variable_begin) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::print, t.where);
        next();
        s->value = parse_tuple(false, true, {}, false, false);
        expect(TokenType::variable_end, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::block_begin) {
        next();
        if (current().type == TokenType::name &&
            std::find(ends.begin(), ends.end(), std::string_view(current().text)) != ends.end())
          return body;
        parse_statement(body);
        expect(TokenType::block_end, "end of statement block");
      } else {
        unexpected("template data");
      }
    }
    return body;
  }

  // After a statement's header: its body up to one of `ends`. The end tag's
  // name is left as the current token unless `drop_end`.
  Body parse_statements(Names ends, bool drop_end = false) {
    skip_op(":");
    expect(TokenType::block_end, "end of statement block");
    open_tags_.back().ends.assign(ends.begin(), ends.end());
    Body body = subparse(std::vector<std::string_view>(ends));
    if (current().type == TokenType::eof) {
      const OpenTag& tag = open_tags_.back();
      error(current().where, "unexpected end of template: the '" + tag.name + "' opened at line " +
                                 std::to_string(tag.where.line) + " needs " + alternatives(tag.ends));
    }
    if (drop_end) next();
    return body;
  }

  static std::string alternatives(const std::vector<std::string_view>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out += " or ";
      out += "'" + std::string(names[i]) + "'";
    }
    return out;
  }

  void parse_statement(Body& body) {
    DepthGuard guard(*this);
    const Token& tag = current();
    if (tag.type != TokenType::name) error(tag.where, "tag name expected, got '" + describe(tag) + "'");
    const std::string name = tag.text;
    const Location where = tag.where;
    static constexpr std::string_view unsupported[] = {"block", "extends", "include", "import", "from", "autoescape"};
    if (std::find(std::begin(unsupported), std::end(unsupported), name) != std::end(unsupported))
      error(where, "'" + name + "' is not supported in chat templates: no loader for this environment specified");
    open_tags_.push_back(OpenTag{name, where, {}});
    StmtPtr s;
    if (name == "for") {
      s = parse_for();
    } else if (name == "if") {
      s = parse_if();
    } else if (name == "set") {
      s = parse_set();
    } else if (name == "macro") {
      s = parse_macro();
    } else if (name == "call") {
      s = parse_call_block();
    } else if (name == "filter") {
      s = parse_filter_block();
    } else if (name == "with") {
      s = parse_with();
    } else if (name == "generation") {
      next();
      s = std::make_unique<Stmt>(Stmt::Kind::generation, where);
      s->bodies.push_back(parse_statements({"endgeneration"}, true));
    } else if (name == "print") {
      next();
      for (bool first = true; current().type != TokenType::block_end; first = false) {
        if (!first) expect_op(",");
        auto p = std::make_unique<Stmt>(Stmt::Kind::print, where);
        p->value = parse_expression();
        body.push_back(std::move(p));
      }
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(where, "'" + name + "' outside loop");
      next();
      s = std::make_unique<Stmt>(name == "break" ? Stmt::Kind::loop_break : Stmt::Kind::loop_continue, where);
    } else {
      open_tags_.pop_back();
      unknown_tag(name, where);
    }
    open_tags_.pop_back();
    if (s) body.push_back(std::move(s));
  }

  [[noreturn]] void unknown_tag(const std::string& name, Location where) const {
    std::string message = "Encountered unknown tag '" + name + "'.";
    if (!open_tags_.empty()) {
      const OpenTag& tag = open_tags_.back();
      message += " The innermost block that needs to be closed is '" + tag.name + "' (line " +
                 std::to_string(tag.where.line) + "), looking for " + alternatives(tag.ends) + ".";
    }
    error(where, message);
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::for_loop, next().where);
    s->target = parse_assign_target(true, {"in"}, false);
    expect_name("in");
    s->value = parse_tuple(false, false, {"recursive"}, false, false);
    if (skip_name("if")) s->condition = parse_expression();
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->bodies.push_back(parse_statements({"endfor", "else"}));
    --loop_depth_;
    if (next().text == "endfor") {
      s->bodies.emplace_back();
    } else {
      s->bodies.push_back(parse_statements({"endfor"}, true));
    }
    return s;
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::if_chain, next().where);
    while (true) {
      s->conditions.push_back(parse_tuple(false, false, {}, false, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}));
      const Token& end = next();
      if (end.text == "elif") continue;
      if (end.text == "else") s->bodies.push_back(parse_statements({"endif"}, true));
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const Location where = next().where;
    ExprPtr target = parse_assign_target(true, {}, true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::set, where);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false, false);
      return s;
    }
    auto s = std::make_unique<Stmt>(Stmt::Kind::set_block, where);
    s->target = std::move(target);
    if (is_op(current(), "|")) s->value = parse_filter(nullptr, false);
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::macro, next().where);
    s->text = expect_identifier().text;
    const std::size_t saved_loops = std::exchange(loop_depth_, 0);
    parse_signature(s->signature);
    s->bodies.push_back(parse_statements({"endmacro"}, true));
    loop_depth_ = saved_loops;
    note_special_names(s->signature, s->bodies[0]);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::call_block, next().where);
    if (is_op(current(), "(")) parse_signature(s->signature);
    s->value = parse_expression();
    if (s->value->kind != Expr::Kind::call) error(s->where, "expected call");
    const std::size_t saved_loops = std::exchange(loop_depth_, 0);
    s->bodies.push_back(parse_statements({"endcall"}, true));
    loop_depth_ = saved_loops;
    note_special_names(s->signature, s->bodies[0]);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::filter_block, next().where);
    s->value = parse_filter(nullptr, true);
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::with, next().where);
    while (current().type != TokenType::block_end) {
      if (!s->bindings.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, {}, false);
      expect_op("=");
      s->bindings.emplace_back(std::move(target), parse_expression());
    }
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  void parse_signature(Signature& sig) {
    expect_op("(");
    while (!is_op(current(), ")")) {
      if (!sig.params.empty()) expect_op(",");
      sig.params.push_back(expect_identifier().text);
      if (skip_op("=")) {
        sig.defaults.push_back(parse_expression());
      } else if (!sig.defaults.empty()) {
        error(current().where, "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  // Whether the body reads varargs, kwargs or caller (jinja2 accepts extra
  // positional, keyword or caller arguments only then).
  static void note_special_names(Signature& sig, const Body& body) {
    for (const auto& s : body) note_special_names(sig, *s);
  }
  static void note_special_names(Signature& sig, const Stmt& s) {
    for (const Expr* e : {s.target.get(), s.value.get(), s.condition.get()}) note_special_names(sig, e);
    for (const auto& e : s.conditions) note_special_names(sig, e.get());
    for (const auto& [t, v] : s.bindings) note_special_names(sig, v.get());
    for (const auto& d : s.signature.defaults) note_special_names(sig, d.get());
    for (const auto& b : s.bodies) note_special_names(sig, b);
  }
  static void note_special_names(Signature& sig, const Expr* e) {
    if (!e) return;
    if (e->kind == Expr::Kind::name) {
      sig.varargs |= e->name == "varargs";
      sig.kwargs |= e->name == "kwargs";
      sig.caller |= e->name == "caller";
    }
    for (const auto& item : e->items) note_special_names(sig, item.get());
    for (const auto& a : e->args.positional) note_special_names(sig, a.get());
    for (const auto& [k, a] : e->args.keywords) note_special_names(sig, a.get());
  }

  // ---- assignment targets ---------------------------------------------------
  static bool can_assign(const Expr& e) {
    if (e.kind == Expr::Kind::name || e.kind == Expr::Kind::ns_ref) return true;
    if (e.kind != Expr::Kind::tuple) return false;
    return std::all_of(e.items.begin(), e.items.end(), [](const ExprPtr& i) { return can_assign(*i); });
  }

  ExprPtr parse_assign_target(bool with_tuple, Names extra_end, bool with_namespace) {
    const Location where = current().where;
    ExprPtr target = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                                : parse_primary(with_namespace);
    if (!can_assign(*target)) error(where, "can't assign to this expression");
    return target;
  }

  // ---- expressions ----------------------------------------------------------
  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  bool is_tuple_end(Names extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::variable_end || t.type == TokenType::block_end || is_op(t, ")")) return true;
    return std::any_of(extra_end.begin(), extra_end.end(), [&](std::string_view n) { return is_name(t, n); });
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, Names extra_end, bool explicit_parentheses,
                      bool with_namespace) {
    const Location where = current().where;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (!is_op(current(), ",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) error(current().where, "Expected an expression, got '" + describe(current()) + "'");
    }
    auto e = make(Expr::Kind::tuple, where);
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    while (is_name(current(), "if")) {
      const Location where = next().where;
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      expr = make(Expr::Kind::conditional, where, std::move(expr), std::move(test));
      expr->items.push_back(std::move(otherwise));
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name(current(), "or")) {
      const Location where = next().where;
      left = make(Expr::Kind::logical_or, where, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name(current(), "and")) {
      const Location where = next().where;
      left = make(Expr::Kind::logical_and, where, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(current(), "not")) {
      DepthGuard guard(*this);
      const Location where = next().where;
      return make(Expr::Kind::logical_not, where, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Location where = current().where;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& t = current();
      if (t.type == TokenType::op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" ||
                                      t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name(t, "in")) {
        op = "in";
        next();
      } else if (is_name(t, "not") && is_name(look(), "in")) {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) cmp = make(Expr::Kind::compare, where, std::move(first));
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_binary_chain(ExprPtr (Parser::*operand)(), std::initializer_list<std::string_view> ops) {
    ExprPtr left = (this->*operand)();
    while (current().type == TokenType::op &&
           std::find(ops.begin(), ops.end(), std::string_view(current().text)) != ops.end()) {
      const Token& t = next();
      auto e = make(Expr::Kind::binary, t.where, std::move(left), (this->*operand)());
      e->name = t.text;
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_math1() { return parse_binary_chain(&Parser::parse_concat, {"+", "-"}); }

  ExprPtr parse_concat() {
    const Location where = current().where;
    ExprPtr first = parse_math2();
    if (!is_op(current(), "~")) return first;
    auto e = make(Expr::Kind::concat, where, std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() { return parse_binary_chain(&Parser::parse_pow, {"*", "/", "//", "%"}); }
  ExprPtr parse_pow() { return parse_binary_chain(&Parser::parse_unary_filtered, {"**"}); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op(current(), "-") || is_op(current(), "+")) {
      const Token& t = next();
      node = make(t.text == "-" ? Expr::Kind::negative : Expr::Kind::positive, t.where, parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    DepthGuard guard(*this);
    const Token& t = current();
    const Location where = t.where;
    switch (t.type) {
      case TokenType::name: {
        next();
        auto e = make(Expr::Kind::literal, where);
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          e->value = Value::boolean(t.text == "true" || t.text == "True");
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else if (with_namespace && is_op(current(), ".")) {
          next();
          e->kind = Expr::Kind::ns_ref;
          e->name = t.text;
          e->attribute = expect_identifier().text;
        } else {
          e->kind = Expr::Kind::name;
          e->name = t.text;
        }
        return e;
      }
      case TokenType::string: {
        std::string text;
        while (current().type == TokenType::string) text += next().text;
        auto e = make(Expr::Kind::literal, where);
        e->value = Value::string(std::move(text));
        return e;
      }
      case TokenType::integer:
      case TokenType::number: {
        next();
        auto e = make(Expr::Kind::literal, where);
        e->value = t.type == TokenType::integer ? Value::integer(t.integer) : Value::number(t.number);
        return e;
      }
      case TokenType::op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true, false);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    if (t.type == TokenType::eof) error(where, "unexpected end of template");
    error(where, "unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_list() {
    auto e = make(Expr::Kind::list, next().where);
    while (!is_op(current(), "]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op(current(), "]")) break;
      e->items.push_back(parse_expression());
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(Expr::Kind::dict, next().where);
    while (!is_op(current(), "}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op(current(), "}")) break;
      e->items.push_back(parse_expression());
      expect_op(":");
      e->items.push_back(parse_expression());
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(current(), ".") || is_op(current(), "[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op(current(), "|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name(current(), "is")) {
        node = parse_test(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::name) {
        auto e = make(Expr::Kind::attribute, t.where, std::move(node));
        e->name = attr.text;
        return e;
      }
      if (attr.type != TokenType::integer) error(attr.where, "expected name or number");
      auto index = make(Expr::Kind::literal, attr.where);
      index->value = Value::integer(attr.integer);
      return make(Expr::Kind::subscript, t.where, std::move(node), std::move(index));
    }
    std::vector<ExprPtr> args;
    while (!is_op(current(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1 && args[0]->kind == Expr::Kind::slice) {
      args[0]->items[0] = std::move(node);
      return std::move(args[0]);
    }
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      index = make(Expr::Kind::tuple, t.where);
      for (auto& a : args) {
        if (a->kind == Expr::Kind::slice) error(a->where, "slices inside a tuple subscript are not supported");
        index->items.push_back(std::move(a));
      }
    }
    return make(Expr::Kind::subscript, t.where, std::move(node), std::move(index));
  }

  // An index or a slice `start:stop:step` (slice items[0] is filled in by
  // the caller with the sliced value).
  ExprPtr parse_subscribed() {
    const Location where = current().where;
    ExprPtr start;
    if (!is_op(current(), ":")) {
      start = parse_expression();
      if (!is_op(current(), ":")) return start;
    }
    next();  // the first ':'
    auto e = make(Expr::Kind::slice, where);
    e->items.resize(4);
    e->items[1] = std::move(start);
    const auto part_ends = [&] { return is_op(current(), "]") || is_op(current(), ",") || is_op(current(), ":"); };
    if (!part_ends()) e->items[2] = parse_expression();
    if (skip_op(":") && !is_op(current(), "]") && !is_op(current(), ",")) e->items[3] = parse_expression();
    return e;
  }

  CallArgs parse_call_args() {
    const Token& open = current();
    expect_op("(");
    CallArgs args;
    bool require_comma = false;
    while (!is_op(current(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(current(), ")")) break;
      }
      if (is_op(current(), "*") || is_op(current(), "**"))
        error(current().where, "argument unpacking (*args, **kwargs) is not supported in chat templates");
      if (current().type == TokenType::name && is_op(look(), "=")) {
        std::string key = next().text;
        next();
        args.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!args.keywords.empty()) error(open.where, "invalid syntax for function call expression");
        args.positional.push_back(parse_expression());
      }
      require_comma = true;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::call, current().where, std::move(node));
    e->args = parse_call_args();
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_identifier().text;
    while (skip_op(".")) name += "." + expect_identifier().text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op(current(), "|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Location where = current().where;
      auto e = make(Expr::Kind::filter, where, std::move(node));
      e->name = parse_dotted_name();
      if (is_op(current(), "(")) e->args = parse_call_args();
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Location where = next().where;
    const bool negated = skip_name("not");
    auto e = make(Expr::Kind::test, where, std::move(node));
    e->name = parse_dotted_name();
    const Token& t = current();
    if (is_op(t, "(")) {
      e->args = parse_call_args();
    } else if ((t.type == TokenType::name || t.type == TokenType::string || t.type == TokenType::integer ||
                t.type == TokenType::number || is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
      if (is_name(t, "is")) error(t.where, "You cannot chain multiple tests with is");
      e->args.positional.push_back(parse_postfix(parse_primary(false)));
    }
    return negated ? make(Expr::Kind::logical_not, where, std::move(e)) : std::move(e);
  }

  // ---- unknown filters and tests ---------------------------------------------
  // `soft` is jinja2's soft frame: directly inside an if statement or an
  // inline if; a loop, macro or block body is not soft again.
  void check_names(const Body& body, bool soft) const {
    for (const auto& s : body) check_names(*s, soft);
  }
  void check_names(const Stmt& s, bool soft) const {
    switch (s.kind) {
      case Stmt::Kind::if_chain:
        for (const auto& c : s.conditions) check_names(c.get(), true);
        for (const auto& b : s.bodies) check_names(b, true);
        return;
      case Stmt::Kind::print:
      case Stmt::Kind::set:
      case Stmt::Kind::for_loop:
      case Stmt::Kind::call_block:
        check_names(s.value.get(), soft);
        break;
      default: check_names(s.value.get(), false); break;
    }
    check_names(s.condition.get(), false);
    for (const auto& [target, value] : s.bindings) check_names(value.get(), soft);
    for (const auto& d : s.signature.defaults) check_names(d.get(), false);
    for (const auto& b : s.bodies) check_names(b, false);
  }
  void check_names(const Expr* e, bool soft) const {
    if (!e) return;
    if (e->kind == Expr::Kind::conditional) soft = true;
    if (!soft && e->kind == Expr::Kind::filter && !filter_exists(e->name))
      error(e->where, "No filter named '" + e->name + "'.");
    if (!soft && e->kind == Expr::Kind::test && !test_exists(e->name))
      error(e->where, "No test named '" + e->name + "'.");
    for (const auto& item : e->items) check_names(item.get(), soft);
    for (const auto& a : e->args.positional) check_names(a.get(), soft);
    for (const auto& [k, a] : e->args.keywords) check_names(a.get(), soft);
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  std::string origin_;
  std::size_t depth_ = 0;
  std::size_t loop_depth_ = 0;
  std::vector<OpenTag> open_tags_;
};

inline Template parse_template(std::string_view source, std::string origin) {
  std::vector<Token> tokens = tokenize(source, origin);
  return Parser(std::move(tokens), std::move(origin)).parse();
}

}  // namespace ft::text::jinja
