// Prometheus text exposition (version 0.0.4) of the server's figures (metrics.h).
#include "serve/metrics.h"

#include <unistd.h>

#include <cstdio>

namespace ferry::serve {

namespace {

class Writer {
 public:
  void metric(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void value(const std::string& name_and_labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %.17g\n", v);
    out_ += name_and_labels + buf;
  }
  void one(const char* name, const char* type, const char* help, double v) {
    metric(name, type, help);
    value(name, v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, int64_t>& http,
                            const MemoryFigures& mem, int32_t n_parallel, int32_t ctx_per_request) {
  Writer w;
  w.metric("ferry_http_requests_total", "counter", "HTTP responses by endpoint and status code.");
  for (const auto& [key, n] : http)
    w.value("ferry_http_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
            static_cast<double>(n));
  w.metric("ferry_requests_total", "counter", "Generation requests that ended, by how they ended.");
  for (int r = 0; r < 4; ++r)
    w.value(std::string("ferry_requests_total{finish=\"") + finish_reason_name(static_cast<FinishReason>(r)) + "\"}",
            static_cast<double>(s.finished[r]));
  w.one("ferry_requests_rejected_total", "counter", "Requests refused because the queue was full (429).",
        static_cast<double>(s.rejected_busy));
  w.one("ferry_requests_running", "gauge", "Requests generating now.", s.running);
  w.one("ferry_requests_queued", "gauge", "Requests waiting for a sequence or for KV cells.", s.queued);
  w.one("ferry_parallel_sequences", "gauge", "Sequences generated at once (--parallel).", n_parallel);
  w.one("ferry_prompt_tokens_total", "counter", "Prompt tokens computed.", static_cast<double>(s.prompt_tokens));
  w.one("ferry_prompt_tokens_reused_total", "counter", "Prompt tokens found in the KV cache, not computed again.",
        static_cast<double>(s.prompt_tokens_reused));
  w.one("ferry_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens));
  w.one("ferry_steps_total", "counter", "Engine steps run.", static_cast<double>(s.steps));
  w.one("ferry_step_tokens_total", "counter", "Tokens in those steps (decode and prompt).",
        static_cast<double>(s.step_tokens));
  w.one("ferry_step_seconds_total", "counter", "Time spent in engine steps.", s.step_seconds);
  w.one("ferry_last_step_seconds", "gauge", "Duration of the last engine step.", s.last_step_ms / 1e3);
  w.one("ferry_kv_cells", "gauge", "KV cache cells shared by all requests.", s.kv_cells_total);
  w.one("ferry_kv_cells_reserved", "gauge", "KV cells reserved by running requests.", s.kv_cells_reserved);
  w.one("ferry_kv_cells_cached", "gauge", "KV cells keeping finished requests' prompts for reuse.", s.kv_cells_cached);
  w.one("ferry_context_per_request", "gauge", "Most tokens (prompt + reply) of one request.", ctx_per_request);
  w.one("ferry_resident_memory_bytes", "gauge", "Resident set size of the process.",
        static_cast<double>(mem.resident_bytes));
  w.one("ferry_vram_peak_bytes", "gauge", "Peak device memory of the process (0 without a GPU).",
        static_cast<double>(mem.vram_peak_bytes));
  w.one("ferry_vram_budget_bytes", "gauge", "The process's VRAM budget (--vram; 0 without one).",
        static_cast<double>(mem.vram_budget_bytes));
  return w.take();
}

}  // namespace ferry::serve
