// The CLI's error contract and size parsing.
#include "cli.h"

#include <cctype>
#include <cmath>
#include <cstdio>

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

std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double value;
  try {
    value = std::stod(text.substr(0, i));
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix = text.substr(i);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();  // GiB
  double mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': mult = 1024.0; break;
      case 'M': mult = 1024.0 * 1024; break;
      case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

}  // namespace ferry::cli
