// Profiler: host memory bandwidth (a streaming read over a buffer larger than the LLC), CPU matmul
// throughput through the Ops interface (weights cycled through a pool larger than the LLC so every
// call reads DRAM, as a real step does), and, with a GpuProber, the link alone / under CPU load, the
// CPU under copy load (-> H), device bandwidth, GPU matmul curves, launch overhead and attention times.
#include "plan/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "tensor/quant.h"

namespace ferry::plan {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int64_t kCols = 4096;      // K: a realistic hidden size
constexpr int64_t kRowsFull = 4096;  // rows of one "matrix" in the pool
constexpr double kCpuRecheckRatio = 1.15;    // end-of-profile bandwidth re-check: above it, measure the CPU again
constexpr double kGpuSampleMinShare = 0.02;  // GPU matmul samples slower than this share of copy bandwidth: re-measured

struct AlignedBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit AlignedBuf(size_t bytes) : n(bytes) {
    if (posix_memalign(&p, 4096, bytes) != 0) p = nullptr;
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

// ---- host memory bandwidth ---------------------------------------------------------------------

// Sum of 64-bit words, 4 independent accumulators so the loop is bandwidth-bound, not latency-bound.
uint64_t read_sum(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

double measure_read_bw(const AlignedBuf& buf, int threads, double seconds) {
  const size_t words = buf.n / 8;
  const uint64_t* base = static_cast<const uint64_t*>(buf.p);
  double best = 0;
  std::atomic<uint64_t> sink{0};  // atomic stores keep the sums (and so the reads) from being elided
  const auto t_end = Clock::now() + std::chrono::duration<double>(seconds);
  int reps = 0;
  while (reps < 2 || Clock::now() < t_end) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t a = words * t / threads, b = words * (t + 1) / threads;
        sink += read_sum(base + a, b - a);
      });
    }
    for (auto& th : pool) th.join();
    const double dt = since(t0);
    best = std::max(best, static_cast<double>(buf.n) / dt / 1e9);
    if (++reps >= 50) break;
  }
  return best;
}

// ---- CPU matmul ----------------------------------------------------------------------------------

// A pool of weight rows of one dtype, larger than the LLC; views rotate through it.
struct WeightPool {
  DType dtype;
  size_t row_bytes = 0;
  int64_t rows = 0;
  uint8_t* base = nullptr;
  int64_t next = 0;

  TensorView take(int64_t r) {
    if (next + r > rows) next = 0;
    TensorView v = TensorView::make(dtype, base + static_cast<size_t>(next) * row_bytes, kCols, r);
    next += r;
    return v;
  }
};

// Fills `buf` with rows of `t`: 64 rows quantized from random values, repeated (contents do not
// change the speed of these kernels; quantizing 512 MB with the reference quantizer would).
WeightPool fill_pool(AlignedBuf& buf, DType t, std::mt19937& rng) {
  WeightPool p;
  p.dtype = t;
  p.row_bytes = row_bytes(t, kCols);
  p.rows = static_cast<int64_t>(buf.n / p.row_bytes);
  p.base = static_cast<uint8_t*>(buf.p);
  constexpr int64_t kSeedRows = 64;
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<float> src(static_cast<size_t>(kCols));
  for (int64_t r = 0; r < std::min(kSeedRows, p.rows); ++r) {
    for (float& x : src) x = dist(rng);
    quantize_row(t, src.data(), p.base + static_cast<size_t>(r) * p.row_bytes, kCols);
  }
  const size_t seed_bytes = static_cast<size_t>(std::min(kSeedRows, p.rows)) * p.row_bytes;
  for (size_t off = seed_bytes; off < static_cast<size_t>(p.rows) * p.row_bytes; off += seed_bytes)
    std::memcpy(p.base + off, p.base, std::min(seed_bytes, static_cast<size_t>(p.rows) * p.row_bytes - off));
  return p;
}

struct Point {
  double gflops = 0;
  double seconds = 0;
};

