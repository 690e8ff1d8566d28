// Does a Debian BLAS beat ferry's own kernels for the float GEMMs of prefill? OpenBLAS sgemm (f32
// weights, or F16 weights converted to f32 first, as a BLAS path would have to) against CpuOps::matmul
// on F32 / F16 / BF16 weights, llama3-8b shapes, T tokens. GFLOP/s = 2 K N T per call.
// Built only when libopenblas is installed (bench/micro/micro.cmake).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using ferry::DType;
using ferry::TensorView;

int threads() {
  const char* e = std::getenv("FERRY_BENCH_THREADS");
  return e != nullptr ? std::atoi(e) : 1;
}

std::vector<float> randn(size_t n) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

void set_rate(benchmark::State& st, int64_t K, int64_t N, int64_t T) {
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * K * N * T * st.iterations(), benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}

// out[T][N] = x[T][K] * W[N][K]^T; with F16 weights the conversion to f32 is part of each call.
void bm_openblas(benchmark::State& st, bool from_f16) {
  const int64_t K = st.range(0), N = st.range(1), T = st.range(2);
  openblas_set_num_threads(threads());
  std::vector<float> w = randn(static_cast<size_t>(K * N)), x = randn(static_cast<size_t>(K * T)), y(N * T);
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = ferry::fp32_to_fp16(w[i]);
  std::vector<float> wf(w.size());
  for (auto _ : st) {
    const float* wp = w.data();
    if (from_f16) {
      ferry::dequantize_row(DType::F16, w16.data(), wf.data(), K * N);
      wp = wf.data();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(N), static_cast<int>(K),
                1.f, x.data(), static_cast<int>(K), wp, static_cast<int>(K), 0.f, y.data(), static_cast<int>(N));
    benchmark::DoNotOptimize(y.data());
  }
  set_rate(st, K, N, T);
}

void bm_ferry(benchmark::State& st, DType type) {
  const int64_t K = st.range(0), N = st.range(1), T = st.range(2);
  std::vector<float> w = randn(static_cast<size_t>(K * N)), x = randn(static_cast<size_t>(K * T)), y(N * T);
  std::vector<uint8_t> wq(ferry::row_bytes(type, K) * N);
  for (int64_t n = 0; n < N; ++n) ferry::quantize_row(type, w.data() + n * K, wq.data() + ferry::row_bytes(type, K) * n, K);
  auto ops = ferry::kernels::make_cpu_ops(threads());
  for (auto _ : st) {
    ops->matmul(TensorView::make(type, wq.data(), K, N), TensorView::make(DType::F32, x.data(), K, T),
                TensorView::make(DType::F32, y.data(), N, T));
    benchmark::DoNotOptimize(y.data());
  }
  set_rate(st, K, N, T);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t T : {64, 512}) {
    b->Args({4096, 4096, T});
    b->Args({4096, 14336, T});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(bm_openblas, sgemm_f32, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm_openblas, sgemm_from_f16, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm_ferry, F32, DType::F32)->Apply(shapes);
BENCHMARK_CAPTURE(bm_ferry, F16, DType::F16)->Apply(shapes);
BENCHMARK_CAPTURE(bm_ferry, BF16, DType::BF16)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
