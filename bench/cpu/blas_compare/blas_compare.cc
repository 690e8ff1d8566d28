// blas_compare: ferry's float prefill matmul (CpuOps::matmul, F32 and F16 weights, float panels) against
// OpenBLAS cblas_sgemm on llama3-8b prefill shapes (out[N, T] = W[N rows, K] x[K, T]), GFLOP/s =
// 2 N K T / time (issue 3; bench/RESULTS_cpu.md, "OpenBLAS vs ferry's float prefill kernels").
// Not part of the build or CI: bench/cpu/blas_compare.sh builds it against build-blas's static
// libraries + -lopenblas. One variant per process (so neither side's idle worker threads spin beside
// the other's); the script interleaves variants over rounds.
//   blas_compare VARIANT THREADS REPS
//   VARIANT: ferry_f32 | ferry_f16 | blas_f32 (sgemm, OpenBLAS threads) |
//            blas_f16_rows (THREADS std::threads, each: BLAS_ROW_BLOCK F16 rows -> F32 scratch, then a
//                           1-thread sgemm of that block; the conversion counted, no F32 weight copy) |
//            blas_f16_whole (all of W -> F32 scratch on THREADS threads, then one threaded sgemm) |
//            blas_f16_chunk (W in chunks of BLAS_CHUNK rows, default 1024: each chunk -> F32 scratch on
//                            THREADS threads, then a threaded sgemm of the chunk) |
//            blas_f32_rows (blas_f16_rows without the conversion: the control for the split)
// Output: one line per (N, K, T): best and worst of REPS calls in ms and GFLOP/s.
// OpenBLAS 0.3.21 (Debian 12) does not know this VM's CPU (family 6 model 207) and falls back to its
// Prescott (SSE3) kernels; blas_compare.sh sets OPENBLAS_CORETYPE=SkylakeX (its AVX-512 sgemm).
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "tensor/tensor_view.h"

using namespace ferry;

namespace {

// Row block of the split OpenBLAS paths (env BLAS_ROW_BLOCK, default 512; 128 measured ~10 % slower):
// the F32 scratch of one block is 8 MB at K = 4096, 29 MB at K = 14336, per thread.
int64_t kRowBlock = 512;

__attribute__((target("avx,f16c"))) void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
__attribute__((target("avx,f16c"))) void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = _cvtss_sh(src[i], 0);
}

