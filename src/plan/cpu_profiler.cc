// CpuProfiler: see cpu_profiler.h. The bandwidth read loop uses the widest loads this CPU has (64-byte
// vectors on AVX-512, 32 on AVX2) with a software prefetch 4 KiB ahead, as the decode kernels stream.
#include "plan/cpu_profiler.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/cpu_info.h"
#include "plan/profile_stats.h"
#include "tensor/tensor_view.h"

namespace ferry::plan {

namespace {

double since(ProfileClock::time_point t0) {
  return std::chrono::duration<double>(ProfileClock::now() - t0).count();
}

constexpr int64_t kCols = 4096;                    // K of every measured matrix: a realistic hidden size
constexpr int64_t kDecodeRowsMin = 4096;           // one-token calls: at least this many rows ...
constexpr uint64_t kDecodeCallBytes = 32ull << 20;  // ... and about this many weight bytes
constexpr int64_t kMinRows = 512;
constexpr uint64_t kReadPiece = 512ull << 10;       // what a reader claims at a time
constexpr uint8_t kFillByte = 0x3c;

// ---- read loop -------------------------------------------------------------------------------------

using U64x8 = uint64_t __attribute__((vector_size(64)));

// Sums `bytes` (a multiple of 128) from p in two 64-byte accumulators, prefetching 4 KiB ahead. Inlined
// into the per-ISA wrappers below, which compile the vector type to their widest registers.
__attribute__((always_inline)) inline uint64_t sum_stream(const uint8_t* p, size_t bytes) {
  U64x8 a{}, b{};
  for (size_t i = 0; i < bytes; i += 128) {
    __builtin_prefetch(p + i + 4096, 0, 3);
    U64x8 u, v;
    std::memcpy(&u, p + i, sizeof u);
    std::memcpy(&v, p + i + 64, sizeof v);
    a += u;
    b += v;
  }
  a += b;
  uint64_t s = 0;
  for (int k = 0; k < 8; ++k) s += a[k];
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t sum_stream_avx512(const uint8_t* p, size_t n) { return sum_stream(p, n); }
__attribute__((target("avx2"))) uint64_t sum_stream_avx2(const uint8_t* p, size_t n) { return sum_stream(p, n); }
#endif
uint64_t sum_stream_base(const uint8_t* p, size_t n) { return sum_stream(p, n); }

using SumFn = uint64_t (*)(const uint8_t*, size_t);
SumFn widest_sum() {
#if defined(__x86_64__)
  const CpuInfo& ci = cpu_info();
  if (ci.avx512f) return sum_stream_avx512;
  if (ci.avx2) return sum_stream_avx2;
#endif
  return sum_stream_base;
}

std::atomic<uint64_t> g_read_sink{0};  // the sums go somewhere, so the reads cannot be elided

}  // namespace

// ---- buffers ---------------------------------------------------------------------------------------

uint64_t host_buffer_bytes(const MachineInfo& m, uint64_t override_bytes) {
  if (override_bytes > 0) return std::max<uint64_t>(override_bytes, 1ull << 20);
  uint64_t b = m.llc_bytes > 0 ? std::max<uint64_t>(4 * m.llc_bytes, 256ull << 20) : (1ull << 30);
  if (m.host_memory_bytes > 0) b = std::min<uint64_t>(b, m.host_memory_bytes / 4);
  return std::max<uint64_t>(b, 16ull << 20);
}

Expected<std::unique_ptr<MappedBuffer>> MappedBuffer::map(uint64_t bytes, bool huge_pages, ThreadPool& toucher) {
  constexpr uint64_t kAlign = 2ull << 20, kChunk = 1ull << 20;
  bytes = (bytes + kChunk - 1) / kChunk * kChunk;
  const size_t map_bytes = bytes + kAlign;
  void* m = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return make_error(ErrorCode::kOutOfMemory, "cannot map %llu bytes for the profile buffers",
                      static_cast<unsigned long long>(bytes));
  auto* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(m) + kAlign - 1) & ~(kAlign - 1));
  // Advice only: a kernel without transparent huge pages refuses it and the pages stay 4 KiB.
  (void)::madvise(data, bytes, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  toucher.parallel_for(static_cast<int64_t>(bytes / kChunk), [&](int64_t b, int64_t e) {
    std::memset(data + b * kChunk, kFillByte, static_cast<size_t>(e - b) * kChunk);
  });
  return std::unique_ptr<MappedBuffer>(new MappedBuffer(m, map_bytes, data, bytes));
}

MappedBuffer::~MappedBuffer() { ::munmap(map_, map_bytes_); }

// ---- set-up ----------------------------------------------------------------------------------------

Expected<std::unique_ptr<CpuProfiler>> CpuProfiler::create(const CpuKernels& cpu, const ProfileOptions& options,
                                                           int32_t all_threads, uint64_t buffer_bytes) {
  if (!cpu.make_ops) return make_error(ErrorCode::kInvalidArgument, "no CPU kernels to measure");
  std::unique_ptr<CpuProfiler> p(new CpuProfiler(cpu, options, std::max(1, all_threads)));
  ThreadPool& toucher = p->pool_for(p->all_threads_);
  FERRY_ASSIGN_OR_RETURN(p->weight_pool_, MappedBuffer::map(buffer_bytes, /*huge_pages=*/false, toucher));
  if (!options.read_bw) {
    FERRY_ASSIGN_OR_RETURN(p->read_buffer_, MappedBuffer::map(buffer_bytes, /*huge_pages=*/true, toucher));
  }
  FERRY_RETURN_IF_ERROR(p->ops_for(cpu.multithreaded ? p->all_threads_ : 1).status());
  return p;
}

Expected<kernels::Ops*> CpuProfiler::ops_for(int32_t threads) {
  std::unique_ptr<kernels::Ops>& o = ops_[threads];
  if (!o) o = cpu_.make_ops(threads);
  if (!o) return make_error(ErrorCode::kInternal, "CPU kernels '%s' unavailable", cpu_.name.c_str());
  return o.get();
}

ThreadPool& CpuProfiler::pool_for(int32_t threads) {
  std::unique_ptr<ThreadPool>& p = pools_[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

Expected<double> CpuProfiler::call_overhead_us() {
  FERRY_ASSIGN_OR_RETURN(kernels::Ops * ops, ops_for(cpu_.multithreaded ? all_threads_ : 1));
  constexpr int64_t K = 256, N = 16;
  std::vector<float> w(static_cast<size_t>(K * N), 0.01f), x(static_cast<size_t>(K), 1.f), y(static_cast<size_t>(N));
  const TensorView wv = TensorView::make(DType::F32, w.data(), K, N);
  const TensorView xv = TensorView::make(DType::F32, x.data(), K, 1);
  const TensorView yv = TensorView::make(DType::F32, y.data(), N, 1);
  for (int i = 0; i < 20; ++i) ops->matmul(wv, xv, yv);
  constexpr int kCalls = 200;
  std::vector<double> samples;
  for (int s = 0; s < 5; ++s) {
    const auto t0 = ProfileClock::now();
    for (int i = 0; i < kCalls; ++i) ops->matmul(wv, xv, yv);
    samples.push_back(since(t0) / kCalls * 1e6);
  }
  return robust_mean(samples);
}

// ---- bandwidth -------------------------------------------------------------------------------------

// One sample: every thread of the pool claims pieces from the shared cursor (wrapping around the buffer,
// so a piece is read again only after the whole buffer) until `seconds` have passed; bytes over the time
// from the hand-out to the last thread's return. One job per sample: no per-block hand-out, no tail
// where threads wait for each other except the last piece's.
double CpuProfiler::read_sample(int32_t threads, double seconds) {
  if (options_.read_bw) return options_.read_bw(threads, seconds);
  ThreadPool& pool = pool_for(threads);
  const uint64_t pieces = std::max<uint64_t>(1, read_buffer_->bytes() / kReadPiece);
  const uint8_t* base = read_buffer_->data();
  const SumFn sum = widest_sum();
  std::atomic<uint64_t> next{read_cursor_};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  const auto t0 = ProfileClock::now();
  const auto t_end = t0 + std::chrono::duration_cast<ProfileClock::duration>(std::chrono::duration<double>(seconds));
  pool.run([&](int, int) {
    uint64_t s = 0, n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t i = next.fetch_add(1, std::memory_order_relaxed) % pieces;
      s += sum(base + i * kReadPiece, kReadPiece);
      ++n;
      if (ProfileClock::now() >= t_end) stop.store(true, std::memory_order_relaxed);
    }
    done.fetch_add(n, std::memory_order_relaxed);
    g_read_sink.fetch_add(s, std::memory_order_relaxed);
  });
  const double dt = since(t0);
  read_cursor_ = next.load() % pieces;
  return static_cast<double>(done.load() * kReadPiece) / std::max(dt, 1e-9) / 1e9;
}

std::vector<BandwidthPoint> CpuProfiler::measure_bandwidth(const std::vector<int32_t>& threads,
                                                           const CpuSampling& sampling,
                                                           ProfileClock::time_point deadline,
                                                           ProfileProgress& progress) {
  std::vector<std::vector<double>> samples(threads.size());
  if (!options_.read_bw) read_sample(threads.back(), sampling.warmup_s);  // clock ramp, pages mapped in the TLB
  double round_s = 0;
  for (int r = 0; r < sampling.rounds; ++r) {
    if (r >= sampling.min_rounds && ProfileClock::now() + std::chrono::duration<double>(round_s) > deadline) break;
    const auto t_round = ProfileClock::now();
    for (size_t i = 0; i < threads.size(); ++i) {
      progress.step("host memory bandwidth, " + std::to_string(threads[i]) + " threads");
      if (!options_.read_bw) read_sample(threads[i], std::min(0.005, sampling.sample_s));  // this pool awake
      samples[i].push_back(read_sample(threads[i], sampling.sample_s));
    }
    round_s = since(t_round);
  }
  std::vector<BandwidthPoint> out;
  for (size_t i = 0; i < threads.size(); ++i) {
    out.push_back({threads[i], robust_mean(samples[i])});
    spreads_.push_back({relative_spread(samples[i]), "bandwidth, " + std::to_string(threads[i]) + " threads"});
  }
  return out;
}

double CpuProfiler::bandwidth_now(int32_t threads, int samples, double sample_s) {
  if (!options_.read_bw) read_sample(threads, std::min(0.02, sample_s));
  std::vector<double> s;
  for (int i = 0; i < samples; ++i) s.push_back(read_sample(threads, sample_s));
  return robust_mean(s);
}

// ---- matmul ----------------------------------------------------------------------------------------

int64_t CpuProfiler::rows_for_call(DType t, int32_t tokens, double hint_gflops, double call_s) const {
  const uint64_t rb = row_bytes(t, kCols);
  const int64_t pool_rows = static_cast<int64_t>(weight_pool_->bytes() / rb);
  const int64_t decode_rows =
      std::min<int64_t>(std::max<int64_t>(kDecodeRowsMin, static_cast<int64_t>(kDecodeCallBytes / rb) / 64 * 64),
                        pool_rows);
  if (tokens <= 1 || hint_gflops <= 0) return decode_rows;
  const double rows = hint_gflops * 1e9 * call_s / (2.0 * kCols * tokens);
  // decode_rows may be below kMinRows for a tiny pool (tests): the pool wins.
  return std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(rows) / 64 * 64, kMinRows), decode_rows);
}

