// Expressions, with jinja2's precedences: conditional, or, and, not, comparisons, + -, ~, * / // %, **,
// unary - +, then postfix lookups and calls, with filters and tests binding tighter than arithmetic.
#include "text/jinja/parser_impl.h"

namespace ferry::text::jinja::detail {

bool Parser::is_tuple_end(std::initializer_list<const char*> extra) const {
  if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
  return extra.size() && at_name_in(extra);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra,
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

ExprPtr Parser::parse_condexpr() {
  int line = cur().line;
  ExprPtr e = parse_or();
  Chain chain(*this);
  while (skip_name("if")) {
    chain.link();
    auto c = node(ExprKind::kCond, line);
    c->a = parse_or();
    c->b = std::move(e);
    if (skip_name("else")) c->c = parse_condexpr();
    e = std::move(c);
    line = cur().line;
  }
  return e;
}

ExprPtr Parser::binary(const char* op, ExprPtr l, ExprPtr r, int line) {
  auto e = node(ExprKind::kBinary, line);
  e->name = op;
  e->a = std::move(l);
  e->b = std::move(r);
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  Chain chain(*this);
  while (is_name("or")) {
    chain.link();
    int line = next().line;
    l = binary("or", std::move(l), parse_and(), line);
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  Chain chain(*this);
  while (is_name("and")) {
    chain.link();
    int line = next().line;
    l = binary("and", std::move(l), parse_not(), line);
  }
  return l;
}

ExprPtr Parser::parse_not() {
  Nest nest(*this);
  if (is_name("not")) {
    auto e = node(ExprKind::kNot, next().line);
    e->a = parse_not();
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  Chain chain(*this);
  while (is_op("+") || is_op("-")) {
    chain.link();
    const Token& t = next();
    l = binary(t.value == "+" ? "+" : "-", std::move(l), parse_concat(), t.line);
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = node(ExprKind::kConcat, line);
  e->items.push_back(std::move(first));
  while (skip_op("~")) e->items.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  Chain chain(*this);
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    chain.link();
    const Token& t = next();
    const char* op = t.value == "*" ? "*" : t.value == "/" ? "/" : t.value == "//" ? "//" : "%";
    l = binary(op, std::move(l), parse_pow(), t.line);
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  Chain chain(*this);
  while (is_op("**")) {
    chain.link();
    int line = next().line;
    l = binary("**", std::move(l), parse_unary(true), line);
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nest nest(*this);
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_list() {
  auto e = node(ExprKind::kList, next().line);
  while (!is_op("]")) {
    if (!e->items.empty()) expect_op(",");
    if (is_op("]")) break;
    e->items.push_back(parse_expression(true));
  }
  expect_op("]");
  return e;
}

ExprPtr Parser::parse_dict() {
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

ExprPtr Parser::parse_postfix(ExprPtr e) {
  Chain chain(*this);
  while (true) {
    chain.link();
    if (is_op(".") || is_op("["))
      e = parse_subscript(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  Chain chain(*this);
  while (true) {
    chain.link();
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

ExprPtr Parser::parse_subscript(ExprPtr obj) {
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
    for (const ExprPtr& a : args)
      if (a->kind == ExprKind::kSlice) fail("a slice inside a tuple index (x[a, b:c]) is not supported");
    e->b = node(ExprKind::kTuple, t.line);
    e->b->items = std::move(args);
  }
  return e;
}

// An index or a slice start:stop:step (a kSlice node whose subject the caller fills in).
ExprPtr Parser::parse_subscribed() {
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

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = node(ExprKind::kCall, cur().line);
  e->a = std::move(callee);
  parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_filter_call(ExprPtr subject) {
  auto e = node(ExprKind::kFilter, cur().line);
  e->a = std::move(subject);
  e->name = expect_name();
  while (is_op(".")) {
    next();
    e->name += '.';
    e->name += expect_name();
  }
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_test(ExprPtr subject) {
  const int line = next().line;  // "is"
  const bool negated = skip_name("not");
  auto e = node(ExprKind::kTest, line);
  e->a = std::move(subject);
  e->name = expect_name();
  while (is_op(".")) {
    next();
    e->name += '.';
    e->name += expect_name();
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

}  // namespace ferry::text::jinja::detail
