// moe_stream: one token's routed experts through CpuOps::moe_experts, as a hybrid MoE decode step runs them
// layer after layer (qwen3-30b-a3b's shape by default: Q4_K, d 2048, 768 per expert, 128 experts, 8 routed),
// over L distinct layers, against the host's read rate (measure_read_gbs, ferry bench's `host_gb_s`).
// Between two layers the main thread can wait GAP_US microseconds (the GPU's attention and router in the
// hybrid step), so the pool's workers idle as they do there.
// Memory (MEM): `4k` anonymous memory in 4 KiB pages (MADV_NOHUGEPAGE), `huge` transparent huge pages, `file`
// a file in the page cache mapped read-only (how the hybrid executor's CPU reads its experts: from the mmap).
// Build (no CMake target; links a build folder's static libraries):
//   g++ -std=c++20 -O2 -I src bench/cpu/moe_stream.cc B/libferry_kernels_cpu.a B/libferry_tensor.a \
//       B/libferry_base.a -lpthread -o B/moe_stream
// Run: B/moe_stream THREADS LAYERS ROUNDS   (env MEM GAP_US TYPE D FFE E K; VARIANTS=0,1,.. alternates the
// values of `ferry_bench_variant` when a kernel file under test defines it, as decode_stream.cc does)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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
extern "C" int ferry_bench_variant __attribute__((weak));

namespace {

int64_t env_i(const char* n, int64_t d) {
  const char* e = std::getenv(n);
  return e ? std::atoll(e) : d;
}

// `bytes` of weight memory in the MEM mode; 64 distinct quantized rows per matrix kind, repeated.
uint8_t* map_weights(size_t bytes, const std::string& mem) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (mem == "file") {
    char path[] = "/tmp/moe_stream_XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return nullptr;
    ::unlink(path);
    void* w = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    return w == MAP_FAILED ? nullptr : static_cast<uint8_t*>(w);
  }
  void* map = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  auto* w = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(kHuge - 1));
  ::madvise(w, bytes, mem == "huge" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return w;
}

