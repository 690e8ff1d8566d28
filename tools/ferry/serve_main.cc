// ferry-serve: the binary behind `ferry serve` (which execs it from the folder ferry is in). It links
// the HTTP server (cpp-httplib, a shared library), which the ferry binary itself must not need.
#include <cstdio>
#include <cstring>
#include <string>

#include "base/env_options.h"
#include "cli.h"

int main(int argc, char** argv) {
  const ferry::EnvOptions& env = ferry::env_options();
  if (!env.errors.empty()) {
    for (const std::string& e : env.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
    return ferry::cli::kExitUsage;
  }
  // `ferry serve ARGS` runs `ferry-serve serve ARGS`; `ferry-serve ARGS` works too.
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) return cmd_serve(argc - 1, argv + 1);
  return cmd_serve(argc, argv);
}
