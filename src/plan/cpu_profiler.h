// CpuProfiler: the host half of a profile. Host read bandwidth by threads and CPU matmul throughput
// per weight type x threads x tokens, each figure the robust mean (profile_stats.h) of samples taken in
// rounds: one sample of every figure per round, so a burst of other work on the machine lands on one
// sample of many figures instead of every sample of one. Everything a sample needs is in place before
// the first round: buffers mapped and touched, thread pools started, a warm-up of all-thread work (the
// clock ramps up, idle cores wake) before each series, and a warm-up call before each matmul sample.
//
// Both buffers are at least 4x the last-level cache, so no figure is a cache's: the bandwidth buffer in
// transparent huge pages (the host's true read rate, as ferry bench's host_gb_s reads it), the weight
// pool in 4 KiB pages, as the CPU sub-layers of a --vram run read their weights (from the model file's
// mapping). The pool holds bytes 0x3c: a valid block of every weight type, with normal scales (F16 1.06,
// BF16 / F32 0.0115, small integer quants); these kernels' speed does not depend on the values, and one
// fill serves every type, so rounds can go over all of them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "plan/profile.h"
#include "plan/profile_progress.h"
#include "plan/profiler.h"

namespace ferry::plan {

using ProfileClock = std::chrono::steady_clock;

// How each figure is sampled.
struct CpuSampling {
  int rounds = 7;          // samples per figure, one per round
  int min_rounds = 3;      // rounds taken whatever the deadline says
  double sample_s = 0.03;  // each sample runs at least this long
  double warmup_s = 0.2;   // all-thread work before a series (a thread count's matmuls, the bandwidth rounds)
};

// What to measure.
struct CpuPoints {
  std::vector<int32_t> bw_threads;  // increasing
  std::vector<DType> dtypes;
  std::vector<int32_t> mm_threads;  // increasing
  std::vector<int32_t> tokens;      // increasing
  // Samples a full set of rounds takes (for progress).
  size_t samples(int rounds) const {
    return static_cast<size_t>(rounds) * (bw_threads.size() + dtypes.size() * mm_threads.size() * tokens.size());
  }
};

// Bytes of a buffer no last-level cache holds: 4x the LLC, at least 256 MiB (1 GiB when the LLC is
// unknown), at most a quarter of the host's memory (never below 16 MiB); `override_bytes` > 0 wins.
uint64_t host_buffer_bytes(const MachineInfo& m, uint64_t override_bytes);

// An anonymous mapping aligned to 2 MiB, filled with 0x3c bytes by a thread pool (first touch spreads
// its pages over the nodes of the threads that read it); unmapped on destruction.
class MappedBuffer {
 public:
  static Expected<std::unique_ptr<MappedBuffer>> map(uint64_t bytes, bool huge_pages, ThreadPool& toucher);
  ~MappedBuffer();
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  MappedBuffer(void* map, size_t map_bytes, uint8_t* data, uint64_t bytes)
      : map_(map), map_bytes_(map_bytes), data_(data), bytes_(bytes) {}
  void* map_;
  size_t map_bytes_;
  uint8_t* data_;
  uint64_t bytes_;
};

class CpuProfiler {
 public:
  // Maps both buffers (buffer_bytes each) and starts a pool for touching them; nothing is timed.
  static Expected<std::unique_ptr<CpuProfiler>> create(const CpuKernels& cpu, const ProfileOptions& options,
                                                       int32_t all_threads, uint64_t buffer_bytes);

  // Fixed cost of one small kernel call on all threads, microseconds (robust mean of batches of calls).
  Expected<double> call_overhead_us();

  // Host read bandwidth at each of `threads`, in rounds; each sample is reported to `progress`.
  std::vector<BandwidthPoint> measure_bandwidth(const std::vector<int32_t>& threads, const CpuSampling& sampling,
                                                ProfileClock::time_point deadline, ProfileProgress& progress);
  // One figure now: `samples` samples at `threads`, back to back (the end-of-profile re-check).
  double bandwidth_now(int32_t threads, int samples, double sample_s);

  // Matmul curves (GFLOP/s by tokens) for every dtype x thread count of `points`; per thread count the
  // rounds go over every dtype x tokens point. Rows per call: see rows_for_call.
  Expected<std::vector<ThroughputCurve>> measure_matmul(const CpuPoints& points, const CpuSampling& sampling,
                                                        ProfileClock::time_point deadline, ProfileProgress& progress);

  // One-token matmul calls (Q4_K, a real matrix's worth of rows a call) on all threads until `stop`;
  // returns the weight bytes they read per second. The CPU load of the copy measurements.
  double run_load(const std::atomic<bool>& stop);

  // Rows of one call at `tokens`: a real matrix's worth for one-token calls (32 MiB of weights, at least
  // 4096 rows: a smaller call measures the thread pool's dispatch as much as the kernel), else as many as
  // take about call_s at `hint_gflops`, at least 512 (the per-call activation quantization is amortized as
  // over a real matrix) and at most that first count, and never more than the pool holds.
  int64_t rows_for_call(DType t, int32_t tokens, double hint_gflops, double call_s) const;

  // The spread of the samples (relative_spread: IQR / median) of every figure measured so far: their
  // median and the widest with its figure's name, e.g. "median 1.2 %, widest 6.3 % (Q6_K, 16 threads,
  // 4 tokens)"; empty before any figure. How noisy the machine was within this profile.
  std::string spread_summary() const;

 private:
  CpuProfiler(CpuKernels cpu, ProfileOptions options, int32_t all_threads)
      : cpu_(std::move(cpu)), options_(std::move(options)), all_threads_(all_threads) {}

  Expected<kernels::Ops*> ops_for(int32_t threads);
  ThreadPool& pool_for(int32_t threads);
  double read_sample(int32_t threads, double seconds);
  TensorView next_weights(DType t, int64_t rows);
  double matmul_sample(kernels::Ops& ops, DType t, int32_t tokens, int64_t rows, double seconds);
  void warm_up(kernels::Ops& ops, double seconds);

  CpuKernels cpu_;
  ProfileOptions options_;
  int32_t all_threads_;
  std::map<int32_t, std::unique_ptr<kernels::Ops>> ops_;   // by threads
  std::map<int32_t, std::unique_ptr<ThreadPool>> pools_;   // bandwidth readers by threads
  std::unique_ptr<MappedBuffer> read_buffer_;              // huge pages: bandwidth
  std::unique_ptr<MappedBuffer> weight_pool_;              // 4 KiB pages: matmul weights
  uint64_t read_cursor_ = 0;                               // next read piece (wraps)
  uint64_t weight_cursor_ = 0;                             // next weight byte (wraps)
  std::vector<float> x_, y_;                               // activations and outputs, grown and touched untimed
  std::vector<std::pair<double, std::string>> spreads_;    // relative_spread and name of every figure measured
};

}  // namespace ferry::plan
