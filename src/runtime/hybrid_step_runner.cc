// HybridStepRunner and PeakSampler (hybrid_step_runner.h).
#include "runtime/hybrid_step_runner.h"

#include <algorithm>
#include <utility>

namespace ferry::runtime {

std::shared_ptr<PeakSampler> PeakSampler::for_cuda(int ordinal) {
  auto p = std::make_shared<PeakSampler>();
  p->cuda_ = true;
  p->ordinal_ = ordinal;
  p->sample();  // the context, before the arena: a floor for the peak
  return p;
}

std::shared_ptr<PeakSampler> PeakSampler::modelled(uint64_t modelled_context) {
  auto p = std::make_shared<PeakSampler>();
  p->modelled_context_ = modelled_context;
  return p;
}

void PeakSampler::sample() {
  if (cuda_) {
    const std::optional<uint64_t> v = exec::process_memory_meter(ordinal_).read();
    if (v) {
      peak_ = std::max(peak_, *v);
      read_any_ = true;
    }
    return;
  }
  if (runner_ == nullptr) return;
  if (Expected<exec::MemoryInfo> mi = runner_->device().memory_info()) {
    peak_ = std::max(peak_, modelled_context_ + mi->arena_capacity);
    read_any_ = true;
  }
}

void PeakSampler::after_step(int32_t n_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  int64_t captures = 0;
  if (runner_ != nullptr)
    for (const exec::TierStats& t : runner_->stats()) captures += t.graph_captures;
  const bool new_shape = seen_tokens_.insert(n_tokens).second;
  // reset_stats() zeroes the capture counts: any change is a reason to look.
  const bool captured = captures != captures_seen_;
  captures_seen_ = captures;
  if (new_shape || captured || steps_ % kSampleEvery == 0) sample();
}

ProcessMemory PeakSampler::peak() {
  std::lock_guard<std::mutex> lock(mu_);
  sample();
  ProcessMemory m;
  m.peak_bytes = peak_;
  if (!read_any_) m.source = "none";
  else if (cuda_) m.source = exec::memory_source_name(exec::process_memory_meter(ordinal_).source());
  else m.source = exec::memory_source_name(exec::MemorySource::kModelled);
  return m;
}

HybridStepRunner::HybridStepRunner(std::unique_ptr<exec::HybridRunner> runner, std::string name,
                                   std::shared_ptr<PeakSampler> peak)
    : runner_(std::move(runner)), name_(std::move(name)), peak_(std::move(peak)) {
  if (peak_) peak_->attach(runner_.get());
}

Status HybridStepRunner::run(const engine::StepInput& in, float* logits) {
  if (in.embd != nullptr || in.mrope_pos != nullptr)
    return make_error(ErrorCode::kUnsupported,
                      "image input runs on the CPU for now (--device cpu); the GPU executor takes text only");
  exec::StepIo io;
  io.n_tokens = in.n_tokens;
  io.tokens = in.tokens;
  io.pos = in.pos;
  io.seq = in.seq;
  io.cell = in.cell;
  io.cell_pos = in.cell_pos;
  io.cell_seq = in.cell_seq;
  io.n_cells_scan = in.n_cells_scan;
  io.out_rows = in.out_rows;
  io.n_out = in.n_out;
  const Status st = runner_->run(io, logits);
  if (peak_) peak_->after_step(in.n_tokens);
  return st;
}

}  // namespace ferry::runtime
