// A recursive-descent parser following jinja2's (parser.py) grammar and precedences: the template and its
// statements here, expressions in parser_expr.cc.
#include "text/jinja/parser.h"

#include "text/jinja/parser_impl.h"

namespace ferry::text::jinja {

namespace detail {

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

Body Parser::subparse(std::initializer_list<const char*> end_tokens) {
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

Body Parser::parse_statements(std::initializer_list<const char*> end_tokens, bool drop_needle) {
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

StmtPtr Parser::make_stmt(StmtKind k) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  s->line = cur().line;
  return s;
}

StmtPtr Parser::parse_statement() {
  Nest nest(*this);
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
    if (loop_depth_ == 0) fail("'" + tag + "' outside loop");
    auto s = make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue);
    next();
    return s;
  }
  if (tag == "generation") {
    auto s = make_stmt(StmtKind::kBlock);
    next();
    OutsideLoop outside(*this);  // Hugging Face renders the body as a call block: a function of its own
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }
  fail("Encountered unknown tag '" + tag + "'.");
}

StmtPtr Parser::parse_for() {
  auto s = make_stmt(StmtKind::kFor);
  next();
  s->target = parse_assign_target(false);
  if (!skip_name("in")) fail("expected 'in', got '" + describe(cur()) + "'");
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->cond = parse_expression(true);
  s->recursive = skip_name("recursive");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().value == "else") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if() {
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

StmtPtr Parser::parse_set() {
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

void Parser::parse_signature(std::vector<Param>& params) {
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

StmtPtr Parser::parse_macro() {
  auto s = make_stmt(StmtKind::kMacro);
  next();
  s->text = expect_name();
  parse_signature(s->params);
  OutsideLoop outside(*this);
  s->body = parse_statements({"endmacro"}, true);
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = make_stmt(StmtKind::kCallBlock);
  next();
  if (is_op("(")) parse_signature(s->params);
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::kCall) fail("expected call");
  OutsideLoop outside(*this);
  s->body = parse_statements({"endcall"}, true);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = make_stmt(StmtKind::kFilterBlock);
  next();
  s->filters.push_back(parse_filter_call(nullptr));
  while (skip_op("|")) s->filters.push_back(parse_filter_call(nullptr));
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
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
Target Parser::parse_assign_target(bool with_namespace) {
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

}  // namespace detail

Body parse(const std::vector<Token>& tokens) { return detail::Parser(tokens).parse_template(); }

}  // namespace ferry::text::jinja