// Deterministic values in [-1, 1) (a fast LCG: 235 MB of weights).
void fill(float* p, int64_t n, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<int64_t>(s >> 40) - (1ll << 23)) * (1.0f / (1 << 23));
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Column-major sgemm of rows [r0, r1) of W: out[r, t] = sum_k W[r, k] x[k, t] (W rows of K floats,
// x and out token-major with leading dimensions K and N).
void sgemm_rows(const float* w_rows, const float* x, float* out, int64_t rows, int64_t N, int64_t K, int64_t T) {
  cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(T),
              static_cast<int>(K), 1.0f, w_rows, static_cast<int>(K), x, static_cast<int>(K), 0.0f, out,
              static_cast<int>(N));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: blas_compare VARIANT THREADS REPS\n");
    return 2;
  }
  const std::string v = argv[1];
  const int nth = std::atoi(argv[2]);
  const int reps = std::atoi(argv[3]);
  const bool ferry = v.rfind("ferry_", 0) == 0;
  const bool f16 = v == "ferry_f16" || v == "blas_f16_rows" || v == "blas_f16_whole" || v == "blas_f16_chunk";
  if (!ferry && v != "blas_f32" && v != "blas_f16_rows" && v != "blas_f16_whole" && v != "blas_f32_rows" &&
      v != "blas_f16_chunk") {
    std::fprintf(stderr, "error: unknown variant %s\n", v.c_str());
    return 2;
  }
  const bool split = v == "blas_f16_rows" || v == "blas_f32_rows";
  if (const char* e = std::getenv("BLAS_ROW_BLOCK")) kRowBlock = std::max<int64_t>(16, std::atoll(e));
  int64_t chunk = 1024;
  if (const char* e = std::getenv("BLAS_CHUNK")) chunk = std::max<int64_t>(16, std::atoll(e));
  if (!ferry) openblas_set_num_threads(split ? 1 : nth);
  std::unique_ptr<kernels::Ops> ops;
  if (ferry) ops = kernels::make_cpu_ops(nth);

  const int64_t shapes[3][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  const int64_t tokens[2] = {64, 512};
  const int64_t max_nk = 14336 * 4096, max_t = 512, max_kt = 14336 * max_t, max_nt = 14336 * max_t;
  std::vector<float> w32(max_nk), x(max_kt), out(max_nt);
  std::vector<uint16_t> w16(f16 ? max_nk : 0);
  // F32 scratch of the F16 paths: per thread kRowBlock rows (rows), or all of W (whole).
  std::vector<float> conv(v == "blas_f16_whole"   ? max_nk
                          : v == "blas_f16_chunk" ? chunk * 14336
                          : (split ? nth * kRowBlock * 14336 : 0));
  fill(x.data(), max_kt, 2);
  fill(w32.data(), max_nk, 1);
  if (f16) {
    f32_to_f16(w32.data(), w16.data(), max_nk);
    std::vector<float>().swap(w32);  // the F16 paths keep no F32 copy
  }
  std::printf("# %s threads=%d reps=%d %s%s\n", v.c_str(), nth, reps,
              ferry ? kernels::cpu_isa_name(kernels::default_cpu_isa()) : openblas_get_corename(),
              split ? (" row block " + std::to_string(kRowBlock)).c_str()
              : v == "blas_f16_chunk" ? (" chunk " + std::to_string(chunk)).c_str() : "");

  for (const auto& s : shapes) {
    const int64_t N = s[0], K = s[1];
    for (int64_t T : tokens) {
      auto call = [&]() {
        if (ferry) {
          const auto w = TensorView::make(f16 ? DType::F16 : DType::F32,
                                          f16 ? static_cast<void*>(w16.data()) : static_cast<void*>(w32.data()), K, N);
          ops->matmul(w, TensorView::make(DType::F32, x.data(), K, T), TensorView::make(DType::F32, out.data(), N, T));
        } else if (v == "blas_f32") {
          sgemm_rows(w32.data(), x.data(), out.data(), N, N, K, T);
        } else if (v == "blas_f16_whole") {
          std::vector<std::thread> th;
          const int64_t per = (N + nth - 1) / nth;
          for (int i = 0; i < nth; ++i)
            th.emplace_back([&, i] {
              const int64_t r0 = std::min(N, i * per), r1 = std::min(N, r0 + per);
              f16_to_f32(w16.data() + r0 * K, conv.data() + r0 * K, (r1 - r0) * K);
            });
          for (auto& t : th) t.join();
          sgemm_rows(conv.data(), x.data(), out.data(), N, N, K, T);
        } else if (v == "blas_f16_chunk") {
          for (int64_t c0 = 0; c0 < N; c0 += chunk) {
            const int64_t nc = std::min(chunk, N - c0), per = (nc + nth - 1) / nth;
            std::vector<std::thread> th;
            for (int i = 0; i < nth; ++i)
              th.emplace_back([&, i] {
                const int64_t r0 = std::min(nc, i * per), r1 = std::min(nc, r0 + per);
                f16_to_f32(w16.data() + (c0 + r0) * K, conv.data() + r0 * K, (r1 - r0) * K);
              });
            for (auto& t : th) t.join();
            sgemm_rows(conv.data(), x.data(), out.data() + c0, nc, N, K, T);
          }
        } else {  // split: each thread its contiguous share of rows, kRowBlock at a time
          std::vector<std::thread> th;
          const int64_t per = (N + nth - 1) / nth;
          for (int i = 0; i < nth; ++i)
            th.emplace_back([&, i] {
              const int64_t r0 = std::min(N, i * per), r1 = std::min(N, r0 + per);
              float* scratch = f16 ? conv.data() + static_cast<size_t>(i) * kRowBlock * K : nullptr;
              for (int64_t r = r0; r < r1; r += kRowBlock) {
                const int64_t nr = std::min(kRowBlock, r1 - r);
                const float* wr = w32.data() + r * K;
                if (f16) {
                  f16_to_f32(w16.data() + r * K, scratch, nr * K);
                  wr = scratch;
                }
                sgemm_rows(wr, x.data(), out.data() + r, nr, N, K, T);
              }
            });
          for (auto& t : th) t.join();
        }
      };
      call();  // warm-up (first touch, OpenBLAS buffers, ferry scratch)
      double best = 1e30, worst = 0;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        call();
        const double dt = now_s() - t0;
        best = std::min(best, dt);
        worst = std::max(worst, dt);
      }
      // A checksum of a few outputs (the variants must agree to float rounding).
      double cs = 0;
      for (int64_t t = 0; t < T; t += 37) cs += out[t * N + (t * 131) % N];
      const double gf = 2.0 * N * K * T * 1e-9;
      std::printf("%-14s thr=%d N=%5ld K=%5ld T=%3ld best %8.2f ms %6.1f GFLOP/s  worst %8.2f ms %6.1f GFLOP/s  cs %.4f\n",
                  v.c_str(), nth, static_cast<long>(N), static_cast<long>(K), static_cast<long>(T), best * 1e3,
                  gf / best, worst * 1e3, gf / worst, cs);
      std::fflush(stdout);
    }
  }
  return 0;
}
