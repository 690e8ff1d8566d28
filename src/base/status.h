// Status / Expected<T>: the error currency of library code (loader, planner, allocation, server).
// Library code never exits or throws across module boundaries; it returns one of these, and the CLI
// turns an error into one `error: ...` line and exit code 1 (2 for bad usage).
// FERRY_ASSERT is the always-on check for internal invariants (not for bad input).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ferry {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,  // bad flag or parameter (CLI exit 2)
  kCorrupt,          // malformed or hostile file
  kUnsupported,      // valid but not supported (architecture, dtype, ...)
  kNotFound,         // missing file, tensor or key
  kIo,               // read/write/mmap failure
  kOutOfMemory,      // budget or allocation exceeded
  kDevice,           // GPU missing / driver / CUDA error
  kBusy,             // a bounded queue is full: try again later (the server's 429)
  kInternal,
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// printf-style helper: make_error(ErrorCode::kCorrupt, "tensor %s: offset %zu past end", name, off)
Status make_error(ErrorCode code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}             // NOLINT: implicit on purpose
  Expected(Status status) : v_(std::move(status)) {       // NOLINT: implicit on purpose
    if (std::get<Status>(v_).is_ok()) v_ = Status(ErrorCode::kInternal, "Expected built from ok Status");
  }
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& status() const {
    static const Status kOk;
    return has_value() ? kOk : std::get<Status>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);

}  // namespace ferry

#define FERRY_ASSERT(cond)                                                \
  do {                                                                    \
    if (!(cond)) ::ferry::assert_fail(#cond, __FILE__, __LINE__, nullptr); \
  } while (0)
#define FERRY_ASSERT_MSG(cond, msg)                                     \
  do {                                                                  \
    if (!(cond)) ::ferry::assert_fail(#cond, __FILE__, __LINE__, msg);  \
  } while (0)

// Propagate an error Status: FERRY_RETURN_IF_ERROR(reader.read(...));
#define FERRY_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::ferry::Status ferry_st_ = (expr);      \
    if (!ferry_st_.is_ok()) return ferry_st_; \
  } while (0)

#define FERRY_CONCAT_INNER(a, b) a##b
#define FERRY_CONCAT(a, b) FERRY_CONCAT_INNER(a, b)
// FERRY_ASSIGN_OR_RETURN(auto file, ModelFile::open(path));
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL(FERRY_CONCAT(ferry_ex_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.has_value()) return tmp.status();        \
  lhs = std::move(tmp).value()
