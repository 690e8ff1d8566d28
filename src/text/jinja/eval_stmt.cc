// Statements: output, if, for (with loop.*), set, macros and call blocks, filter blocks, with.
#include <string>

#include "text/jinja/eval.h"
#include "text/jinja/render.h"

namespace ferry::text::jinja {

namespace {

constexpr int kMaxDepth = 256;  // nested macro calls / recursive loops (Python's own limit is ~1000 frames)

class MacroObj : public Object {
 public:
  MacroObj(Evaluator* ev, const Stmt* def, Scope* closure, Value caller)
      : ev_(ev), def_(def), closure_(closure), caller_(std::move(caller)) {}
  bool callable() const override { return true; }
  Value call(CallArgs& args) const override { return ev_->call_macro(*def_, closure_, args, caller_); }
  Value attr(std::string_view name) const override {
    if (name == "name") return Value(def_->kind == StmtKind::kMacro ? def_->text : std::string("caller"));
    return Object::attr(name);
  }
  std::string repr() const override {
    return "<Macro '" + (def_->kind == StmtKind::kMacro ? def_->text : std::string("caller")) + "'>";
  }
  const Stmt* def() const { return def_; }
  Scope* closure() const { return closure_; }

 private:
  Evaluator* ev_;
  const Stmt* def_;
  Scope* closure_;
  Value caller_;
};

// The `loop` variable of a for loop: one object per loop, its position advanced by the loop.
class LoopObj : public Object, public std::enable_shared_from_this<LoopObj> {
 public:
  LoopObj(Evaluator* ev, const Stmt* stmt, Scope* scope, std::vector<Value> items, int depth)
      : ev_(ev), stmt_(stmt), scope_(scope), items_(std::move(items)), depth_(depth) {}

  size_t index = 0;

  bool callable() const override { return stmt_->recursive; }
  Value call(CallArgs& args) const override {
    if (!stmt_->recursive) return Object::call(args);
    if (args.args.size() != 1) throw RenderError("loop() takes exactly one argument");
    std::string out;
    ev_->run_loop(*stmt_, scope_, iterate(args.args[0]), depth_ + 1, out);
    return Value(std::move(out));
  }

  Value attr(std::string_view name) const override {
    const auto n = static_cast<int64_t>(items_.size());
    const auto i = static_cast<int64_t>(index);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(static_cast<int64_t>(depth_));
    if (name == "depth0") return Value(static_cast<int64_t>(depth_ - 1));
    if (name == "previtem") return i > 0 ? items_[index - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? items_[index + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const size_t at = index;
      return make_function("loop.cycle", [at](CallArgs& a) -> Value {
        if (a.args.empty()) throw RenderError("no items for cycling given");
        return a.args[at % a.args.size()];
      });
    }
    if (name == "changed") {
      auto self = shared_from_this();
      return make_function("loop.changed", [self](CallArgs& a) -> Value {
        Value now = Value::list(a.args);
        if (self->has_last_ && equals(self->last_changed_, now)) return Value(false);
        self->last_changed_ = now;
        self->has_last_ = true;
        return Value(true);
      });
    }
    return Object::attr(name);
  }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index + 1) + "/" + std::to_string(items_.size()) + ">";
  }

 private:
  Evaluator* ev_;
  const Stmt* stmt_;
  Scope* scope_;
  std::vector<Value> items_;
  int depth_;
  mutable Value last_changed_;
  mutable bool has_last_ = false;
};

struct DepthGuard {
  explicit DepthGuard(int& d) : d_(d) {
    if (++d_ > kMaxDepth) {
      --d_;
      throw RenderError("maximum recursion depth exceeded");
    }
  }
  ~DepthGuard() { --d_; }
  int& d_;
};

}  // namespace

Scope* Evaluator::new_scope(Scope* parent) {
  scopes_.emplace_back();
  scopes_.back().parent = parent;
  return &scopes_.back();
}

std::string Evaluator::render(const Body& body, std::unordered_map<std::string, Value> globals) {
  Scope* top = new_scope(nullptr);
  top->vars = std::move(globals);
  std::string out;
  exec(body, top, out);
  return out;
}