// Rows of a decode-sized call: 32 MiB of weights (at least kRowsFull rows, at most the pool), as a real
// weight matrix is. A 4096 x 4096 Q4_K call is 9 MiB, ~20 us on 16 threads, and measures the thread
// pool's dispatch as much as the kernel (session 8 on the GPU host: one-token Q4_K 423 -> 461 GFLOP/s
// with the larger calls, the rate its FFN matmuls ran at).
int64_t decode_call_rows(const WeightPool& pool) {
  const int64_t rows = std::max<int64_t>(kRowsFull, static_cast<int64_t>((32u << 20) / pool.row_bytes) / 64 * 64);
  return std::min<int64_t>(rows, pool.rows);
}

// Throughput of ops.matmul at `tokens`, rows per call chosen so one call takes ~target/3.
Point measure_matmul(kernels::Ops& ops, WeightPool& pool, int64_t tokens, double rate_hint_gflops, double target_s,
                     std::vector<float>& xbuf, std::vector<float>& ybuf) {
  // At least 512 rows: kernels quantize the activations once per call, which a real weight matrix
  // (thousands of rows) amortizes; a thin slice would measure that overhead instead of the matmul.
  // At most decode_call_rows, and that many while calls are short (the one-token points).
  constexpr int64_t kMinRows = 512;
  const int64_t max_rows = decode_call_rows(pool);
  int64_t r = max_rows;
  if (rate_hint_gflops > 0) {
    const double rows = rate_hint_gflops * 1e9 * (target_s / 3) / (2.0 * kCols * tokens);
    // max_rows may be below kMinRows for a tiny pool (tests): the pool wins.
    r = std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(rows) / 64 * 64, kMinRows), max_rows);
  }
  xbuf.resize(static_cast<size_t>(kCols * tokens));
  ybuf.resize(static_cast<size_t>(r * tokens));
  for (size_t i = 0; i < xbuf.size(); ++i) xbuf[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  TensorView x = TensorView::make(DType::F32, xbuf.data(), kCols, tokens);
  TensorView y = TensorView::make(DType::F32, ybuf.data(), r, tokens);
  const double flops_per_call = 2.0 * kCols * static_cast<double>(r) * tokens;

  // First call warms up (thread pool, page tables); it is the measurement when it alone is long.
  auto t0 = Clock::now();
  ops.matmul(pool.take(r), x, y);
  double first = since(t0);
  if (first >= target_s / 2) return {flops_per_call / first / 1e9, first};
  double timed = 0;
  int calls = 0;
  t0 = Clock::now();
  while (calls < 3 || timed < target_s) {
    ops.matmul(pool.take(r), x, y);
    ++calls;
    timed = since(t0);
    if (calls >= 100000) break;
  }
  return {flops_per_call * calls / timed / 1e9, first + timed};
}

double measure_call_overhead_us(kernels::Ops& ops) {
  constexpr int64_t K = 256, N = 16;
  std::vector<float> w(static_cast<size_t>(K * N), 0.01f), x(static_cast<size_t>(K), 1.f), y(static_cast<size_t>(N));
  TensorView wv = TensorView::make(DType::F32, w.data(), K, N);
  TensorView xv = TensorView::make(DType::F32, x.data(), K, 1);
  TensorView yv = TensorView::make(DType::F32, y.data(), N, 1);
  for (int i = 0; i < 10; ++i) ops.matmul(wv, xv, yv);
  const auto t0 = Clock::now();
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) ops.matmul(wv, xv, yv);
  return since(t0) / kCalls * 1e6;
}

std::vector<int32_t> pow2_upto(int32_t max) {
  std::vector<int32_t> v;
  for (int32_t t = 1; t < max; t *= 2) v.push_back(t);
  v.push_back(max);
  return v;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// Runs n = 1 matmuls (decode_call_rows a call, as the one-token points) over the pool on all threads until
// `stop`; returns weight bytes / s. The CPU's share while copying is the ratio of two of these, so the part
// of a call that copies cannot slow (its dispatch) should be as small as in the calls it predicts. (On the
// GPU host the share read 0.83-0.89 with 4096-row calls while CPU FFNs ran at ~0.75 of their speed during a
// decode step's copies; this accounts for a few per cent of that at most.)
double cpu_load(kernels::Ops& ops, WeightPool& pool, std::atomic<bool>& stop) {
  const int64_t rows = decode_call_rows(pool);
  std::vector<float> x(static_cast<size_t>(kCols), 0.1f), y(static_cast<size_t>(rows));
  TensorView xv = TensorView::make(DType::F32, x.data(), kCols, 1);
  TensorView yv = TensorView::make(DType::F32, y.data(), rows, 1);
  double bytes = 0;
  const auto t0 = Clock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    ops.matmul(pool.take(rows), xv, yv);
    bytes += static_cast<double>(pool.row_bytes) * static_cast<double>(rows);
  }
  return bytes / std::max(since(t0), 1e-9);
}

