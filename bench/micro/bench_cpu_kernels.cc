// Microbenchmarks of CpuOps at llama3-8b shapes, per weight type and dispatch level:
//   matvec/<type>/<isa>        decode: one token, K=4096 x N=14336 (ffn_up); GB/s of weights read.
//                              The weights cycle through >= 1 GiB so they come from DRAM, not the LLC.
//   matvec_hot/<type>/<isa>    the same kernel on a 4096 x 256 matrix that stays in L2 (quantized): the
//                              kernel's compute rate (what it could stream if memory kept up).
//   matmul/<type>/<isa>/<T>    prefill: T tokens, 4096 x 4096; GFLOP/s (2 K N T per call).
//   decode_layers/<type>/<isa> the 7 matmuls of a llama3-8b decode step per layer (q, k, v, o, gate, up,
//                              down; one token), over >= 1 GiB of distinct layers: GB/s of weights,
//                              against membw (decode without the model's other ops).
//   moe_decode/<shape>/<isa>   one token through CpuOps::moe_experts (gate / up, glu, down, weighted sum) at a
//                              mixture-of-experts layer's shape, routed to k random experts, over >= 1 GiB
//                              of distinct layers: GB/s of the routed experts' weights (qwen3-30b-a3b: Q4_K
//                              2048 x 768, 128 experts, 8 routed; gpt-oss-20b: MXFP4 2880 x 2880, 32, 4).
//   act_quant/<type>/<isa>     the act converter of one K=4096 column (run on the calling thread before
//                              each decode matmul while the pool waits); GB/s of floats read.
//   membw                      the host's streaming read bandwidth (kernels/cpu/membw.h).
//   pool_dispatch/<threads>    an empty parallel_for: wake-up + join latency of the thread pool.
//   pool_after_idle/<us>       a job of one 20 us share per thread after the pool idled <us> microseconds
//                              (the caller busy, as a hybrid step's CPU waits for the GPU): 20 us when every
//                              worker joins at once, up to threads x 20 us when the caller runs the shares alone.
// Threads: FERRY_BENCH_THREADS (default: physical cores).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/membw.h"
#include "tensor/quant.h"

namespace {

using ferry::DType;
using ferry::TensorView;
using namespace ferry::kernels;

int bench_threads() {
  const char* e = std::getenv("FERRY_BENCH_THREADS");
  return e != nullptr ? std::atoi(e) : 0;
}

// Random rows of `type`, built from one quantized block row repeated (quantizing 1 GiB is slow).
std::vector<uint8_t> make_weights(DType type, int64_t K, int64_t rows) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 0.02f);
  const int64_t distinct = 64;
  const size_t rb = ferry::row_bytes(type, K);
  std::vector<uint8_t> base(rb * distinct);
  std::vector<float> f(static_cast<size_t>(K));
  for (int64_t r = 0; r < distinct; ++r) {
    for (float& v : f) v = nd(rng);
    ferry::quantize_row(type, f.data(), base.data() + rb * r, K);
  }
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(w.data() + rb * r, base.data() + rb * (r % distinct), rb);
  return w;
}

std::vector<float> make_x(int64_t K, int64_t T) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(K * T));
  for (float& v : x) v = nd(rng);
  return x;
}

void bm_matvec(benchmark::State& st, DType type, CpuIsa isa, bool hot) {
  const int64_t K = 4096, N = hot ? 256 : 14336;  // hot: 0.6-1.1 MB quantized, in L2
  const size_t rb = ferry::row_bytes(type, K), mat_bytes = rb * N;
  const int64_t n_mats = hot ? 1 : static_cast<int64_t>((size_t{1} << 30) / mat_bytes) + 1;
  std::vector<uint8_t> w = make_weights(type, K, N * n_mats);
  std::vector<float> x = make_x(K, 1), y(static_cast<size_t>(N));
  auto ops = make_cpu_ops(bench_threads(), isa);
  int64_t i = 0;
  for (auto _ : st) {
    TensorView wv = TensorView::make(type, w.data() + mat_bytes * static_cast<size_t>(i++ % n_mats), K, N);
    ops->matmul(wv, TensorView::make(DType::F32, x.data(), K, 1), TensorView::make(DType::F32, y.data(), N, 1));
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(mat_bytes) * st.iterations(), benchmark::Counter::kIsRate);
}

struct MoeShape {
  const char* name;
  DType type;
  int64_t d, ffe, n_expert, n_used;
  Activation act;
};
constexpr MoeShape kMoeShapes[] = {{"qwen3-30b-a3b", DType::Q4_K, 2048, 768, 128, 8, Activation::kSilu},
                                   {"gpt-oss-20b", DType::MXFP4, 2880, 2880, 32, 4, Activation::kSwigluOai}};

