// ferry: the command-line entry point. Dispatches to one subcommand per file (cmd_*.cc).
#include <cstdio>
#include <cstring>
#include <string>

#include "base/env_options.h"
#include "cli.h"
#include "ferry_version.h"  // generated at build time (cmake/version.cmake)

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "chat with a model in the terminal"},
    {"serve", cmd_serve_exec, "OpenAI-compatible HTTP server with continuous batching"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata, tensors and sub-layers"},
    {"synth", cmd_synth, "write a GGUF with random weights at a named preset"},
    {"tokenize", cmd_tokenize, "print token ids of text, as the model's tokenizer encodes it"},
    {"template", cmd_template, "render the model's chat template for a conversation"},
    {"bench", cmd_bench, "measure prefill / decode speed"},
    {"plan", cmd_plan, "show the execution plan for a VRAM budget"},
    {"profile", cmd_profile, "measure this machine for the planner"},
};

void print_usage(FILE* f) {
  std::fprintf(f, "usage: ferry <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(f, "  %-10s %s\n", c.name, c.help);
  std::fprintf(f, "\n`ferry <command> --help` for the options of a command; `ferry --version` for the build.\n");
}

void print_version() {
  std::printf("ferry %s (git %s)\n%s\n", FERRY_VERSION, FERRY_GIT_DESCRIBE, FERRY_BUILD_BACKENDS);
}

// The FERRY_* environment variables (base/env_options.h): a bad value is an error before any work; A/B
// switches that this build does not read are named once.
bool environment_ok(int* exit_code) {
  const ferry::EnvOptions& env = ferry::env_options();
  if (!env.errors.empty()) {
    for (const std::string& e : env.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
    *exit_code = ferry::cli::kExitUsage;
    return false;
  }
  if (!env.ignored.empty()) {
    std::string names;
    for (const std::string& n : env.ignored) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr,
                 "ferry: warning: this build ignores %s (A/B switches, read only by a build configured with "
                 "-DFERRY_EXPERIMENTS=ON; docs/ENVIRONMENT.md)\n",
                 names.c_str());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return ferry::cli::kExitUsage;
  }
  const char* name = argv[1];
  if (!std::strcmp(name, "--help") || !std::strcmp(name, "-h") || !std::strcmp(name, "help")) {
    print_usage(stdout);
    return 0;
  }
  if (!std::strcmp(name, "--version") || !std::strcmp(name, "-V") || !std::strcmp(name, "version")) {
    print_version();
    return 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(name, c.name) != 0) continue;
    int exit_code = 0;
    if (!environment_ok(&exit_code)) return exit_code;
    return c.fn(argc - 1, argv + 1);
  }
  return ferry::cli::usage_error(std::string("unknown command '") + name + "' (see `ferry --help`)");
}
