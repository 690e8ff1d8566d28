// The CLI's error contract and size parsing.
#include "cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/runtime.h"

namespace ferry::cli {

int report(const Status& st) {
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  return st.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitError;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return kExitError;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return kExitUsage;
}

bool parse(CLI::App& app, int argc, char** argv, int* exit_code) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    *exit_code = 0;
    return false;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::fprintf(stderr, "error: %s (see `%s --help`)\n", what.c_str(), app.get_name().c_str());
    *exit_code = kExitUsage;
    return false;
  }
  return true;
}

Status check_output_writable(const std::string& path) {
  struct stat st {};
  if (path.empty()) return make_error(ErrorCode::kInvalidArgument, "empty output path");
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return make_error(ErrorCode::kIo, "cannot write '%s': it is a folder", path.c_str());
  // The deepest folder of the path that exists; a missing one below it is created by the writer.
  std::string dir = path;
  for (;;) {
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
    if (::stat(dir.c_str(), &st) == 0) break;
    if (errno != ENOENT || dir == "." || dir == "/")
      return make_error(ErrorCode::kIo, "cannot write '%s': %s: %s", path.c_str(), dir.c_str(), std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    return make_error(ErrorCode::kIo, "cannot write '%s': '%s' is not a folder", path.c_str(), dir.c_str());
  std::string probe = dir + "/.ferry-write-check-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return make_error(ErrorCode::kIo, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

void add_cpu_isa_option(CLI::App& app, std::string* level) {
  app.add_option("--cpu-isa", *level,
                 "CPU kernels: auto (the best this CPU has), scalar, avx2, avx2-vnni (AVX2 with AVX-VNNI), avx512 "
                 "or amx (AVX-512 with AMX tiles for quantized prefill)")
      ->default_str("auto");
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v)) return "'" + text + "' is not a finite number";
        return {};
      },
      "FINITE");
}

std::optional<uint64_t> parse_size(const std::string& text) { return runtime::parse_size(text); }

}  // namespace ferry::cli
