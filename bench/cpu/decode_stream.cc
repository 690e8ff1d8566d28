// decode_stream: the decode matmuls of a llama3-8b step (per layer: q/k/v as one matmul_many, o, gate/up
// as one matmul_many, down; one token) over L distinct layers held in transparent huge pages, as the CPU
// engine's weights are, against the host's read rate (measure_read_gbs, the `host_gb_s` of ferry
// bench), the two interleaved. The model's other ops are left out: this is the ceiling ferry bench's
// decode GB/s can reach with the current matmul path.
// Build (no CMake target; links the build folder's static libraries):
//   g++ -std=c++20 -O2 -I src bench/cpu/decode_stream.cc build-h6/libferry_kernels_cpu.a \
//       build-h6/libferry_tensor.a build-h6/libferry_base.a -lpthread -o build-h6/decode_stream
// Run: build-h6/decode_stream TYPE THREADS LAYERS ROUNDS   (TYPE: Q4_K | Q4_0 | Q8_0 ...; the dispatch
// level from FERRY_CPU_ISA as in ferry)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/membw.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/tensor_view.h"

using namespace ferry;
// Experiments: a kernel file under test may define `extern "C" int ferry_bench_variant` (temporarily) and
// branch on it; VARIANTS=0,1,... then alternates the values pass by pass (weak: absent by default).
extern "C" int ferry_bench_variant __attribute__((weak));

int main(int argc, char** argv) {
  const std::string tname = argc > 1 ? argv[1] : "Q4_K";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 12;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  DType type = DType::Q4_K;
  bool found = false;
  for (DType t : kWeightTypes)
    if (tname == dtype_name(t)) type = t, found = true;
  if (!found) {
    std::fprintf(stderr, "unknown type %s\n", tname.c_str());
    return 2;
  }
  struct Shape {
    int64_t K, N;
  };
  // DIM / KVD / FF (environment) give other models' shapes, e.g. smollm2-135m: DIM=576 KVD=192 FF=1536.
  auto env_i = [](const char* n, int64_t d) { const char* e = std::getenv(n); return e ? std::atoll(e) : d; };
  const int64_t D = env_i("DIM", 4096), KVD = env_i("KVD", 1024), FF = env_i("FF", 14336);
  const Shape shapes[7] = {{D, D}, {D, KVD}, {D, KVD}, {D, D}, {D, FF}, {D, FF}, {FF, D}};
  size_t layer_bytes = 0;
  for (const Shape& s : shapes) layer_bytes += row_bytes(type, s.K) * static_cast<size_t>(s.N);
  const size_t total = layer_bytes * static_cast<size_t>(layers);
  constexpr size_t kHuge = size_t{2} << 20;
  void* map = ::mmap(nullptr, total + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 1;
  auto* w = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(kHuge - 1));
  ::madvise(w, total, MADV_HUGEPAGE);
  // 64 distinct quantized rows per shape, repeated.
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::vector<TensorView> views;
  size_t off = 0, base[7] = {};
  for (int l = 0; l < layers; ++l)
    for (int si = 0; si < 7; ++si) {
      const Shape& s = shapes[si];
      const size_t rb = row_bytes(type, s.K);
      if (l == 0) {
        base[si] = off;
        std::vector<float> f(static_cast<size_t>(s.K));
        for (int r = 0; r < 64; ++r) {
          for (float& v : f) v = nd(rng);
          quantize_row(type, f.data(), w + off + rb * r, s.K);
        }
      }
      for (int64_t r = (l == 0 ? 64 : 0); r < s.N; ++r)
        std::memcpy(w + off + rb * r, w + base[si] + rb * (r % 64), rb);
      views.push_back(TensorView::make(type, w + off, s.K, s.N));
      off += rb * static_cast<size_t>(s.N);
    }
  std::vector<float> x(std::max(D, FF)), y(std::max(D, FF) * 3);
  for (float& v : x) v = nd(rng) * 50;
  auto ops = kernels::make_cpu_ops(threads);
  auto xv = [&](int64_t K) { return TensorView::make(DType::F32, x.data(), K, 1); };
  auto pass = [&]() {
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < layers; ++l) {
      const TensorView* v = views.data() + 7 * l;
      const TensorView* qkv[3] = {&v[0], &v[1], &v[2]};
      TensorView o3[3] = {TensorView::make(DType::F32, y.data(), D, 1),
                          TensorView::make(DType::F32, y.data() + D, KVD, 1),
                          TensorView::make(DType::F32, y.data() + D + KVD, KVD, 1)};
      ops->matmul_many(3, qkv, xv(D), o3);
      ops->matmul(v[3], xv(D), TensorView::make(DType::F32, y.data(), D, 1));
      const TensorView* gu[2] = {&v[4], &v[5]};
      TensorView o2[2] = {TensorView::make(DType::F32, y.data(), FF, 1),
                          TensorView::make(DType::F32, y.data() + FF, FF, 1)};
      ops->matmul_many(2, gu, xv(D), o2);
      ops->matmul(v[6], xv(FF), TensorView::make(DType::F32, y.data(), D, 1));
    }
    return static_cast<double>(total) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  };
  pass();
  if (const char* vs = std::getenv("VARIANTS"); vs != nullptr && &ferry_bench_variant != nullptr) {
    // Variants of the kernel under test, alternated pass by pass: median per variant.
    std::vector<int> vv;
    for (const char* p = vs; *p;) {
      vv.push_back(std::atoi(p));
      while (*p && *p != ',') ++p;
      if (*p == ',') ++p;
    }
    std::vector<std::vector<double>> res(vv.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < vv.size(); ++i) {
        ferry_bench_variant = vv[i];
        res[i].push_back(pass());
      }
    const double bw = kernels::measure_read_gbs(threads, size_t{1} << 30, 2);
    for (size_t i = 0; i < vv.size(); ++i) {
      std::sort(res[i].begin(), res[i].end());
      std::printf("variant %d: median %.2f best %.2f GB/s (%.1f %% of membw %.2f)\n", vv[i], res[i][res[i].size() / 2],
                  res[i].back(), 100 * res[i][res[i].size() / 2] / bw, bw);
    }
    return 0;
  }
  std::printf("%s threads=%d layers=%d (%.2f GB)\n", dtype_name(type), threads, layers, total / 1e9);
  for (int r = 0; r < rounds; ++r) {
    double best = 0, sum = 0;
    for (int i = 0; i < 5; ++i) {
      const double g = pass();
      sum += g;
      if (g > best) best = g;
    }
    const double bw = kernels::measure_read_gbs(threads, size_t{1} << 30, 2);
    std::printf("round %d: decode matmuls mean %.2f best %.2f GB/s, membw %.2f GB/s: %.1f %% (best %.1f %%)\n", r,
                sum / 5, best, bw, 100 * sum / 5 / bw, 100 * best / bw);
    std::fflush(stdout);
  }
  ::munmap(map, total + kHuge);
  return 0;
}
