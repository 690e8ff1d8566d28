// The evaluator: walks the syntax tree of one template for one render. Scopes follow jinja2's: the
// template's top level (where the caller's variables live), one fresh scope per loop iteration, macro
// call, {% with %} and call block (so a `set` there is not seen after it), none for if and filter blocks.
// Scopes live until the render ends, so a macro may outlive the loop iteration that defined it.
#pragma once

#include <ctime>
#include <deque>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace ferry::text::jinja {

// An error with the template line it happened at (the first statement that saw it).
class LocatedError : public std::runtime_error {
 public:
  LocatedError(int line, const std::string& what) : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

class Evaluator {
 public:
  explicit Evaluator(std::tm now) : now_(now) {}

  // Renders `body` with `globals` (built-ins and the caller's variables) as the top-level scope.
  std::string render(const Body& body, std::unordered_map<std::string, Value> globals);

  Value eval(const Expr& e, Scope* scope);
  // A macro's body with its arguments bound, as text.
  Value call_macro(const Stmt& def, Scope* closure, CallArgs& args, const Value& caller);
  // One pass of a for loop over `items` (also the re-entry of a recursive loop at depth > 1). Returns true when
  // the else body ran a `break` or `continue`, which belongs to an enclosing loop.
  bool run_loop(const Stmt& s, Scope* scope, std::vector<Value> items, int depth, std::string& out,
                bool* else_continue = nullptr);
  Value apply_filter(const std::string& name, Value subject, CallArgs& args, int line);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

  Scope* new_scope(Scope* parent);
  const std::tm& now() const { return now_; }
  int& depth() { return depth_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Body& body, Scope* scope, std::string& out);
  Flow exec_stmt(const Stmt& s, Scope* scope, std::string& out);
  void assign(const Target& t, Value v, Scope* scope);
  Value eval_call(const Expr& e, Scope* scope);
  CallArgs eval_args(const Expr& e, Scope* scope, size_t first = 0);

  std::tm now_;
  std::deque<Scope> scopes_;
  int depth_ = 0;  // nested macro calls and recursive loops, capped to stop runaway recursion
};

// Attribute and item lookup with jinja2's fallbacks: obj.name tries the attribute (a method of a str,
// list or dict) before the item; obj[key] the item before the attribute. Missing: undefined; a lookup on
// undefined throws.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The method `name` of a string, list or dict bound to it, or undefined.
Value get_method(const Value& obj, const std::string& name);
// Arguments of a built-in: the i-th positional or the keyword `name`, else `fallback` (a copy).
Value arg(const CallArgs& a, size_t i, const char* name, const Value& fallback);
// Python's sort order for sort / dictsort / min / max (case-insensitive strings unless told).
bool sort_less(const Value& a, const Value& b, bool case_sensitive);

}  // namespace ferry::text::jinja
