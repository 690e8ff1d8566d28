// Test fakes of the profiler's inputs: SleepyOps, a "CPU" whose matmul sleeps in proportion to the weight
// bytes (its figures are known up to sleep overshoot), and sampling settings that keep tests short.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>

#include "kernels/ops.h"
#include "plan/profiler.h"

namespace ferry::plan {

// Ops whose matmul just sleeps in proportion to the weight bytes (a 20 GB/s "CPU"; slowdown > 1: a
// machine busy with something else).
// one_token: the largest weight bytes of a one-token call, per dtype.
class SleepyOps final : public kernels::Ops {
 public:
  explicit SleepyOps(const double* slowdown = nullptr, std::map<int, uint64_t>* one_token = nullptr)
      : slowdown_(slowdown), one_token_(one_token) {}
  const char* name() const override { return "sleepy"; }
  void matmul(const TensorView& w, const TensorView& x, TensorView) override {
    if (one_token_ != nullptr && x.ne[1] == 1) {
      uint64_t& m = (*one_token_)[static_cast<int>(w.dtype)];
      m = std::max<uint64_t>(m, w.nbytes());
    }
    const double f = slowdown_ ? *slowdown_ : 1.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(f * static_cast<double>(w.nbytes()) / 20e9));
  }
  void embed(const TensorView&, const TensorView&, float, TensorView) override {}
  void rms_norm(const TensorView&, const TensorView&, float, TensorView) override {}
  void add(const TensorView&, const TensorView&, TensorView) override {}
  void scale(const TensorView&, float, TensorView) override {}
  void rope(TensorView, const kernels::BatchMeta&, const kernels::RopeParams&) override {}
  void kv_store(const TensorView&, const TensorView&, const kernels::BatchMeta&, kernels::KvView) override {}
  void attention(const TensorView&, const kernels::KvView&, const kernels::BatchMeta&, const kernels::AttnParams&,
                 TensorView) override {}
  void glu(const TensorView&, const TensorView&, kernels::Activation, TensorView) override {}
  void gather_rows(const TensorView&, const int32_t*, TensorView) override {}

 private:
  const double* slowdown_;
  std::map<int, uint64_t>* one_token_;
};

// Few, short samples: the tests check the bookkeeping, not the figures' fidelity.
inline void fast_sampling(ProfileOptions* o) {
  o->rounds = 3;
  o->sample_s = 0.01;
  o->copy_window_s = 0.05;
}

inline CpuKernels sleepy() {
  CpuKernels k;
  k.name = "sleepy";
  k.multithreaded = false;
  k.make_ops = [](int32_t) -> std::unique_ptr<kernels::Ops> { return std::make_unique<SleepyOps>(); };
  return k;
}

}  // namespace ferry::plan
