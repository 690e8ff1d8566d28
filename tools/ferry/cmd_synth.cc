// ferry synth: write a GGUF with random weights at a named preset.
//   ferry synth --list
//   ferry synth --preset NAME --type TYPE -o FILE [--seed S] [--layers N] [-t THREADS] [--fast] [--route-skew S]
//               [--mmproj-out MMPROJ [--mmproj-type TYPE]]   (qwen2vl presets: the vision tower too)
// The file streams to disk with a progress bar on stderr (bytes, %, MB/s; a line every 10 % when
// stderr is not a terminal). Unknown preset or unsupported type: one `error:` line, exit 2. The file is
// written as FILE.partial and renamed at the end (gguf::Writer); SIGINT / SIGTERM / SIGHUP remove the
// partial file, so an interrupted run leaves nothing under either name.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.h"
#include "format/gguf.h"
#include "model/synth.h"
#include "model/vision/synth_mmproj.h"
#include "tensor/dtype.h"

namespace {

using Clock = std::chrono::steady_clock;

// The partial file an interrupting signal removes (a fixed buffer: the handler may only call
// async-signal-safe functions).
char g_partial_path[4096];

void remove_partial_and_die(int sig) {
  if (g_partial_path[0] != '\0') ::unlink(g_partial_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void remove_partial_on_signals(const std::string& path) {
  const std::string partial = ferry::gguf::Writer::partial_path(path);
  if (partial.size() >= sizeof(g_partial_path)) return;  // the Writer's own clean-up still covers errors
  std::memcpy(g_partial_path, partial.c_str(), partial.size() + 1);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_partial_and_die);
}

double params_of(const ferry::model::SynthPreset& p) {
  const double ffn = p.n_expert > 0 ? (3.0 * p.n_ff_expert + 1.0) * p.n_embd * p.n_expert : 3.0 * p.n_embd * p.n_ff;
  const double per_layer = 2.0 * p.n_embd * p.n_head * p.head_dim + 2.0 * p.n_embd * p.n_kv_head * p.head_dim + ffn;
  return per_layer * p.n_layer + (p.tied_output ? 1.0 : 2.0) * p.n_embd * p.n_vocab;
}

void print_list() {
  std::printf("%-15s %-8s %6s %6s %5s %4s %5s %7s %12s %7s  %s\n", "preset", "arch", "layers", "d", "heads", "kv",
              "hdim", "ffn", "experts", "vocab", "params / shapes of");
  for (const auto& p : ferry::model::synth_presets()) {
    const double n = params_of(p);
    // Experts: count x width, top k per token.
    std::string experts = "-";
    if (p.n_expert > 0)
      experts = std::to_string(p.n_expert) + "x" + std::to_string(p.n_ff_expert) + "/" + std::to_string(p.n_expert_used);
    std::printf("%-15s %-8s %6d %6d %5d %4d %5d %7d %12s %7d  %.2f%s, %s\n", p.name, ferry::model::arch_name(p.arch),
                p.n_layer, p.n_embd, p.n_head, p.n_kv_head, p.head_dim, p.n_ff, experts.c_str(), p.n_vocab,
                n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M", p.description);
  }
  std::printf("\ntypes: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K\n");
}

// Progress on stderr: redrawn in place on a terminal (at most 10 times a second), else one line
// per 10 %.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(fileno(stderr)) != 0), start_(Clock::now()), last_(start_) {}

  void update(const ferry::model::SynthProgress& p, bool final = false) {
    const auto now = Clock::now();
    const double pct = p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100.0;
    if (tty_) {
      if (!final && now - last_ < std::chrono::milliseconds(100)) return;
    } else {
      const int decile = static_cast<int>(pct / 10);
      if (decile <= last_decile_) return;  // also skips the final call when 100 % is already shown
      last_decile_ = decile;
    }
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double mb = static_cast<double>(p.bytes_done) / 1e6;
    const double rate = secs > 0 ? mb / secs : 0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(pct / 100.0 * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s[%s] %5.1f%% %9.1f / %.1f MB %7.1f MB/s %s%s", tty_ ? "\r" : "", bar.c_str(), pct, mb,
                 static_cast<double>(p.bytes_total) / 1e6, rate, tty_ ? "\x1b[K" : "",
                 tty_ ? (final ? "\n" : "") : "\n");
    std::fflush(stderr);
  }

  void finish_line() {
    if (tty_ && last_ != start_) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
  Clock::time_point start_, last_;
  int last_decile_ = -1;
};

}  // namespace

int cmd_synth(int argc, char** argv) {
  CLI::App app{"Write a GGUF with random weights at a named preset (see --list)", "ferry synth"};
  bool list = false;
  std::string preset, type_name, out;
  uint64_t seed = 0;
  int32_t layers = 0, threads = 0;
  app.add_flag("--list", list, "list the presets");
  app.add_option("--preset", preset, "preset name");
  app.add_option("--type", type_name, "weight type of 2-D tensors (GGUF name: F16, Q4_K, ...)");
  app.add_option("-o,--output", out, "output file");
  app.add_option("--seed", seed, "random seed (same seed, same bytes)");
  app.add_option("--layers", layers, "number of layers instead of the preset's")->check(CLI::Range(1, 4096));
  app.add_option("-t,--threads", threads, "generation threads (default: all cores)")->check(CLI::Range(1, 256));
  bool fast = false;
  app.add_flag("--fast", fast, "speed studies: repeat 2 quantized chunks per tensor instead of quantizing every row");
  double route_skew = 0;
  app.add_option("--route-skew", route_skew,
                 "mixture-of-experts presets: skew expert popularity (Zipf-like, larger = more skewed; 0: random "
                 "routers, ~uniform)")
      ->check(CLI::Range(0.0, 8.0));
  std::string mmproj_out, mmproj_type_name = "F16";
  app.add_option("--mmproj-out", mmproj_out, "vision-language presets: also write the vision tower (mmproj GGUF) here");
  app.add_option("--mmproj-type", mmproj_type_name, "weight type of the mmproj's matrices")->capture_default_str();
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;

  if (list) {
    print_list();
    return 0;
  }
  if (preset.empty() || type_name.empty() || out.empty())
    return ferry::cli::usage_error("ferry synth needs --preset, --type and -o (or --list)");
  if (ferry::model::find_synth_preset(preset) == nullptr)
    return ferry::cli::usage_error("unknown preset '" + preset + "' (see `ferry synth --list`)");
  if (route_skew > 0 && ferry::model::find_synth_preset(preset)->n_expert == 0)
    return ferry::cli::usage_error("--route-skew needs a mixture-of-experts preset ('" + preset + "' has no experts)");
  const auto type = ferry::dtype_from_name(type_name);
  if (!type || !ferry::traits(*type).weight_type)
    return ferry::cli::usage_error("unsupported type '" + type_name +
                                   "' (one of F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K)");

  const auto mmproj_type = ferry::dtype_from_name(mmproj_type_name);
  if (!mmproj_type || !ferry::traits(*mmproj_type).weight_type)
    return ferry::cli::usage_error("unsupported --mmproj-type '" + mmproj_type_name + "'");
  if (!mmproj_out.empty()) {
    if (auto shape = ferry::model::mmproj_shape(*ferry::model::find_synth_preset(preset)); !shape)
      return ferry::cli::usage_error(shape.status().message());
    if (mmproj_out == out) return ferry::cli::usage_error("--mmproj-out must differ from -o");
  }

  ferry::model::SynthOptions opt;
  opt.preset = preset;
  opt.type = *type;
  opt.path = out;
  opt.seed = seed;
  opt.n_layer = layers;
  opt.n_threads = threads;
  opt.fast = fast;
  opt.route_skew = route_skew;
  ProgressBar bar;
  ferry::model::SynthProgress last;
  opt.on_progress = [&](const ferry::model::SynthProgress& p) {
    last = p;
    bar.update(p);
  };
  const auto t0 = Clock::now();
  remove_partial_on_signals(out);
  auto res = ferry::model::synth_write(opt);
  if (!res) {
    bar.finish_line();  // the error goes on a line of its own
    return ferry::cli::report(res.status());
  }
  bar.update(last, /*final=*/true);
  for (const auto& note : res->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s: %s %s, %zu tensors, %.2fM params, %.1f MB of weights in %.1f s\n", out.c_str(),
               preset.c_str(), ferry::dtype_name(*type), res->n_tensors, static_cast<double>(res->n_params) / 1e6,
               static_cast<double>(res->data_bytes) / 1e6, secs);
  if (mmproj_out.empty()) return 0;
  remove_partial_on_signals(mmproj_out);
  ProgressBar mm_bar;
  opt.on_progress = [&](const ferry::model::SynthProgress& p) {
    last = p;
    mm_bar.update(p);
  };
  auto mm = ferry::model::synth_write_mmproj(opt, *mmproj_type, mmproj_out);
  if (!mm) {
    mm_bar.finish_line();
    return ferry::cli::report(mm.status());
  }
  mm_bar.update(last, /*final=*/true);
  for (const auto& note : mm->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fprintf(stderr, "wrote %s: %s vision tower (mmproj) %s, %zu tensors, %.2fM params\n", mmproj_out.c_str(),
               preset.c_str(), ferry::dtype_name(*mmproj_type), mm->n_tensors, static_cast<double>(mm->n_params) / 1e6);
  return 0;
}
