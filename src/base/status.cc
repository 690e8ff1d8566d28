// Status helpers and the always-on assert.
#include "base/status.h"

#include <cstdarg>

namespace ferry {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kDevice: return "device";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Status make_error(ErrorCode code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "ferry: internal error: assertion `%s` failed at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace ferry
