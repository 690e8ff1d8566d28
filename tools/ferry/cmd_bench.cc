// ferry bench: speed of a model through the Engine, measured as llama-bench measures it: a prompt of
// -p pseudo-random tokens (prefill, in chunks of -b), then -n single-token decode steps, -r times after
// a warm-up pass (the prompt and one decode step). Prints prefill tok/s, TTFT, decode tok/s, and decode's
// achieved memory bandwidth (weight bytes read per token x tok/s) next to the host's measured
// streaming-read bandwidth.
// --json prints one object (keys: prefill_tok_s, decode_tok_s, ttft_ms, decode_gb_s, host_gb_s, ...).
// Every --json has vram_peak_process_bytes: the process's peak device memory, read from the driver on a
// GPU, modelled on the emulated device, 0 on the CPU (vram_peak_process_source says which). On a GPU or
// the emulated device (--vram, --device cuda) it adds the arena's high-water mark and the memory outside
// the arena (the CUDA context), the plan per tier with predicted vs measured step
// time, and the fraction of docs/ARCHITECTURE.md §4's hybrid limits reached; --timeline FILE draws an SVG of one
// prefill chunk and the first decode steps, recorded in an extra pass after the measured runs (of one
// sequence). --parallel N runs N sequences at once, as llama-batched-bench does: N prompts of -p tokens
// (steps of up to -b tokens mixing sequences), then -n steps of N tokens; rates are totals.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/cpu_info.h"
#include "base/host_memory.h"
#include "cli.h"
#include "engine/engine.h"
#include "exec/timeline.h"
#include "format/gguf.h"
#include "hybrid_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/membw.h"
#include "model/model_spec.h"
#include "runtime/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

// Most KV cells a bench run asks for (the sequences' prompts and generated tokens side by side).
constexpr int64_t kMaxBenchCells = int64_t{1} << 24;

// --timeline records one prefill chunk and then this many decode steps.
constexpr int32_t kTimelineDecodeSteps = 6;

struct BenchArgs {
  std::string model;
  int32_t n_prompt = 512;
  int32_t n_gen = 128;
  int32_t threads = 0;
  std::string cpu_isa;  // --cpu-isa
  int32_t batch = 0;  // 0: 1024 for the whole model on a GPU, else 512 (runtime::OpenOptions::n_batch)
  int32_t reps = 1;
  int32_t parallel = 1;  // -np: sequences prefilled and decoded together (llama-batched-bench's npl)
  std::string device = "cpu";
  bool json = false;
  bool warmup = true;
  bool membw = true;
  ferry::cli::HybridArgs hybrid;  // --vram / --profile / --ring / --explain / --timeline (GPU runs)
};

