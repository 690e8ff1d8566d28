// The CLI's error contract and size parsing.
#include "cli.h"

#include <cstdio>

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

std::optional<uint64_t> parse_size(const std::string& text) { return runtime::parse_size(text); }

}  // namespace ferry::cli
