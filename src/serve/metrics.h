// The server's metrics as Prometheus text (GET /metrics): HTTP requests by endpoint and status, the
// scheduler's requests, tokens, queue and steps, KV cells, and the process's memory (resident set, and
// device memory under a VRAM budget).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "serve/scheduler.h"

namespace ferry::serve {

// HTTP responses by (endpoint, status), counted by the server's threads.
class HttpCounters {
 public:
  void count(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[{endpoint, status}];
  }
  std::map<std::pair<std::string, int>, int64_t> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

struct MemoryFigures {
  uint64_t resident_bytes = 0;     // this process's resident set
  uint64_t vram_peak_bytes = 0;    // device memory of the process (peak), 0 without a GPU
  uint64_t vram_budget_bytes = 0;  // --vram, 0 without one
};

// This process's resident set size, from /proc/self/statm (0 if unreadable).
uint64_t resident_bytes();

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, int64_t>& http,
                            const MemoryFigures& mem, int32_t n_parallel, int32_t ctx_per_request);

}  // namespace ferry::serve