// Wall time per phase, and the process's CPU time (user + system, all threads): on a shared machine
// CPU-ms per token shows the work done even when other processes take cores away.
struct Sample {
  double prefill_ms = 0, decode_ms = 0;
  double prefill_cpu_ms = 0, decode_cpu_ms = 0;
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double cpu_ms() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

// Mean and sample standard deviation.
void mean_sd(const std::vector<double>& v, double* mean, double* sd) {
  *mean = 0;
  for (double x : v) *mean += x;
  *mean /= static_cast<double>(v.size());
  *sd = 0;
  if (v.size() < 2) return;
  for (double x : v) *sd += (x - *mean) * (x - *mean);
  *sd = std::sqrt(*sd / static_cast<double>(v.size() - 1));
}

// Weight bytes a decode step reads: every tensor except the token embedding (one row of it is read),
// unless the output head is tied to it; of a layer's stacked experts (ffn_*_exps), the n_expert_used that
// one token is routed to.
uint64_t decode_weight_bytes(const ferry::gguf::ModelFile& f, const ferry::model::ModelSpec& spec) {
  uint64_t total = 0;
  for (const ferry::gguf::TensorInfo& t : f.tensors()) {
    if (t.name == "token_embd.weight" && !spec.tied_output) continue;
    const bool experts = spec.n_expert > 0 && t.name.find("_exps.") != std::string::npos;
    total += experts ? t.nbytes / static_cast<uint64_t>(spec.n_expert) * static_cast<uint64_t>(spec.n_expert_used)
                     : t.nbytes;
  }
  return total;
}

// Prefill of `tokens` at positions [0, n) of each of sequences 0 .. n_seq-1 (the same prompt, kept
// apart: no cells are shared), in steps of up to n_batch tokens that may hold several sequences' rows;
// logits of each sequence's last token only.
ferry::Status prefill(ferry::engine::Engine& e, const std::vector<int32_t>& tokens, int32_t n_batch,
                      std::vector<float>* logits, int32_t n_seq = 1) {
  ferry::engine::Batch b;
  const int64_t n = static_cast<int64_t>(tokens.size()), total = n * n_seq;
  for (int64_t j0 = 0; j0 < total; j0 += n_batch) {
    b.clear();
    const int64_t j1 = std::min<int64_t>(total, j0 + n_batch);
    for (int64_t j = j0; j < j1; ++j) {
      const int32_t i = static_cast<int32_t>(j % n), seq = static_cast<int32_t>(j / n);
      b.add(tokens[static_cast<size_t>(i)], i, seq, i == n - 1);
    }
    logits->clear();
    FERRY_RETURN_IF_ERROR(e.step(b, logits));
  }
  return ferry::Status::ok();
}

// tokens.size() decode steps from position pos0, each one token of every sequence 0 .. n_seq-1.
ferry::Status decode(ferry::engine::Engine& e, const std::vector<int32_t>& tokens, int32_t pos0,
                     std::vector<float>* logits, int32_t n_seq = 1) {
  ferry::engine::Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.clear();
    for (int32_t seq = 0; seq < n_seq; ++seq) b.add(tokens[i], pos0 + static_cast<int32_t>(i), seq, true);
    logits->clear();
    FERRY_RETURN_IF_ERROR(e.step(b, logits));
  }
  return ferry::Status::ok();
}

void remove_sequences(ferry::engine::Engine& e, int32_t n_seq) {
  for (int32_t seq = 0; seq < n_seq; ++seq) e.seq_rm(seq);
}