// GPU attention for llama3-8b's heads (32 q, 8 KV, head_dim 128; the cost model scales to other models by
// KV bytes and flops): decode after 512 / 4K / 32K cells, where the split flash-decoding kernel is far
// from the device bandwidth (~0.7 TB/s at 4K cells on the H200), and the last 512-token chunk of a 4K
// prompt (how ferry prefills long prompts). Each point: the fastest of 3 samples (a stalled sample is
// not the kernel), a few ms of device time in all. nullopt: the prober cannot time attention.
constexpr int32_t kAttnHeads = 32, kAttnKvHeads = 8, kAttnHeadDim = 128;
constexpr int64_t kAttnDecodeCells[] = {512, 4096, 32768};
constexpr int64_t kAttnChunkTokens = 512, kAttnChunkCells = 4096;

Expected<std::optional<GpuAttentionProfile>> measure_attention(GpuProber& gpu, bool quick) {
  GpuAttentionProfile a;
  a.n_head = kAttnHeads;
  a.n_kv_head = kAttnKvHeads;
  a.head_dim = kAttnHeadDim;
  // Microseconds per call.
  auto sample = [&](int64_t cells, int64_t tokens, int reps) -> Expected<double> {
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      Expected<double> s = gpu.time_attention(kAttnHeads, kAttnKvHeads, kAttnHeadDim, cells, tokens, reps);
      if (!s) return s.status();
      const double us = *s / reps * 1e6;
      best = i == 0 ? us : std::min(best, us);
    }
    return std::max(best, 1e-3);  // the profile's lower bound (a fake prober may answer 0)
  };
  for (int64_t cells : kAttnDecodeCells) {
    Expected<double> us = sample(cells, 1, quick ? 20 : 100);
    if (!us && us.status().code() == ErrorCode::kUnsupported) return std::optional<GpuAttentionProfile>();
    if (!us) return us.status();
    a.decode.push_back({1, cells, *us});
  }
  Expected<double> us = sample(kAttnChunkCells, kAttnChunkTokens, quick ? 4 : 20);
  if (!us) return us.status();
  a.prefill.push_back({kAttnChunkTokens, kAttnChunkCells, *us});
  return std::optional<GpuAttentionProfile>(std::move(a));
}

// Keeps, point by point, the faster of two measurements of the same CPU (same threads, dtypes, tokens).
void merge_faster(const CpuProfile& other, CpuProfile* p) {
  for (BandwidthPoint& b : p->mem_bw)
    for (const BandwidthPoint& o : other.mem_bw)
      if (o.threads == b.threads) b.gbs = std::max(b.gbs, o.gbs);
  for (ThroughputCurve& c : p->matmul) {
    for (const ThroughputCurve& o : other.matmul) {
      if (o.dtype != c.dtype || o.threads != c.threads) continue;
      for (size_t i = 0; i < c.tokens.size(); ++i)
        for (size_t k = 0; k < o.tokens.size(); ++k)
          if (o.tokens[k] == c.tokens[i]) c.gflops[i] = std::max(c.gflops[i], o.gflops[k]);
    }
  }
}

}  // namespace