Evaluator::Flow Evaluator::exec(const Body& body, Scope* scope, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow f;
    try {
      f = exec_stmt(*s, scope, out);
      check_built_bytes(out.size(), "rendered text");
    } catch (const RenderError& e) {
      throw LocatedError(s->line, e.what());
    }
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Evaluator::assign(const Target& t, Value v, Scope* scope) {
  if (!t.attr.empty()) {
    const Value* ns = scope->find(t.names[0]);
    if (!ns || !ns->is_dict() || !ns->dict_ref().namespace_)
      throw RenderError("cannot assign attribute on non-namespace object");
    ns->dict_ref().set(Value(t.attr), std::move(v));
    return;
  }
  if (!t.unpack) {
    scope->vars[t.names[0]] = std::move(v);
    return;
  }
  std::vector<Value> parts = iterate(v);
  if (parts.size() != t.names.size())
    throw RenderError(parts.size() < t.names.size()
                          ? "not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                                std::to_string(parts.size()) + ")"
                          : "too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
  for (size_t i = 0; i < parts.size(); ++i) scope->vars[t.names[i]] = std::move(parts[i]);
}

bool Evaluator::run_loop(const Stmt& s, Scope* scope, std::vector<Value> items, int depth, std::string& out,
                         bool* else_continue) {
  DepthGuard guard(depth_);
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      Scope* probe = new_scope(scope);
      assign(s.target, item, probe);
      if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Flow f = exec(s.else_body, new_scope(scope), out);
    if (else_continue) *else_continue = f == Flow::kContinue;
    return f != Flow::kNormal;
  }
  auto loop = std::make_shared<LoopObj>(this, &s, scope, items, depth);
  const Value loop_value(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    loop->index = i;
    Scope* it = new_scope(scope);
    assign(s.target, items[i], it);
    it->vars["loop"] = loop_value;
    if (exec(s.body, it, out) == Flow::kBreak) break;
  }
  return false;
}

Value Evaluator::call_macro(const Stmt& def, Scope* closure, CallArgs& args, const Value& caller) {
  DepthGuard guard(depth_);
  Scope* s = new_scope(closure);
  size_t next_pos = 0;
  for (const Param& p : def.params) {
    const Value* given = nullptr;
    if (next_pos < args.args.size()) {
      given = &args.args[next_pos++];
    } else {
      for (const auto& [k, v] : args.kwargs)
        if (k == p.name) given = &v;
    }
    if (given)
      s->vars[p.name] = *given;
    else if (p.default_value)
      s->vars[p.name] = eval(*p.default_value, s);
    else
      s->vars[p.name] = Value::undefined("parameter '" + p.name + "' was not provided");
  }
  std::vector<Value> varargs(args.args.begin() + static_cast<std::ptrdiff_t>(next_pos), args.args.end());
  s->vars["varargs"] = Value::list(std::move(varargs), true);
  Value kwargs = Value::dict();
  for (const auto& [k, v] : args.kwargs) {
    bool is_param = false;
    for (const Param& p : def.params) is_param |= p.name == k;
    if (!is_param) kwargs.dict_ref().set(Value(k), v);
  }
  s->vars["kwargs"] = kwargs;
  if (!caller.is_undefined()) s->vars["caller"] = caller;
  std::string out;
  exec(def.body, s, out);
  return Value(std::move(out));
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, Scope* scope, std::string& out) {
  switch (s.kind) {
    case StmtKind::kOutput: out += s.text; return Flow::kNormal;
    case StmtKind::kPrint: out += py_str(eval(*s.expr, scope)); return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [test, body] : s.branches)
        if (eval(*test, scope).truthy()) return exec(body, scope, out);
      return exec(s.else_body, scope, out);
    case StmtKind::kFor: {
      Value seq = eval(*s.expr, scope);
      bool is_continue = false;
      if (run_loop(s, scope, iterate(seq), 1, out, &is_continue)) return is_continue ? Flow::kContinue : Flow::kBreak;
      return Flow::kNormal;
    }
    case StmtKind::kSet: assign(s.target, eval(*s.expr, scope), scope); return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string text;
      if (Flow f = exec(s.body, new_scope(scope), text); f != Flow::kNormal) return f;  // break / continue
      Value v(std::move(text));
      for (const ExprPtr& f : s.filters) {
        CallArgs a = eval_args(*f, scope);
        v = apply_filter(f->name, std::move(v), a, f->line);
      }
      assign(s.target, std::move(v), scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->vars[s.text] = Value(std::make_shared<MacroObj>(this, &s, scope, Value()));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      Value fn =
          call.a->kind == ExprKind::kAttr ? get_attr(eval(*call.a->a, scope), call.a->name) : eval(*call.a, scope);
      auto* macro = fn.is_object() ? dynamic_cast<MacroObj*>(fn.object().get()) : nullptr;
      if (!macro) throw RenderError("{% call %} needs a macro");
      Value caller(std::make_shared<MacroObj>(this, &s, scope, Value()));
      CallArgs a = eval_args(call, scope);
      out += py_str(call_macro(*macro->def(), macro->closure(), a, caller));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string text;
      if (Flow f = exec(s.body, scope, text); f != Flow::kNormal) return f;  // its text is dropped, as jinja2 does
      Value v(std::move(text));
      for (const ExprPtr& f : s.filters) {
        CallArgs a = eval_args(*f, scope);
        v = apply_filter(f->name, std::move(v), a, f->line);
      }
      out += py_str(v);
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      Scope* inner = new_scope(scope);
      for (const auto& [target, value] : s.assigns) assign(target, eval(*value, scope), inner);
      return exec(s.body, inner, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kBlock: exec(s.body, new_scope(scope), out); return Flow::kNormal;
  }
  return Flow::kNormal;
}

}  // namespace ferry::text::jinja