TensorView CpuProfiler::next_weights(DType t, int64_t rows) {
  const uint64_t bytes = row_bytes(t, kCols) * static_cast<uint64_t>(rows);
  if (weight_cursor_ + bytes > weight_pool_->bytes()) weight_cursor_ = 0;
  TensorView v = TensorView::make(t, weight_pool_->data() + weight_cursor_, kCols, rows);
  weight_cursor_ = (weight_cursor_ + bytes + 63) / 64 * 64;
  return v;
}

// One sample: a warm-up call (the kernels' code and scratch for this shape), then calls until `seconds`.
double CpuProfiler::matmul_sample(kernels::Ops& ops, DType t, int32_t tokens, int64_t rows, double seconds) {
  const size_t xn = static_cast<size_t>(kCols) * tokens, yn = static_cast<size_t>(rows) * tokens;
  if (x_.size() < xn) {
    const size_t old = x_.size();
    x_.resize(xn);
    for (size_t i = old; i < xn; ++i) x_[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  }
  if (y_.size() < yn) y_.resize(yn);  // zero-filled: its pages are touched here, not in a timed call
  const TensorView x = TensorView::make(DType::F32, x_.data(), kCols, tokens);
  const TensorView y = TensorView::make(DType::F32, y_.data(), rows, tokens);
  ops.matmul(next_weights(t, rows), x, y);
  int64_t calls = 0;
  const auto t0 = ProfileClock::now();
  double dt = 0;
  do {
    ops.matmul(next_weights(t, rows), x, y);
    ++calls;
    dt = since(t0);
  } while (dt < seconds);
  return 2.0 * kCols * static_cast<double>(rows) * tokens * static_cast<double>(calls) / std::max(dt, 1e-9) / 1e9;
}

void CpuProfiler::warm_up(kernels::Ops& ops, double seconds) {
  const int64_t rows = rows_for_call(DType::Q4_K, 1, 0, 0);
  const auto t0 = ProfileClock::now();
  do matmul_sample(ops, DType::Q4_K, 1, rows, 0);
  while (since(t0) < seconds);
}

Expected<std::vector<ThroughputCurve>> CpuProfiler::measure_matmul(const CpuPoints& points,
                                                                   const CpuSampling& sampling,
                                                                   ProfileClock::time_point deadline,
                                                                   ProfileProgress& progress) {
  struct Series {
    DType dtype;
    int32_t tokens;
    int64_t rows = 0;
    std::vector<double> gflops;
  };
  std::vector<ThroughputCurve> curves;
  for (int32_t th : points.mm_threads) {
    FERRY_ASSIGN_OR_RETURN(kernels::Ops * ops, ops_for(th));
    std::vector<Series> series;
    for (DType t : points.dtypes)
      for (int32_t n : points.tokens) series.push_back({t, n});
    warm_up(*ops, sampling.warmup_s);
    double round_s = 0;
    for (int r = 0; r < sampling.rounds; ++r) {
      if (r >= sampling.min_rounds && ProfileClock::now() + std::chrono::duration<double>(round_s) > deadline) break;
      const auto t_round = ProfileClock::now();
      for (size_t i = 0; i < series.size(); ++i) {
        Series& s = series[i];
        if (r == 0) {  // rows from the previous token count's first sample (calls of ~a third of a sample)
          const bool first_of_dtype = i == 0 || series[i - 1].dtype != s.dtype;
          s.rows = rows_for_call(s.dtype, s.tokens, first_of_dtype ? 0 : series[i - 1].gflops[0], sampling.sample_s / 3);
        }
        progress.step(std::string("CPU matmul ") + dtype_name(s.dtype) + ", " + std::to_string(th) + " threads, " +
                      std::to_string(s.tokens) + " tokens");
        s.gflops.push_back(matmul_sample(*ops, s.dtype, s.tokens, s.rows, sampling.sample_s));
      }
      round_s = since(t_round);
    }
    for (size_t i = 0; i < series.size(); i += points.tokens.size()) {
      ThroughputCurve c;
      c.dtype = series[i].dtype;
      c.threads = th;
      c.rows = kDecodeRowsMin;
      c.cols = kCols;
      for (size_t k = 0; k < points.tokens.size(); ++k) {
        const Series& s = series[i + k];
        c.tokens.push_back(s.tokens);
        c.gflops.push_back(robust_mean(s.gflops));
        spreads_.push_back({relative_spread(s.gflops), std::string(dtype_name(s.dtype)) + ", " + std::to_string(th) +
                                                          " threads, " + std::to_string(s.tokens) + " tokens"});
      }
      curves.push_back(std::move(c));
    }
  }
  return curves;
}

std::string CpuProfiler::spread_summary() const {
  if (spreads_.empty()) return "";
  std::vector<double> v;
  for (const auto& [spread, name] : spreads_) v.push_back(spread);
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  const auto widest = std::max_element(spreads_.begin(), spreads_.end());
  char b[256];
  std::snprintf(b, sizeof b, "median %.1f %%, widest %.1f %% (%s)", 100 * v[v.size() / 2], 100 * widest->first,
                widest->second.c_str());
  return b;
}

double CpuProfiler::run_load(const std::atomic<bool>& stop) {
  Expected<kernels::Ops*> ops = ops_for(cpu_.multithreaded ? all_threads_ : 1);
  if (!ops) return 0;
  const int64_t rows = rows_for_call(DType::Q4_K, 1, 0, 0);
  const double call_bytes = static_cast<double>(row_bytes(DType::Q4_K, kCols)) * static_cast<double>(rows);
  if (x_.size() < static_cast<size_t>(kCols)) x_.resize(static_cast<size_t>(kCols), 0.1f);
  std::vector<float> y(static_cast<size_t>(rows));
  const TensorView x = TensorView::make(DType::F32, x_.data(), kCols, 1);
  const TensorView yv = TensorView::make(DType::F32, y.data(), rows, 1);
  double bytes = 0;
  const auto t0 = ProfileClock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    (*ops)->matmul(next_weights(DType::Q4_K, rows), x, yv);
    bytes += call_bytes;
  }
  return bytes / std::max(since(t0), 1e-9);
}

}  // namespace ferry::plan
