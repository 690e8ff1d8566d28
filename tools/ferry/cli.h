// Shared helpers of the ferry CLI: the error contract (one `error:` line on stderr, exit 1 for
// failures and 2 for bad usage) and parsing of sizes such as `2G`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace ferry::cli {

inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// Prints `error: <message>` and returns the exit code for the status (2 for kInvalidArgument).
int report(const Status& st);
int fail(const std::string& message);        // exit 1
int usage_error(const std::string& message); // exit 2

// Runs app.parse(argc, argv); on --help prints help and returns 0 through *exit_code; on a parse
// error prints one `error:` line and sets *exit_code = 2. Returns true when the command should run.
bool parse(CLI::App& app, int argc, char** argv, int* exit_code);

// Before a long computation whose result goes to `path`: fails (kIo, naming the path) unless a file can be
// created there, with its parent folders as a writer that creates them would (a temporary file is made
// and removed in the deepest folder that exists). A path that is a folder fails too.
Status check_output_writable(const std::string& path);

// --cpu-isa LEVEL (run, bench, profile): the CPU kernels' dispatch level instead of the automatic one.
// The value is checked when the model is opened (kernels::resolve_cpu_isa: a level this CPU lacks is
// an `error:` line naming the ones it has).
void add_cpu_isa_option(CLI::App& app, std::string* level);

// A CLI11 check that the value is a finite number (CLI::Range and CLI::PositiveNumber let NaN through).
CLI::Validator finite_number();

// "2G", "512M", "1024", "1.5G" (binary units: K = 1024) -> bytes.
std::optional<uint64_t> parse_size(const std::string& text);

}  // namespace ferry::cli

// Subcommands: argv[0] is the subcommand name.
int cmd_run(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_serve(int argc, char** argv);       // in the ferry-serve binary only
int cmd_serve_exec(int argc, char** argv);  // ferry serve: runs ferry-serve
