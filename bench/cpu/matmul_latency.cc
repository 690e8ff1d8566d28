// matmul_latency: the time of a one-row decode matmul (the act quantization on the calling thread, the
// kernel call setup, one row), per weight type and K: the serial part each decode matmul pays before
// and around its rows (round 3 in bench/RESULTS_cpu.md). Build as bench/cpu/decode_stream.cc.
#include <chrono>
#include <cstdio>
#include <vector>
#include <random>
#include "kernels/cpu/cpu_ops.h"
#include "tensor/quant.h"
using namespace ferry;
int main() {
  for (DType t : {DType::Q4_K, DType::Q4_0, DType::Q6_K}) {
    for (int64_t K : {4096, 14336}) {
      std::vector<uint8_t> w(row_bytes(t, K));
      std::vector<float> x(K), y(4);
      std::mt19937 rng(1); std::normal_distribution<float> nd;
      for (auto& v : x) v = nd(rng);
      quantize_row(t, x.data(), w.data(), K);
      auto ops = kernels::make_cpu_ops(1);
      double best = 1e9;
      for (int r = 0; r < 5; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20000; ++i) ops->matmul(TensorView::make(t, w.data(), K, 1), TensorView::make(DType::F32, x.data(), K, 1), TensorView::make(DType::F32, y.data(), 1, 1));
        double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20000 * 1e6;
        if (us < best) best = us;
      }
      std::printf("%s K=%ld: %.2f us per 1-row matmul\n", dtype_name(t), (long)K, best);
    }
  }
}
