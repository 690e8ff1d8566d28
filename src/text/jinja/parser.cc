// A recursive-descent parser following jinja2's (parser.py) grammar and precedences.
#include "text/jinja/parser.h"

#include <initializer_list>

namespace ferry::text::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kData: return "template data";
    case Tok::kVarBegin: return "begin of print statement";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kBlockBegin: return "begin of statement block";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kEof: return "end of template";
    case Tok::kString: return "string";
    case Tok::kInt: return "integer";
    case Tok::kFloat: return "float";
    default: return t.value;
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != Tok::kEof) fail("unexpected '" + describe(cur()) + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw SyntaxError(cur().line, msg); }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got '" + describe(cur()) + "'");
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected name, got '" + describe(cur()) + "'");
    return next().value;
  }
  bool at_name_in(std::initializer_list<const char*> names) const {
    if (cur().type != Tok::kName) return false;
    for (const char* n : names)
      if (cur().value == n) return true;
    return false;
  }

  static ExprPtr node(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ----

  Body subparse(std::initializer_list<const char*> end_tokens) {
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& t = cur();
      if (t.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = t.line;
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::kVarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        if (end_tokens.size() && at_name_in(end_tokens)) return body;
        body.push_back(parse_statement());
        expect(Tok::kBlockEnd, "'%}'");
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
    return body;
  }

  Body parse_statements(std::initializer_list<const char*> end_tokens, bool drop_needle) {
    skip_op(":");
    expect(Tok::kBlockEnd, "'%}'");
    Body body = subparse(end_tokens);
    if (cur().type == Tok::kEof) {
      std::string names;
      for (const char* n : end_tokens) names += std::string(names.empty() ? "" : " or ") + "'" + n + "'";
      fail("unexpected end of template; looking for " + names);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr make_stmt(StmtKind k) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = cur().line;
    return s;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::kName) fail("tag name expected");
    const std::string tag = cur().value;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "break" || tag == "continue") {
      auto s = make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue);
      next();
      return s;
    }
    if (tag == "generation") {
      auto s = make_stmt(StmtKind::kBlock);
      next();
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtKind::kFor);
    next();
    s->target = parse_assign_target(false);
    if (!skip_name("in")) fail("expected 'in', got '" + describe(cur()) + "'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    s->recursive = skip_name("recursive");
    s->body = parse_statements({"endfor", "else"}, false);
    if (next().value == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtKind::kIf);
    next();
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.value == "elif") continue;
      if (t.value == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    auto s = make_stmt(StmtKind::kSet);
    next();
    s->target = parse_assign_target(true);
    if (skip_op("=")) {
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    while (is_op("|")) {
      next();
      s->filters.push_back(parse_filter_call(nullptr));
    }
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(std::vector<Param>& params) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        fail("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtKind::kMacro);
    next();
    s->text = expect_name();
    parse_signature(s->params);
    s->body = parse_statements({"endmacro"}, true);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(StmtKind::kCallBlock);
    next();
    if (is_op("(")) parse_signature(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call");
    s->body = parse_statements({"endcall"}, true);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(StmtKind::kFilterBlock);
    next();
    s->filters.push_back(parse_filter_call(nullptr));
    while (skip_op("|")) s->filters.push_back(parse_filter_call(nullptr));
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(StmtKind::kWith);
    next();
    while (cur().type != Tok::kBlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target t = parse_assign_target(false);
      expect_op("=");
      s->assigns.emplace_back(std::move(t), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // A name, `a, b` for unpacking, or (with_namespace) `ns.attr`.
  Target parse_assign_target(bool with_namespace) {
    Target t;
    if (with_namespace && cur().type == Tok::kName && look().type == Tok::kOp && look().value == ".") {
      t.names.push_back(next().value);
      next();
      t.attr = expect_name();
      return t;
    }
    bool paren = skip_op("(");
    while (true) {
      if (cur().type != Tok::kName) fail("can't assign to '" + describe(cur()) + "'");
      const std::string& n = cur().value;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail("can't assign to '" + n + "'");
      t.names.push_back(next().value);
      if (!is_op(",")) break;
      next();
      t.unpack = true;
      if (!(cur().type == Tok::kName) || is_name("in")) break;
    }
    if (paren) expect_op(")");
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
    return extra.size() && at_name_in(extra);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra,
                      bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto e = node(ExprKind::kTuple, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = node(ExprKind::kCond, line);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_condexpr();
      e = std::move(c);
      line = cur().line;
    }
    return e;
  }

  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, int line) {
    auto e = node(ExprKind::kBinary, line);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      int line = next().line;
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      int line = next().line;
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = node(ExprKind::kNot, next().line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    auto e = node(ExprKind::kCompare, line);
    while (true) {
      if (cur().type == Tok::kOp && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                     cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        e->ops.push_back(next().value);
      } else if (skip_name("in")) {
        e->ops.push_back("in");
      } else if (is_name("not") && look().type == Tok::kName && look().value == "in") {
        next();
        next();
        e->ops.push_back("notin");
      } else {
        break;
      }
      e->items.push_back(parse_math1());
    }
    if (e->ops.empty()) return first;
    e->a = std::move(first);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      l = binary(t.value == "+" ? "+" : "-", std::move(l), parse_concat(), t.line);
    }
    return l;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::kConcat, line);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      const char* op = t.value == "*" ? "*" : t.value == "/" ? "/" : t.value == "//" ? "//" : "%";
      l = binary(op, std::move(l), parse_pow(), t.line);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = node(t.value == "-" ? ExprKind::kNeg : ExprKind::kPos, t.line);
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    ExprPtr e;
    switch (t.type) {
      case Tok::kName:
        if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
          e = node(ExprKind::kConst, t.line);
          e->value = Value(t.value == "true" || t.value == "True");
        } else if (t.value == "none" || t.value == "None") {
          e = node(ExprKind::kConst, t.line);
          e->value = Value::none();
        } else {
          e = node(ExprKind::kName, t.line);
          e->name = t.value;
        }
        next();
        return e;
      case Tok::kString: {
        e = node(ExprKind::kConst, t.line);
        std::string s = next().value;
        while (cur().type == Tok::kString) s += next().value;
        e->value = Value(std::move(s));
        return e;
      }
      case Tok::kInt:
        e = node(ExprKind::kConst, t.line);
        e->value = Value(t.int_value);
        next();
        return e;
      case Tok::kFloat:
        e = node(ExprKind::kConst, t.line);
        e->value = Value(t.float_value);
        next();
        return e;
      case Tok::kOp:
        if (t.value == "(") {
          next();
          e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") return parse_list();
        if (t.value == "{") return parse_dict();
        break;
      default: break;
    }
    fail("unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::kList, next().line);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::kDict, next().line);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("["))
        e = parse_subscript(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter_call(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& t = next();
    if (t.value == ".") {
      const Token& a = cur();
      if (a.type == Tok::kName) {
        auto e = node(ExprKind::kAttr, t.line);
        e->a = std::move(obj);
        e->name = next().value;
        return e;
      }
      if (a.type != Tok::kInt) fail("expected name or number");
      auto e = node(ExprKind::kItem, t.line);
      e->a = std::move(obj);
      e->b = node(ExprKind::kConst, a.line);
      e->b->value = Value(a.int_value);
      next();
      return e;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::kItem, t.line);
    e->a = std::move(obj);
    if (args.size() == 1) {
      if (args[0]->kind == ExprKind::kSlice) {
        args[0]->a = std::move(e->a);
        return std::move(args[0]);
      }
      e->b = std::move(args[0]);
    } else {
      e->b = node(ExprKind::kTuple, t.line);
      e->b->items = std::move(args);
    }
    return e;
  }

  // An index or a slice start:stop:step (a kSlice node whose subject the caller fills in).
  ExprPtr parse_subscribed() {
    const int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto e = node(ExprKind::kSlice, line);
    e->items.resize(3);
    e->items[0] = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) e->items[1] = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) e->items[2] = parse_expression(true);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        next();
        e.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        next();
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().value == "=") {
        std::string key = next().value;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty() || e.dyn_args || e.dyn_kwargs) fail("invalid syntax for function call expression");
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur().line);
    e->a = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_call(ExprPtr subject) {
    auto e = node(ExprKind::kFilter, cur().line);
    e->a = std::move(subject);
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr subject) {
    const int line = next().line;  // "is"
    const bool negated = skip_name("not");
    auto e = node(ExprKind::kTest, line);
    e->a = std::move(subject);
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !at_name_in({"else", "or", "and"})) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = node(ExprKind::kNot, line);
    n->a = std::move(e);
    return n;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace ferry::text::jinja