Expected<HardwareProfile> measure_profile(const CpuKernels& cpu, GpuProber* gpu, const ProfileOptions& opt) {
  if (!cpu.make_ops) return make_error(ErrorCode::kInvalidArgument, "no CPU kernels to measure");
  const auto t_start = Clock::now();
  const double budget = opt.time_budget_s > 0 ? opt.time_budget_s : (opt.quick ? 25.0 : 600.0);
  double last_progress = 0;
  auto progress = [&](double f, const std::string& what) {
    last_progress = std::clamp(f, 0.0, 1.0);
    if (opt.progress) opt.progress(last_progress, what);
  };

  HardwareProfile p;
  p.source = "measured";
  p.mode = opt.quick ? "quick" : "full";
  p.created = now_utc();
  p.machine = detect_machine();
  if (gpu) {
    p.machine.gpu_name = gpu->name();
    p.machine.gpu_driver = gpu->driver();
  }
  const int32_t cores = opt.max_threads > 0 ? opt.max_threads : std::max(1, p.machine.cores);
  p.cpu.kernels = cpu.name;
  p.cpu.threads = cpu.multithreaded ? cores : 1;  // what plans should assume these kernels use

  // Buffer: twice the LLC, at least 64 MiB, at most 512 MiB (quick) / 1 GiB, at most 1/8 of RAM.
  uint64_t pool_bytes = std::max<uint64_t>(64ull << 20, 2 * p.machine.llc_bytes);
  pool_bytes = std::min<uint64_t>(pool_bytes, opt.quick ? (512ull << 20) : (1024ull << 20));
  if (p.machine.host_memory_bytes > 0) pool_bytes = std::min<uint64_t>(pool_bytes, p.machine.host_memory_bytes / 8);
  pool_bytes = std::max<uint64_t>(pool_bytes, 16ull << 20);
  if (opt.buffer_bytes > 0) pool_bytes = std::max<uint64_t>(opt.buffer_bytes, 1ull << 20);
  AlignedBuf buf(pool_bytes);
  if (!buf.p) return make_error(ErrorCode::kOutOfMemory, "cannot allocate %llu bytes for the profile buffers",
                                static_cast<unsigned long long>(pool_bytes));
  std::memset(buf.p, 1, buf.n);  // fault the pages in before timing

  const double gpu_share = gpu ? 0.25 : 0.0;
  auto read_bw = [&](int32_t threads, double seconds) {
    return opt.read_bw ? opt.read_bw(threads, seconds) : measure_read_bw(buf, threads, seconds);
  };
  const std::vector<int32_t> bw_threads = opt.quick && cores > 2 ? std::vector<int32_t>{1, std::max(2, cores / 2), cores}
                                                                 : pow2_upto(cores);
  std::vector<DType> dtypes;
  if (opt.quick) dtypes = {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
  else dtypes.assign(std::begin(kWeightTypes), std::end(kWeightTypes));
  const std::vector<int32_t> mm_threads = !cpu.multithreaded ? std::vector<int32_t>{1}
                                          : opt.quick        ? std::vector<int32_t>{cores}
                                                             : pow2_upto(cores);
  const std::vector<int32_t> tokens =
      opt.quick ? std::vector<int32_t>{1, 4, 16, 64, 256, 1024} : pow2_upto(1024);
  const double target = opt.quick ? 0.06 : 0.25;
  std::mt19937 rng(1234);
  std::vector<float> xbuf, ybuf;
  std::unique_ptr<kernels::Ops> full_ops = cpu.make_ops(cpu.multithreaded ? cores : 1);
  if (!full_ops) return make_error(ErrorCode::kInternal, "CPU kernels '%s' unavailable", cpu.name.c_str());
  p.cpu.call_overhead_us = measure_call_overhead_us(*full_ops);

  // 1. Host memory bandwidth by threads; 2. CPU matmul per dtype x threads x tokens, through the Ops
  // ferry runs. A matmul curve ends early once the clock passes `deadline` seconds.
  auto measure_cpu = [&](CpuProfile& out, double deadline, double progress0, double progress_span,
                         const std::string& label) {
    const size_t n_points = bw_threads.size() + dtypes.size() * mm_threads.size() * tokens.size();
    size_t done_points = 0;
    auto step = [&](const std::string& what) {
      progress(progress0 + progress_span * static_cast<double>(done_points++) / n_points, label + what);
    };
    out.mem_bw.clear();
    out.matmul.clear();
    for (int32_t th : bw_threads) {
      step("host memory bandwidth, " + std::to_string(th) + " threads");
      out.mem_bw.push_back({th, read_bw(th, opt.quick ? 0.2 : 0.6)});
    }
    for (DType t : dtypes) {
      WeightPool pool = fill_pool(buf, t, rng);
      for (int32_t th : mm_threads) {
        std::unique_ptr<kernels::Ops> ops = th == (cpu.multithreaded ? cores : 1) ? nullptr : cpu.make_ops(th);
        kernels::Ops& o = ops ? *ops : *full_ops;
        ThroughputCurve c;
        c.dtype = t;
        c.threads = th;
        c.rows = kRowsFull;
        c.cols = kCols;
        double hint = 0;
        for (int32_t n : tokens) {
          if (since(t_start) > deadline && !c.tokens.empty()) {  // over budget: the curve ends here
            ++done_points;
            continue;
          }
          step(std::string("CPU matmul ") + dtype_name(t) + ", " + std::to_string(th) + " threads, " +
               std::to_string(n) + " tokens");
          const Point pt = measure_matmul(o, pool, n, hint, target, xbuf, ybuf);
          c.tokens.push_back(n);
          c.gflops.push_back(pt.gflops);
          hint = pt.gflops;
        }
        out.matmul.push_back(std::move(c));
      }
    }
  };
  measure_cpu(p.cpu, budget * (1.0 - gpu_share), 0.0, 0.9 - gpu_share, "");

  // 3. GPU: link alone and under CPU load, CPU under copy load (H), device bandwidth, kernels.
  if (gpu) {
    const double f0 = 1.0 - gpu_share;
    const uint64_t copy_bytes = 256ull << 20;
    const int reps = opt.quick ? 3 : 10;
    auto gbs = [&](Expected<double> s, uint64_t bytes, int r) -> Expected<double> {
      if (!s) return s.status();
      return static_cast<double>(bytes) * r / std::max(*s, 1e-9) / 1e9;
    };
    LinkProfile l;
    GpuProfile g;
    g.name = gpu->name();
    g.memory_bytes = gpu->memory_bytes();
    g.context_bytes = gpu->context_bytes();
    progress(f0, "host to device copies");
    FERRY_ASSIGN_OR_RETURN(l.h2d_gbs, gbs(gpu->time_h2d(copy_bytes, reps), copy_bytes, reps));
    FERRY_ASSIGN_OR_RETURN(l.d2h_gbs, gbs(gpu->time_d2h(copy_bytes, reps), copy_bytes, reps));
    FERRY_ASSIGN_OR_RETURN(l.h2d_pageable_gbs, gbs(gpu->time_h2d_pageable(copy_bytes, 2), copy_bytes, 2));
    progress(f0 + 0.03, "device memory bandwidth, launch overhead");
    // A device copy reads and writes every byte.
    FERRY_ASSIGN_OR_RETURN(const double d2d, gbs(gpu->time_d2d(copy_bytes, reps), copy_bytes, reps));
    g.mem_bw_gbs = 2 * d2d;
    FERRY_ASSIGN_OR_RETURN(g.launch_us, gpu->launch_overhead_us());

    // Copies while CPU kernels run on all threads.
    WeightPool pool = fill_pool(buf, DType::Q4_K, rng);
    {
      progress(f0 + 0.06, "copies while CPU kernels run");
      std::atomic<bool> stop{false};
      double cpu_rate = 0;
      std::thread load([&] { cpu_rate = cpu_load(*full_ops, pool, stop); });
      Expected<double> h2d = gbs(gpu->time_h2d(copy_bytes, reps), copy_bytes, reps);
      Expected<double> d2h = gbs(gpu->time_d2h(copy_bytes, reps), copy_bytes, reps);
      stop = true;
      load.join();
      if (!h2d) return h2d.status();
      if (!d2h) return d2h.status();
      l.h2d_busy_gbs = *h2d;
      l.d2h_busy_gbs = *d2h;
    }
    {
      // CPU kernels alone, with H2D copies streaming, and alone again: the share kept, and H = both rates.
      // The faster of the two lone windows counts: interference only slows a window down, and a slow lone
      // window makes copies look free (session 8, a busy machine: share 1.0, and the plan built on it
      // streamed 5 FFNs and ran 22 % slower than predicted).
      progress(f0 + 0.10, "CPU kernels while copies run (H)");
      const double window = opt.quick ? 0.5 : 2.0;
      auto load_for = [&](double seconds) {
        std::atomic<bool> stop{false};
        double rate = 0;
        std::thread t([&] { rate = cpu_load(*full_ops, pool, stop); });
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        stop = true;
        t.join();
        return rate;
      };
      const double alone1 = load_for(window);
      FERRY_RETURN_IF_ERROR(gpu->start_background_copies(true, 64ull << 20));
      const double busy = load_for(window);
      FERRY_ASSIGN_OR_RETURN(const GpuProber::CopyStats cs, gpu->stop_background_copies());
      const double alone = std::max(alone1, load_for(window / 2));
      l.cpu_share_while_copying = std::clamp(busy / std::max(alone, 1.0), 1e-3, 1.0);
      l.host_combined_gbs = (busy + cs.bytes / std::max(cs.seconds, 1e-9)) / 1e9;
    }
    l.latency_us = 0;
    {
      // Latency of a small transfer: 4 KiB copies, minus nothing (bandwidth is negligible there).
      Expected<double> s = gpu->time_h2d(4096, 100);
      if (!s) return s.status();
      l.latency_us = *s / 100 * 1e6;
    }
    // GPU matmul curves.
    const std::vector<DType> gdt = opt.quick ? std::vector<DType>{DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                                                                  DType::Q6_K}
                                             : std::vector<DType>(std::begin(kWeightTypes), std::end(kWeightTypes));
    const std::vector<int32_t> gtok = pow2_upto(1024);
    for (size_t i = 0; i < gdt.size(); ++i) {
      progress(f0 + 0.12 + (gpu_share - 0.14) * i / gdt.size(), std::string("GPU matmul ") + dtype_name(gdt[i]));
      ThroughputCurve c;
      c.dtype = gdt[i];
      c.rows = kRowsFull;
      c.cols = kCols;
      for (int32_t n : gtok) {
        const int r = opt.quick ? 5 : 20;
        Expected<double> s = gpu->time_matmul(gdt[i], kRowsFull, kCols, n, r);
        if (!s) return s.status();
        // A decode-sized sample (<= 8 tokens: the matvec kernels, bandwidth-bound) that read the weights at
        // under 2 % of the device's copy bandwidth is a stall, not the kernel (seen once on the H200 right
        // after an Nsight Compute run: a 2.9 s decode step planned); measure again, up to twice, and keep
        // the fastest. Larger token counts are compute-bound and may legitimately be that slow per byte.
        const double weight_bytes = static_cast<double>(row_bytes(gdt[i], kCols)) * kRowsFull * r;
        double best = *s;
        for (int retry = 0; retry < 2 && n <= 8 &&
                            weight_bytes / std::max(best, 1e-12) < kGpuSampleMinShare * g.mem_bw_gbs * 1e9;
             ++retry) {
          Expected<double> again = gpu->time_matmul(gdt[i], kRowsFull, kCols, n, r);
          if (!again) return again.status();
          best = std::min(best, *again);
        }
        c.tokens.push_back(n);
        c.gflops.push_back(2.0 * kRowsFull * kCols * n * r / std::max(best, 1e-9) / 1e9);
      }
      g.matmul.push_back(std::move(c));
    }
    progress(f0 + gpu_share - 0.02, "GPU attention");
    FERRY_ASSIGN_OR_RETURN(g.attention, measure_attention(*gpu, opt.quick));
    p.link = l;
    p.gpu = std::move(g);
  }
  // A machine busy with something else while the CPU was measured (the GPU host right after 4.5 GB of
  // model files were written: 60 GB/s and a quarter of the kernels' speed, against 88 GB/s a minute later)
  // would plan every later run for a CPU that slow. Interference only slows a measurement down, so: measure
  // the bandwidth at all threads again now; if it is more than 15 % above the first figure, measure the CPU
  // again and keep the faster figure of each point.
  if (!p.cpu.mem_bw.empty()) {
    const BandwidthPoint first = p.cpu.mem_bw.back();
    const double again = read_bw(first.threads, opt.quick ? 0.2 : 0.6);
    if (again > kCpuRecheckRatio * first.gbs) {
      CpuProfile second = p.cpu;
      const double deadline = since(t_start) + budget * (1.0 - gpu_share);
      measure_cpu(second, deadline, last_progress, std::max(0.0, 0.99 - last_progress),
                  "again (the machine was busy): ");
      merge_faster(second, &p.cpu);
    }
  }
  p.seconds = std::round(since(t_start) * 10) / 10;
  progress(1.0, "done");
  FERRY_RETURN_IF_ERROR(validate_profile(p, "measured profile"));
  return p;
}

}  // namespace ferry::plan
