// bench_amx_prefill: CpuOps::matmul at the "amx" level against "avx512" on llama3-8b prefill shapes
// (q/o 4096 x 4096, gate/up 4096 -> 14336, down 14336 -> 4096; T tokens), per quantized type: best
// wall time of a few runs, GMAC/s and the speedup, plus whether the two outputs are bit-equal (they
// must be: tests/kernels/test_cpu_amx.cc). Built by tests/kernels/tests.cmake (EXCLUDE_FROM_ALL):
//   ninja -C build bench_amx_prefill && build/bench_amx_prefill [threads (0: cores)] [T (512)]
// Weights: 64 quantized random rows repeated (quantizing 58 M values per matrix would take seconds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu_info.h"
#include "kernels/cpu/cpu_ops.h"
#include "tensor/quant.h"

using namespace ferry;
using kernels::CpuIsa;

namespace {

double best_ms(kernels::Ops& ops, const TensorView& w, const TensorView& x, const TensorView& y, int reps) {
  ops.matmul(w, x, y);  // warm-up: scratch buffers, page faults, tile config
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops.matmul(w, x, y);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 512;
  const CpuInfo& ci = cpu_info();
  std::printf("cpu %s | amx_tile %d amx_int8 %d | amx usable %d | best level %s | threads %d\n", ci.model_name.c_str(),
              ci.amx_tile, ci.amx_int8, amx_usable(), kernels::cpu_isa_name(kernels::best_cpu_isa()),
              threads > 0 ? threads : ci.physical_cores);
  if (!kernels::cpu_isa_supported(CpuIsa::kAmx)) {
    std::printf("AMX not usable here: nothing to compare\n");
    return 0;
  }
  auto amx = kernels::make_cpu_ops(threads, CpuIsa::kAmx);
  auto avx = kernels::make_cpu_ops(threads, CpuIsa::kAvx512);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Shape {
    const char* name;
    int64_t K, N;
  };
  const Shape shapes[] = {{"q/o", 4096, 4096}, {"gate/up", 4096, 14336}, {"down", 14336, 4096}};
  std::vector<float> x(static_cast<size_t>(14336 * T));
  for (float& v : x) v = nd(rng);
  std::printf("%-5s %-8s %6s %6s %5s %10s %10s %8s %11s %s\n", "type", "matrix", "K", "N", "T", "avx512 ms", "amx ms",
              "speedup", "amx GMAC/s", "bit-equal");
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    double sum_avx = 0, sum_amx = 0;
    for (const Shape& s : shapes) {
      const size_t rb = row_bytes(type, s.K);
      std::vector<uint8_t> w(rb * static_cast<size_t>(s.N));
      std::vector<float> row(static_cast<size_t>(s.K));
      for (int64_t n = 0; n < 64; ++n) {
        for (float& v : row) v = nd(rng) * 0.02f;
        quantize_row(type, row.data(), w.data() + rb * n, s.K);
      }
      for (int64_t n = 64; n < s.N; ++n) std::memcpy(w.data() + rb * n, w.data() + rb * (n % 64), rb);
      std::vector<float> ya(static_cast<size_t>(s.N * T)), yb(ya.size());
      const TensorView wv = TensorView::make(type, w.data(), s.K, s.N);
      const TensorView xv = TensorView::make(DType::F32, x.data(), s.K, T);
      const double ms_avx = best_ms(*avx, wv, xv, TensorView::make(DType::F32, yb.data(), s.N, T), 3);
      const double ms_amx = best_ms(*amx, wv, xv, TensorView::make(DType::F32, ya.data(), s.N, T), 3);
      const bool equal = std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) == 0;
      const double gmac = static_cast<double>(s.K) * static_cast<double>(s.N) * static_cast<double>(T) / 1e9;
      std::printf("%-5s %-8s %6ld %6ld %5ld %10.2f %10.2f %7.2fx %11.0f %s\n", dtype_name(type), s.name,
                  static_cast<long>(s.K), static_cast<long>(s.N), static_cast<long>(T), ms_avx, ms_amx, ms_avx / ms_amx,
                  gmac / (ms_amx / 1e3), equal ? "yes" : "NO");
      const double times = s.K == 14336 ? 1 : 2;  // per layer: q + o, gate + up, down (k/v are small)
      sum_avx += times * ms_avx;
      sum_amx += times * ms_amx;
    }
    std::printf("%-5s layer    (q+o+gate+up+down)            %10.2f %10.2f %7.2fx\n", dtype_name(type), sum_avx, sum_amx,
                sum_avx / sum_amx);
  }
  return 0;
}
