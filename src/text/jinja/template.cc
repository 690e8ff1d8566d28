// Parsing with the compile-time checks jinja2 makes, the global functions, and rendering.
#include "text/jinja/template.h"

#include <vector>

#include "text/jinja/eval.h"
#include "text/jinja/filters.h"
#include "text/jinja/parser.h"
#include "text/jinja/render.h"

namespace ferry::text::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses longer ranges

// jinja2 refuses an unknown filter or test when it compiles the template, except inside an if statement or an
// inline if expression ("soft" frames; a loop, macro or block inside those is not soft again): there the error
// waits until the filter runs.
void check(const Expr* e, bool soft);

void check_all(const std::vector<ExprPtr>& v, bool soft) {
  for (const ExprPtr& e : v) check(e.get(), soft);
}

void check(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCond) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !filter_exists(e->name))
    throw SyntaxError(e->line, "No filter named '" + e->name + "'.");
  if (!soft && e->kind == ExprKind::kTest && !test_exists(e->name))
    throw SyntaxError(e->line, "No test named '" + e->name + "'.");
  check(e->a.get(), soft);
  check(e->b.get(), soft);
  check(e->c.get(), soft);
  check(e->dyn_args.get(), soft);
  check(e->dyn_kwargs.get(), soft);
  check_all(e->items, soft);
  for (const auto& kv : e->kwargs) check(kv.second.get(), soft);
}

void check_body(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const auto& [test, b] : s->branches) {
          check(test.get(), true);
          check_body(b, true);
        }
        check_body(s->else_body, true);
        break;
      case StmtKind::kFor:
        check(s->expr.get(), soft);
        check(s->cond.get(), false);
        check_body(s->body, false);
        check_body(s->else_body, false);
        break;
      case StmtKind::kCallBlock:
      case StmtKind::kWith:
        check(s->expr.get(), soft);
        for (const auto& a : s->assigns) check(a.second.get(), soft);
        check_body(s->body, false);
        break;
      default:
        check(s->expr.get(), soft);
        for (const Param& p : s->params) check(p.default_value.get(), false);
        check_all(s->filters, false);
        check_body(s->body, false);
        break;
    }
  }
}

const Value kUndef;

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  Value attr(std::string_view name) const override {
    if (name == "current") return items_[pos_];
    if (name == "next" || name == "reset") {
      auto self = this;
      bool next = name == "next";
      return make_function(std::string("cycler.") + std::string(name), [self, next](CallArgs&) -> Value {
        if (!next) {
          self->pos_ = 0;
          return Value::none();
        }
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    }
    return Object::attr(name);
  }
  std::string repr() const override { return "<Cycler>"; }

 private:
  std::vector<Value> items_;
  mutable size_t pos_ = 0;
};

std::unordered_map<std::string, Value> globals(const Evaluator& ev) {
  std::unordered_map<std::string, Value> g;
  g["range"] = make_function("range", [](CallArgs& a) {
    auto num = [](const Value& v) {
      if (!(v.is_int() || v.is_bool()))
        throw RenderError("'" + v.type_name() + "' object cannot be interpreted as an integer");
      return v.as_int();
    };
    int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = num(a.args[0]);
    } else if (a.args.size() == 2 || a.args.size() == 3) {
      start = num(a.args[0]);
      stop = num(a.args[1]);
      if (a.args.size() == 3) step = num(a.args[2]);
    } else {
      throw RenderError("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
    }
    if (step == 0) throw RenderError("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange)
        throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
    }
    return Value::list(std::move(out));
  });
  auto make_dict = [](CallArgs& a, bool ns) {
    Value d = Value::dict();
    d.dict_ref().namespace_ = ns;
    for (const Value& src : a.args) {
      if (!src.is_dict()) throw RenderError("dictionary update sequence element is not a mapping");
      for (const auto& [k, v] : src.dict_ref().items) d.dict_ref().set(k, v);
    }
    for (const auto& [k, v] : a.kwargs) d.dict_ref().set(Value(k), v);
    return d;
  };
  g["namespace"] = make_function("namespace", [make_dict](CallArgs& a) { return make_dict(a, true); });
  g["dict"] = make_function("dict", [make_dict](CallArgs& a) { return make_dict(a, false); });
  g["cycler"] = make_function("cycler", [](CallArgs& a) -> Value {
    if (a.args.empty()) throw RenderError("at least one item has to be provided");
    return Value(std::make_shared<Cycler>(a.args));
  });
  g["joiner"] = make_function("joiner", [](CallArgs& a) {
    std::string sep = py_str(arg(a, 0, "sep", Value(", ")));
    auto used = std::make_shared<bool>(false);
    return make_function("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  });
  g["raise_exception"] = make_function(
      "raise_exception", [](CallArgs& a) -> Value { throw TemplateRaised(py_str(arg(a, 0, "message", kUndef))); });
  const std::tm now = ev.now();
  g["strftime_now"] = make_function("strftime_now", [now](CallArgs& a) {
    const Value& f = arg(a, 0, "format", kUndef);
    if (!f.is_string()) throw RenderError("strftime_now needs a format string");
    if (f.str().empty()) return Value("");
    std::vector<char> buf(256 + f.str().size() * 8);
    size_t n = std::strftime(buf.data(), buf.size(), f.str().c_str(), &now);
    return Value(std::string(buf.data(), n));
  });
  return g;
}

}  // namespace

Template Template::parse(std::string_view source) {
  Template t;
  t.body_ = jinja::parse(tokenize(source));
  check_body(t.body_, false);
  return t;
}

std::string Template::render(std::unordered_map<std::string, Value> vars, const std::tm& now) const {
  ContainerArena arena;
  Evaluator ev(now);
  std::unordered_map<std::string, Value> g = globals(ev);
  for (auto& [k, v] : vars) g[k] = std::move(v);
  return ev.render(body_, std::move(g));
}

}  // namespace ferry::text::jinja