int run(const BenchArgs& a) {
  ferry::runtime::OpenOptions opt;
  opt.model_path = a.model;
  const int32_t np = a.parallel;
  const int64_t cells = (static_cast<int64_t>(a.n_prompt) + a.n_gen + 1) * np;
  if (cells > kMaxBenchCells)
    return ferry::cli::usage_error("--parallel " + std::to_string(np) + " x (-p + -n + 1) needs " + std::to_string(cells) +
                                   " KV cells; at most " + std::to_string(kMaxBenchCells));
  opt.n_ctx = static_cast<int32_t>(cells);  // one KV cache, the sequences' cells side by side
  opt.n_seq_max = np;
  opt.n_threads = a.threads;
  opt.cpu_isa = a.cpu_isa;
  opt.n_batch = a.batch;
  opt.device = a.device;
  // GPU: --device cuda alone = whole model on the GPU; --vram = the hybrid executor (runtime::open).
  if (ferry::Status hs = ferry::cli::fill_open_options(a.hybrid, &opt); !hs.is_ok()) return ferry::cli::report(hs);
  // The timeline comes from the hybrid runner's events: cpu / ref have none. Open the file now so a
  // bad path fails before the measurement, not after.
  std::unique_ptr<FILE, int (*)(FILE*)> timeline_file(nullptr, &std::fclose);
  if (!a.hybrid.timeline_path.empty()) {
    if (!ferry::cli::wants_gpu(a.hybrid, a.device))
      return ferry::cli::usage_error("--timeline needs a GPU or emulated device");
    timeline_file.reset(std::fopen(a.hybrid.timeline_path.c_str(), "wb"));
    if (!timeline_file) return ferry::cli::fail("cannot write --timeline file '" + a.hybrid.timeline_path + "'");
  }
  const auto t_load = Clock::now();
  auto opened = ferry::runtime::open(opt);
  if (!opened) return ferry::cli::report(opened.status());
  const double load_ms = ms_since(t_load);
  ferry::runtime::Runtime& rt = **opened;
  ferry::engine::Engine& engine = rt.engine();
  const int32_t n_batch = rt.n_batch();  // -b, or the device's default
  const ferry::model::ModelSpec& spec = engine.spec();

  // Pseudo-random token ids (a fixed LCG, so runs are comparable), as llama-bench uses random tokens.
  uint32_t state = 12345;
  auto next_token = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(spec.n_vocab));
  };
  std::vector<int32_t> prompt(static_cast<size_t>(a.n_prompt)), gen(static_cast<size_t>(a.n_gen));
  for (int32_t& t : prompt) t = next_token();
  for (int32_t& t : gen) t = next_token();

  std::vector<float> logits;
  if (a.warmup) {  // pages the weights in, grows every scratch buffer and loads every kernel once: the
                   // whole prompt, then one decode step at the depth the measured decode starts from, so
                   // the decode graphs of that KV scan bucket are captured here and not in the first
                   // measured steps (a capture is a few ms: after 4096 tokens -n 16 read 4-13 % low)
    std::vector<int32_t> w = prompt;
    if (w.empty()) w.push_back(gen.empty() ? 0 : gen[0]);
    ferry::Status st = prefill(engine, w, n_batch, &logits, np);
    if (st.is_ok()) st = decode(engine, {w[0]}, static_cast<int32_t>(w.size()), &logits, np);
    if (!st.is_ok()) return ferry::cli::report(st);
    remove_sequences(engine, np);
  }
  rt.reset_stats();  // per-tier measured times: the measured runs only

  std::vector<Sample> samples;
  for (int32_t r = 0; r < a.reps; ++r) {
    remove_sequences(engine, np);
    Sample s;
    auto t0 = Clock::now();
    double c0 = cpu_ms();
    if (a.n_prompt > 0) {
      ferry::Status st = prefill(engine, prompt, n_batch, &logits, np);
      if (!st.is_ok()) return ferry::cli::report(st);
    }
    s.prefill_ms = ms_since(t0);
    s.prefill_cpu_ms = cpu_ms() - c0;
    t0 = Clock::now();
    c0 = cpu_ms();
    ferry::Status st = decode(engine, gen, a.n_prompt, &logits, np);
    if (!st.is_ok()) return ferry::cli::report(st);
    s.decode_ms = ms_since(t0);
    s.decode_cpu_ms = cpu_ms() - c0;
    samples.push_back(s);
  }
  remove_sequences(engine, np);
  // The GPU report reads the runner's per-tier stats: take it before the timeline pass adds steps.
  const std::string hybrid_text = rt.report_text(a.hybrid.explain);
  const nlohmann::json hybrid_json = rt.report_json();
  const ferry::runtime::ProcessMemory process_memory = rt.vram_peak_process();
  // Host memory before the bandwidth probe (its buffer would count): the model's touched mmap pages,
  // pinned copies, activations (and on the emulated device its arena, which is host memory there).
  const uint64_t host_peak = ferry::host_peak_resident_bytes();
  std::error_code size_err;
  const uint64_t file_bytes = std::filesystem::file_size(a.model, size_err);
  const uint64_t emulated_arena =
      a.device == "emulated" && rt.runner() ? hybrid_json.value("arena_capacity", uint64_t{0}) : 0;
  ferry::cli::warn_profile_after_run(rt);

  // --timeline: an extra, unmeasured pass (recording adds events and turns CUDA graphs off): the first
  // prefill chunk of the prompt, then the first decode steps right after it, all in one recording so
  // the gap between them is real time.
  ferry::exec::Timeline timeline;
  if (timeline_file) {
    const int32_t chunk = std::min(a.n_prompt, n_batch);
    const int32_t n_dec = std::min(a.n_gen, kTimelineDecodeSteps);
    const std::vector<int32_t> tl_prompt(prompt.begin(), prompt.begin() + chunk);
    const std::vector<int32_t> tl_gen(gen.begin(), gen.begin() + n_dec);
    char what[128];
    std::snprintf(what, sizeof what, " | %d-token prefill chunk + %d decode steps", chunk, n_dec);
    const std::string name = std::filesystem::path(a.model).filename().string();
    auto rec = rt.record_timeline((chunk > 0 ? 1 : 0) + n_dec, name + what, [&] {
      engine.seq_rm(0);
      if (chunk > 0) FERRY_RETURN_IF_ERROR(prefill(engine, tl_prompt, n_batch, &logits));
      return decode(engine, tl_gen, chunk, &logits);
    });
    engine.seq_rm(0);
    if (!rec) return ferry::cli::report(rec.status());
    timeline = std::move(*rec);
    const std::string svg = ferry::exec::render_svg(timeline);
    if (std::fwrite(svg.data(), 1, svg.size(), timeline_file.get()) != svg.size() ||
        std::fclose(timeline_file.release()) != 0)
      return ferry::cli::fail("writing --timeline file '" + a.hybrid.timeline_path + "' failed");
  }

  std::vector<double> pp, tg, ttft;
  double pp_cpu = 0, tg_cpu = 0;  // CPU ms per token, mean over runs
  for (const Sample& s : samples) {
    // With -np the rates are totals over the sequences (llama-batched-bench's S_PP and S_TG).
    const double pp_tokens = static_cast<double>(a.n_prompt) * np, tg_tokens = static_cast<double>(a.n_gen) * np;
    if (a.n_prompt > 0) pp_cpu += s.prefill_cpu_ms / pp_tokens / static_cast<double>(samples.size());
    if (a.n_gen > 0) tg_cpu += s.decode_cpu_ms / tg_tokens / static_cast<double>(samples.size());
    if (a.n_prompt > 0) pp.push_back(pp_tokens / (s.prefill_ms / 1e3));
    if (a.n_gen > 0) tg.push_back(tg_tokens / (s.decode_ms / 1e3));
    ttft.push_back(s.prefill_ms);  // the first token comes from the prompt's last logits
  }
  double pp_mean = 0, pp_sd = 0, tg_mean = 0, tg_sd = 0, ttft_mean = 0, ttft_sd = 0;
  if (!pp.empty()) mean_sd(pp, &pp_mean, &pp_sd);
  if (!tg.empty()) mean_sd(tg, &tg_mean, &tg_sd);
  mean_sd(ttft, &ttft_mean, &ttft_sd);

  const uint64_t wbytes = decode_weight_bytes(engine.file(), spec);
  // Per decode step (np tokens, one per sequence): a dense model's weights once, a MoE's at least once.
  const double decode_gb_s = static_cast<double>(wbytes) * tg_mean / np / 1e9;
  const double host_gb_s = a.membw ? ferry::kernels::measure_read_gbs(a.threads) : 0.0;
  const ferry::CpuInfo& ci = ferry::cpu_info();
  const int threads = a.threads > 0 ? a.threads : ci.physical_cores;
  const char* isa = ferry::kernels::cpu_isa_name(rt.cpu_isa());

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["arch_name"] = spec.name;
    j["device"] = a.device;
    j["cpu"] = ci.model_name;
    j["cpu_isa"] = isa;
    j["threads"] = threads;
    j["n_prompt"] = a.n_prompt;
    j["n_gen"] = a.n_gen;
    j["n_batch"] = n_batch;
    j["parallel"] = np;
    j["reps"] = a.reps;
    j["load_ms"] = load_ms;
    j["prefill_tok_s"] = pp_mean;
    j["prefill_tok_s_sd"] = pp_sd;
    j["decode_tok_s"] = tg_mean;
    j["decode_tok_s_sd"] = tg_sd;
    j["ttft_ms"] = ttft_mean;
    j["prefill_cpu_ms_per_tok"] = pp_cpu;
    j["decode_cpu_ms_per_tok"] = tg_cpu;
    j["weight_bytes_per_token"] = wbytes;
    j["decode_gb_s"] = decode_gb_s;
    j["host_gb_s"] = host_gb_s;
    j["decode_bw_fraction"] = host_gb_s > 0 ? decode_gb_s / host_gb_s : 0.0;
    // Device memory of the whole process, read from the driver (cuda), modelled (emulated) or 0 (cpu).
    j["vram_peak_process_bytes"] = process_memory.peak_bytes;
    j["vram_peak_process_source"] = process_memory.source;
    j["host_peak_rss_bytes"] = host_peak;     // VmHWM after the measured runs
    j["model_file_bytes"] = size_err ? 0 : file_bytes;
    if (emulated_arena > 0) j["emulated_arena_bytes"] = emulated_arena;  // host memory inside host_peak_rss_bytes
    if (rt.runner()) {  // on a GPU: device memory, the plan, the hybrid limits
      j["peak_device_bytes"] = hybrid_json.value("arena_peak", uint64_t{0});
      j["context_device_bytes"] = hybrid_json.value("outside_arena", uint64_t{0});
      j["plan"] = hybrid_json;
      j["limit_fraction"] = hybrid_json["limit_fraction"];
    }
    if (!a.hybrid.timeline_path.empty())
      j["timeline"] = {{"path", a.hybrid.timeline_path}, {"spans", timeline.spans.size()},
                       {"steps", timeline.steps.size()}};
    std::printf("%s\n", j.dump().c_str());
    if (!a.hybrid.timeline_path.empty())
      std::fprintf(stderr, "timeline: %s (%zu spans)\n", a.hybrid.timeline_path.c_str(), timeline.spans.size());
    return 0;
  }
  std::printf("model   %s (%s), %.2f GiB of weights read per decoded token\n", a.model.c_str(), spec.name.c_str(),
              static_cast<double>(wbytes) / (1 << 30));
  std::printf("device  %s: %s, %d threads, kernels %s\n", a.device.c_str(), ci.model_name.c_str(), threads, isa);
  if (np > 1) std::printf("parallel %d sequences: rates are totals over them, TTFT is the time to prefill all\n", np);
  if (a.n_prompt > 0)
    std::printf("prefill %5d tokens: %9.2f tok/s (sd %.2f)   TTFT %.1f ms   CPU %.2f ms/tok\n", a.n_prompt, pp_mean,
                pp_sd, ttft_mean, pp_cpu);
  if (a.n_gen > 0) {
    std::printf("decode  %5d tokens: %9.2f tok/s (sd %.2f)   CPU %.2f ms/tok   %.2f GB/s of weights", a.n_gen, tg_mean,
                tg_sd, tg_cpu, decode_gb_s);
    if (host_gb_s > 0) std::printf(" = %.0f%% of host %.2f GB/s", 100.0 * decode_gb_s / host_gb_s, host_gb_s);
    std::printf("\n");
  }
  std::fputs(hybrid_text.c_str(), stdout);
  if (host_peak > 0 && !size_err) {
    std::printf("host memory: peak resident %.2f GiB, model file %.2f GiB", host_peak / 1073741824.0,
                file_bytes / 1073741824.0);
    if (emulated_arena > 0)
      std::printf(" (the peak includes the emulated device's %.2f GiB arena)", emulated_arena / 1073741824.0);
    std::printf("\n");
  }
  if (!a.hybrid.timeline_path.empty())
    std::printf("timeline: %s (%zu spans)\n", a.hybrid.timeline_path.c_str(), timeline.spans.size());
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchArgs a;
  CLI::App app{"Measure prefill and decode speed of a model.", "ferry bench"};
  app.add_option("-m,--model", a.model, "GGUF model file")->required();
  app.add_option("-p,--n-prompt", a.n_prompt, "prompt tokens (prefill)")->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("-n,--n-gen", a.n_gen, "decode steps")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("-t,--threads", a.threads, "CPU threads (0: physical cores)")->check(CLI::Range(0, 4096));
  ferry::cli::add_cpu_isa_option(app, &a.cpu_isa);
  app.add_option("-b,--batch-size", a.batch,
                 "most tokens per prefill step (default: 1024 with the whole model on a GPU, else 512)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-r,--repetitions", a.reps, "measured runs (mean and sd reported)")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--parallel,-P", a.parallel,
                 "sequences prefilled and decoded together, each with its own -p prompt and -n tokens; "
                 "prefill and decode tok/s are totals over them (as llama-batched-bench's -npl)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--device", a.device, "cpu | ref | cuda | emulated")->capture_default_str();
  app.add_flag("--json", a.json, "print one JSON object");
  app.add_flag("!--no-warmup", a.warmup, "skip the warm-up pass");
  app.add_flag("!--no-membw", a.membw, "skip the host bandwidth measurement (host_gb_s = 0)");
  ferry::cli::add_hybrid_options(app, &a.hybrid, true);
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  if (a.n_prompt == 0 && a.n_gen == 0) return ferry::cli::usage_error("nothing to measure: -p and -n are both 0");
  return run(a);
}