void fill(DType type, uint8_t* w, int64_t K, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 0.02f);
  const size_t rb = row_bytes(type, K);
  std::vector<float> f(static_cast<size_t>(K));
  for (int64_t r = 0; r < std::min<int64_t>(64, rows); ++r) {
    for (float& v : f) v = nd(rng);
    quantize_row(type, f.data(), w + rb * r, K);
  }
  for (int64_t r = 64; r < rows; ++r) std::memcpy(w + rb * r, w + rb * (r % 64), rb);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 6;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string mem = std::getenv("MEM") ? std::getenv("MEM") : "4k";
  const std::string tname = std::getenv("TYPE") ? std::getenv("TYPE") : "Q4_K";
  const int64_t D = env_i("D", 2048), FFE = env_i("FFE", 768), E = env_i("E", 128), K = env_i("K", 8);
  const int64_t gap_us = env_i("GAP_US", 80);
  DType type = DType::Q4_K;
  for (DType t : kWeightTypes)
    if (tname == dtype_name(t)) type = t;
  const size_t up_bytes = row_bytes(type, D) * static_cast<size_t>(FFE * E);    // gate or up, all experts
  const size_t down_bytes = row_bytes(type, FFE) * static_cast<size_t>(D * E);  // down, all experts
  const size_t layer_bytes = 2 * up_bytes + down_bytes;
  uint8_t* w = map_weights(layer_bytes * layers, mem);
  if (w == nullptr) {
    std::fprintf(stderr, "error: cannot map %zu bytes (%s)\n", layer_bytes * layers, mem.c_str());
    return 1;
  }
  std::mt19937 rng(42);
  std::vector<kernels::ExpertGroup> groups(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    uint8_t* g = w + layer_bytes * l;
    fill(type, g, D, FFE * E, rng);
    fill(type, g + up_bytes, D, FFE * E, rng);
    fill(type, g + 2 * up_bytes, FFE, D * E, rng);
    kernels::ExpertGroup& grp = groups[static_cast<size_t>(l)];
    grp.gate = TensorView::make(type, g, D, FFE, E);
    grp.up = TensorView::make(type, g + up_bytes, D, FFE, E);
    grp.down = TensorView::make(type, g + 2 * up_bytes, FFE, D, E);
    grp.act = kernels::Activation::kSilu;
  }
  std::vector<float> x(static_cast<size_t>(D)), out(static_cast<size_t>(D));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  std::vector<float> gbuf(static_cast<size_t>(FFE * K)), ubuf(gbuf.size()), ybuf(static_cast<size_t>(D * K));
  std::vector<float> weights(static_cast<size_t>(K), 1.f / static_cast<float>(K));
  std::vector<int32_t> ids(static_cast<size_t>(K));
  kernels::MoeScratch ms;
  ms.gate = TensorView::make(DType::F32, gbuf.data(), FFE, K, 1);
  ms.up = TensorView::make(DType::F32, ubuf.data(), FFE, K, 1);
  ms.y = TensorView::make(DType::F32, ybuf.data(), D, K, 1);
  auto ops = kernels::make_cpu_ops(threads);
  const double routed = static_cast<double>(2 * row_bytes(type, D) * FFE + row_bytes(type, FFE) * D) * K;

  // One pass: 4 * layers calls, each on a fresh routing of K distinct experts; the median call's time.
  auto pass = [&]() {
    std::vector<double> us;
    for (int i = 0; i < 4 * layers; ++i) {
      for (int64_t j = 0; j < K; ++j) {
        int32_t e;
        do e = static_cast<int32_t>(rng() % static_cast<uint32_t>(E));
        while (std::find(ids.begin(), ids.begin() + j, e) != ids.begin() + j);
        ids[static_cast<size_t>(j)] = e;
      }
      const auto t0 = std::chrono::steady_clock::now();
      ops->moe_experts(groups[static_cast<size_t>(i % layers)], TensorView::make(DType::F32, x.data(), D, 1),
                       TensorView::make(DType::I32, ids.data(), K, 1), TensorView::make(DType::F32, weights.data(), K, 1),
                       ms, false, TensorView::make(DType::F32, out.data(), D, 1));
      const auto t1 = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() < gap_us) {
      }
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  pass();
  std::vector<int> variants = {-1};
  if (const char* vs = std::getenv("VARIANTS"); vs != nullptr && &ferry_bench_variant != nullptr) {
    variants.clear();
    for (const char* p = vs; *p;) {
      variants.push_back(std::atoi(p));
      while (*p && *p != ',') ++p;
      if (*p == ',') ++p;
    }
  }
  std::vector<std::vector<double>> res(variants.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < variants.size(); ++i) {
      if (variants[i] >= 0) ferry_bench_variant = variants[i];
      res[i].push_back(pass());
    }
  const double bw = kernels::measure_read_gbs(threads, size_t{1} << 30, 2);
  std::printf("%s d=%lld ffe=%lld E=%lld k=%lld threads=%d layers=%d mem=%s gap=%lld us: %.1f MB routed a call, "
              "host %.1f GB/s\n", dtype_name(type), static_cast<long long>(D), static_cast<long long>(FFE),
              static_cast<long long>(E), static_cast<long long>(K), threads, layers, mem.c_str(),
              static_cast<long long>(gap_us), routed / 1e6, bw);
  for (size_t i = 0; i < variants.size(); ++i) {
    std::sort(res[i].begin(), res[i].end());
    const double med = res[i][res[i].size() / 2];
    std::printf("variant %d: median call %.1f us (best pass %.1f): %.1f GB/s, %.1f %% of the host\n", variants[i], med,
                res[i].front(), routed / med / 1e3, 100 * routed / med / 1e3 / bw);
  }
  return 0;
}