void bm_moe_decode(benchmark::State& st, MoeShape sh, CpuIsa isa) {
  const size_t up_bytes = ferry::row_bytes(sh.type, sh.d) * static_cast<size_t>(sh.ffe);  // gate and up
  const size_t down_bytes = ferry::row_bytes(sh.type, sh.ffe) * static_cast<size_t>(sh.d);
  const size_t layer_bytes = (2 * up_bytes + down_bytes) * static_cast<size_t>(sh.n_expert);
  const int64_t n_layers = static_cast<int64_t>((size_t{1} << 30) / layer_bytes) + 1;
  std::vector<uint8_t> gate = make_weights(sh.type, sh.d, sh.ffe * sh.n_expert * n_layers);
  std::vector<uint8_t> up = make_weights(sh.type, sh.d, sh.ffe * sh.n_expert * n_layers);
  std::vector<uint8_t> down = make_weights(sh.type, sh.ffe, sh.d * sh.n_expert * n_layers);
  std::vector<float> x = make_x(sh.d, 1), out(static_cast<size_t>(sh.d));
  std::vector<float> g(static_cast<size_t>(sh.ffe * sh.n_used)), u(g.size()), y(static_cast<size_t>(sh.d * sh.n_used));
  std::vector<float> weights(static_cast<size_t>(sh.n_used), 1.f / static_cast<float>(sh.n_used));
  std::vector<int32_t> ids(static_cast<size_t>(sh.n_used));
  std::mt19937 rng(3);
  auto ops = make_cpu_ops(bench_threads(), isa);
  MoeScratch ms;
  ms.gate = TensorView::make(DType::F32, g.data(), sh.ffe, sh.n_used, 1);
  ms.up = TensorView::make(DType::F32, u.data(), sh.ffe, sh.n_used, 1);
  ms.y = TensorView::make(DType::F32, y.data(), sh.d, sh.n_used, 1);
  int64_t layer = 0;
  for (auto _ : st) {
    st.PauseTiming();
    for (int64_t j = 0; j < sh.n_used; ++j) {  // k distinct experts
      int32_t e;
      do e = static_cast<int32_t>(rng() % static_cast<uint32_t>(sh.n_expert));
      while (std::find(ids.begin(), ids.begin() + j, e) != ids.begin() + j);
      ids[static_cast<size_t>(j)] = e;
    }
    const size_t l = static_cast<size_t>(layer++ % n_layers);
    ExpertGroup grp;
    grp.gate = TensorView::make(sh.type, gate.data() + l * up_bytes * sh.n_expert, sh.d, sh.ffe, sh.n_expert);
    grp.up = TensorView::make(sh.type, up.data() + l * up_bytes * sh.n_expert, sh.d, sh.ffe, sh.n_expert);
    grp.down = TensorView::make(sh.type, down.data() + l * down_bytes * sh.n_expert, sh.ffe, sh.d, sh.n_expert);
    grp.act = sh.act;
    st.ResumeTiming();
    ops->moe_experts(grp, TensorView::make(DType::F32, x.data(), sh.d, 1),
                     TensorView::make(DType::I32, ids.data(), sh.n_used, 1), TensorView::make(DType::F32, weights.data(), sh.n_used, 1),
                     ms, false, TensorView::make(DType::F32, out.data(), sh.d, 1));
    benchmark::DoNotOptimize(out.data());
  }
  const double routed = static_cast<double>((2 * up_bytes + down_bytes) * static_cast<size_t>(sh.n_used));
  st.counters["GB/s"] = benchmark::Counter(routed * st.iterations(), benchmark::Counter::kIsRate);
}

void bm_matmul(benchmark::State& st, DType type, CpuIsa isa, int64_t T) {
  const int64_t K = 4096, N = 4096;
  std::vector<uint8_t> w = make_weights(type, K, N);
  std::vector<float> x = make_x(K, T), y(static_cast<size_t>(N * T));
  auto ops = make_cpu_ops(bench_threads(), isa);
  for (auto _ : st) {
    ops->matmul(TensorView::make(type, w.data(), K, N), TensorView::make(DType::F32, x.data(), K, T),
                TensorView::make(DType::F32, y.data(), N, T));
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * K * N * T * st.iterations(), benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(T) * st.iterations(), benchmark::Counter::kIsRate);
}

