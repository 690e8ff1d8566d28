// The parser class, shared by parser.cc (statements) and parser_expr.cc (expressions): token helpers,
// and the nesting guards that keep a hostile template from overflowing the stack.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "text/jinja/parser.h"

namespace ferry::text::jinja::detail {

// A token as error messages name it.
std::string describe(const Token& t);

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

  // ---- statements (parser.cc) ----
  Body subparse(std::initializer_list<const char*> end_tokens);
  Body parse_statements(std::initializer_list<const char*> end_tokens, bool drop_needle);
  StmtPtr make_stmt(StmtKind k);
  StmtPtr parse_statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  void parse_signature(std::vector<Param>& params);
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  // A name, `a, b` for unpacking, or (with_namespace) `ns.attr`.
  Target parse_assign_target(bool with_namespace);

  // ---- expressions (parser_expr.cc) ----
  bool is_tuple_end(std::initializer_list<const char*> extra) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra,
                      bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }
  ExprPtr parse_condexpr();
  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  // An index or a slice start:stop:step (a kSlice node whose subject the caller fills in).
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter_call(ExprPtr subject);
  ExprPtr parse_test(ExprPtr subject);

  // Nesting of expressions and statements, capped so that a hostile template fails to parse instead of
  // overflowing the stack (real templates nest a few levels).
  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.fail("template nested too deeply");
    }
    ~Nest() { --p_.nesting_; }
    Parser& p_;
  };
  // A left-deep chain (a + b + c, x | f | g, a.b.c) nests its tree one level per link.
  struct Chain {
    explicit Chain(Parser& p) : p_(p) {}
    void link() {
      ++n_;
      if (++p_.nesting_ > kMaxNesting) p_.fail("template nested too deeply");
    }
    ~Chain() { p_.nesting_ -= n_; }
    Parser& p_;
    int n_ = 0;
  };
  static constexpr int kMaxNesting = 500;

  // A macro or call-block body is a function of its own: `break` there is outside any loop around it, as in the
  // Python jinja2 compiles it to.
  struct OutsideLoop {
    explicit OutsideLoop(Parser& p) : p_(p), saved_(p.loop_depth_) { p_.loop_depth_ = 0; }
    ~OutsideLoop() { p_.loop_depth_ = saved_; }
    Parser& p_;
    int saved_;
  };

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;  // for bodies around the current statement (else bodies are not loops)
};

}  // namespace ferry::text::jinja::detail
