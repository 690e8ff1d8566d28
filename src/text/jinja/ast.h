// The syntax tree the parser builds and the evaluator walks. Nodes are immutable after parsing, so one
// parsed template can render on several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace ferry::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kList,     // items
  kTuple,    // items
  kDict,     // items: key, value, key, value, ...
  kAttr,     // a.name
  kItem,     // a[b]
  kSlice,    // a[items[0]:items[1]:items[2]] (null parts are absent)
  kCall,     // a(items..., kwargs..., *dyn_args, **dyn_kwargs)
  kFilter,   // a | name(items..., kwargs...); a is null inside {% filter %} and {% set x | f %}
  kTest,     // a is name(items..., kwargs...)
  kNot,      // not a
  kNeg,      // -a
  kPos,      // +a
  kBinary,   // a <name> b for + - * / // % ** and or
  kConcat,   // items joined with ~
  kCompare,  // a ops[0] items[0] ops[1] items[1] ... (chained like Python)
  kCond,     // b if a else c (c may be null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
};

// Where an assignment or a for loop stores: a name, names to unpack a sequence into, or ns.attr.
struct Target {
  std::vector<std::string> names;  // one name, or several for unpacking
  bool unpack = false;             // `a, b` (even with one name: `a,`)
  std::string attr;                // non-empty: names[0].attr on a namespace
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: none
};

enum class StmtKind : uint8_t {
  kOutput,       // text
  kPrint,        // {{ expr }}
  kIf,           // branches, else_body
  kFor,          // for target in expr [if cond] [recursive]: body, else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filters]: body endset
  kMacro,        // macro text(params): body
  kCallBlock,    // call(params) expr: body endcall   (body is the caller() macro)
  kFilterBlock,  // filter filters: body endfilter
  kWith,         // with assignments: body endwith
  kBreak,
  kContinue,
  kBlock,  // a body without a scope of its own ({% generation %} of Hugging Face's template tracker)
};

struct Stmt {
  StmtKind kind = StmtKind::kOutput;
  int line = 0;
  std::string text;  // kOutput: the text; kMacro: the name
  ExprPtr expr;
  ExprPtr cond;  // kFor: the `if` filter of items
  bool recursive = false;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (test, body) for if and each elif
  Body body, else_body;
  std::vector<Param> params;                        // kMacro, kCallBlock
  std::vector<ExprPtr> filters;                     // kSetBlock, kFilterBlock: kFilter nodes with a null subject
  std::vector<std::pair<Target, ExprPtr>> assigns;  // kWith
};

}  // namespace ferry::text::jinja