void bm_decode_layers(benchmark::State& st, DType type, CpuIsa isa) {
  struct Shape {
    int64_t K, N;
  };
  const Shape shapes[] = {{4096, 4096}, {4096, 1024}, {4096, 1024}, {4096, 4096},
                          {4096, 14336}, {4096, 14336}, {14336, 4096}};
  size_t layer_bytes = 0;
  for (const Shape& sh : shapes) layer_bytes += ferry::row_bytes(type, sh.K) * sh.N;
  const int64_t n_layers = static_cast<int64_t>((size_t{1} << 30) / layer_bytes) + 1;
  // One block row per shape, repeated (as make_weights), laid out layer after layer.
  std::vector<std::vector<uint8_t>> rows;
  for (const Shape& sh : shapes) rows.push_back(make_weights(type, sh.K, 1));
  std::vector<uint8_t> wbuf;
  uint8_t* w = nullptr;
  // FERRY_BENCH_WEIGHTS=FILE: the weights are read from FILE's page cache through a private mapping
  // (as a model's are), its bytes overwritten by nothing (timing does not depend on the values).
  const char* file = std::getenv("FERRY_BENCH_WEIGHTS");
  size_t file_bytes = 0;
  if (file != nullptr) {
    const int fd = ::open(file, O_RDONLY);
    struct stat sb {};
    if (fd >= 0 && ::fstat(fd, &sb) == 0 && static_cast<size_t>(sb.st_size) >= layer_bytes * static_cast<size_t>(n_layers)) {
      file_bytes = static_cast<size_t>(sb.st_size);
      void* p = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) w = static_cast<uint8_t*>(p);
    }
    if (fd >= 0) ::close(fd);
    if (w == nullptr) {
      st.SkipWithError("FERRY_BENCH_WEIGHTS: cannot map the file or it is too small");
      return;
    }
  } else {
    wbuf.resize(layer_bytes * static_cast<size_t>(n_layers));
    w = wbuf.data();
  }
  size_t off = 0;
  std::vector<size_t> offs;
  for (int64_t l = 0; l < n_layers; ++l)
    for (size_t i = 0; i < 7; ++i) {
      offs.push_back(off);
      const size_t rb = rows[i].size();
      for (int64_t n = 0; n < shapes[i].N; ++n, off += rb)
        if (file == nullptr) std::memcpy(w + off, rows[i].data(), rb);
    }
  std::vector<float> x = make_x(14336, 1), y(14336);
  auto ops = make_cpu_ops(bench_threads(), isa);
  int64_t l = 0;
  for (auto _ : st) {
    for (size_t i = 0; i < 7; ++i) {
      const Shape& sh = shapes[i];
      TensorView wv = TensorView::make(type, w + offs[static_cast<size_t>(l) * 7 + i], sh.K, sh.N);
      ops->matmul(wv, TensorView::make(DType::F32, x.data(), sh.K, 1), TensorView::make(DType::F32, y.data(), sh.N, 1));
    }
    benchmark::DoNotOptimize(y.data());
    l = (l + 1) % n_layers;
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(layer_bytes) * st.iterations(), benchmark::Counter::kIsRate);
  if (file_bytes > 0) ::munmap(w, file_bytes);
}

void bm_act_quant(benchmark::State& st, DType type, CpuIsa isa) {
  const int64_t K = 4096;
  const cpu::MatKernel& mk = cpu::kernel_table(isa).mat[static_cast<uint32_t>(type)];
  std::vector<float> x = make_x(K, 1);
  std::vector<uint8_t> act(mk.act_bytes(K));
  for (auto _ : st) {
    mk.quantize(x.data(), K, act.data());
    benchmark::DoNotOptimize(act.data());
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(K * 4) * st.iterations(), benchmark::Counter::kIsRate);
}

void bm_membw(benchmark::State& st) {
  double gbs = 0;
  for (auto _ : st) gbs = measure_read_gbs(bench_threads());
  st.counters["GB/s"] = gbs;
}

void bm_pool(benchmark::State& st) {
  ferry::ThreadPool pool(static_cast<int>(st.range(0)));
  int64_t sink = 0;
  for (auto _ : st) pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) { benchmark::DoNotOptimize(sink += e - b); });
}

void spin_us(double us) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) {
  }
}

void bm_pool_after_idle(benchmark::State& st) {
  ferry::ThreadPool pool(bench_threads());
  for (auto _ : st) {
    st.PauseTiming();
    spin_us(static_cast<double>(st.range(0)));
    st.ResumeTiming();
    pool.run([](int, int) { spin_us(20); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (const MoeShape& sh : kMoeShapes)
    for (CpuIsa isa : kAllCpuIsas) {
      if (!cpu_isa_supported(isa)) continue;
      benchmark::RegisterBenchmark(("moe_decode/" + std::string(sh.name) + "/" + cpu_isa_name(isa)).c_str(),
                                   bm_moe_decode, sh, isa)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  std::vector<DType> types(std::begin(ferry::kWeightTypes), std::end(ferry::kWeightTypes));
  types.insert(types.end(), std::begin(ferry::kExpertWeightTypes), std::end(ferry::kExpertWeightTypes));
  for (DType t : types) {
    for (CpuIsa isa : kAllCpuIsas) {
      if (!cpu_isa_supported(isa)) continue;
      const std::string tag = std::string(ferry::dtype_name(t)) + "/" + cpu_isa_name(isa);
      benchmark::RegisterBenchmark(("matvec/" + tag).c_str(), bm_matvec, t, isa, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("matvec_hot/" + tag).c_str(), bm_matvec, t, isa, true)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("act_quant/" + tag).c_str(), bm_act_quant, t, isa)->UseRealTime();
      benchmark::RegisterBenchmark(("decode_layers/" + tag).c_str(), bm_decode_layers, t, isa)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      for (int64_t T : {4, 16, 64, 128, 512})
        benchmark::RegisterBenchmark(("matmul/" + tag + "/" + std::to_string(T)).c_str(), bm_matmul, t, isa, T)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("membw", bm_membw)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("pool_dispatch", bm_pool)->Arg(1)->Arg(2)->Arg(4)->UseRealTime();
  benchmark::RegisterBenchmark("pool_after_idle", bm_pool_after_idle)->Arg(0)->Arg(80)->Arg(500)->UseRealTime()->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
