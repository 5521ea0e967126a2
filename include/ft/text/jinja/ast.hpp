#pragma once
// The parsed form of a chat template: expressions and statements as the
// parser builds them and the renderer walks them. One struct per family with
// a kind tag, rather than a class per node, keeps the tree plain data; each
// kind uses the fields named in its comment and leaves the others empty.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ft/text/jinja/failure.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    ns_ref,       // name.attribute as an assignment target (namespace attribute)
    list,         // items
    tuple,        // items
    dict,         // items: key, value, key, value, ...
    attribute,    // items[0].name
    subscript,    // items[0][items[1]]
    slice,        // items[0][items[1]:items[2]:items[3]], each part may be null
    call,         // items[0](args)
    filter,       // items[0] | name(args); items[0] is null in a {% filter %} or {% set %} block
    test,         // items[0] is name(args)
    negative,     // -items[0]
    positive,     // +items[0]
    logical_not,  // not items[0]
    binary,       // items[0] <name> items[1], name one of + - * / // % **
    concat,       // items[0] ~ items[1] ~ ...
    compare,      // items[0] ops[0] items[1] ops[1] items[2] ..., ops: == != < <= > >= in notin
    logical_and,  // items[0] and items[1]
    logical_or,   // items[0] or items[1]
    conditional,  // items[0] if items[1] else items[2]; items[2] null without else
  };
  Kind kind;
  Location where;
  Value value;
  std::string name;
  std::string attribute;  // ns_ref
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  CallArgs args;

  Expr(Kind k, Location w) : kind(k), where(w) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A macro's or call block's parameters: the last defaults.size() of them
// have defaults. The flags say whether the body reads `varargs`, `kwargs` or
// `caller`, which jinja2 uses to decide whether extra arguments are allowed.
struct Signature {
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  bool varargs = false;
  bool kwargs = false;
  bool caller = false;
};

struct Stmt {
  enum class Kind {
    text,          // text
    print,         // value ({{ }} or {% print %})
    if_chain,      // conditions[i] -> bodies[i]; one more body is the else
    for_loop,      // for target in value if condition: bodies[0], else bodies[1]; recursive
    set,           // set target = value
    set_block,     // set target | value(filter, may be null) ... endset: bodies[0]
    macro,         // macro text(signature): bodies[0]
    call_block,    // call(signature) value: bodies[0] is the caller
    filter_block,  // filter value: bodies[0]
    with,          // with bindings: bodies[0]
    generation,    // generation: bodies[0] (transformers' assistant-span marker)
    loop_break,
    loop_continue,
  };
  Kind kind;
  Location where;
  std::string text;
  ExprPtr target;
  ExprPtr value;
  ExprPtr condition;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::pair<ExprPtr, ExprPtr>> bindings;
  Signature signature;
  bool recursive = false;

  Stmt(Kind k, Location w) : kind(k), where(w) {}
};

struct Template {
  std::string origin;
  Body body;
};

}  // namespace ft::text::jinja
