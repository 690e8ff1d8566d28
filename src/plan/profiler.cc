// measure_profile in named phases: settle the machine (file writes in flight), describe it, measure the
// host (cpu_profiler.h), the GPU (gpu_profiler.h), and re-check that the machine was not busy while the
// host was measured. remeasure_cpu: the host figures of some weight types again, for the run-time check.
#include "plan/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <map>
#include <set>

#include "plan/cpu_profiler.h"
#include "plan/gpu_profiler.h"
#include "plan/machine_load.h"
#include "plan/profile_progress.h"

namespace ferry::plan {

namespace {

double since(ProfileClock::time_point t0) {
  return std::chrono::duration<double>(ProfileClock::now() - t0).count();
}

constexpr double kCpuRecheckRatio = 1.15;  // end-of-profile bandwidth re-check: above it, measure the CPU again
constexpr double kFileWriteWaitS = 60;     // at most this long for pending file writes before measuring
const std::vector<int32_t> kQuickTokens = {1, 4, 16, 64, 256, 1024};
const std::vector<DType> kQuickDtypes = {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};

std::vector<int32_t> pow2_upto(int32_t max) {
  std::vector<int32_t> v;
  for (int32_t t = 1; t < max; t *= 2) v.push_back(t);
  v.push_back(max);
  return v;
}

// Threads whose figures plans should assume: physical cores (or the caller's maximum).
int32_t all_threads(const ProfileOptions& opt, const MachineInfo& m) {
  return opt.max_threads > 0 ? opt.max_threads : std::max(1, m.cores);
}

CpuSampling cpu_sampling(const ProfileOptions& opt) {
  CpuSampling s;
  s.rounds = opt.rounds > 0 ? opt.rounds : 7;
  s.min_rounds = std::min(s.min_rounds, s.rounds);
  s.sample_s = opt.sample_s > 0 ? opt.sample_s : (opt.quick ? 0.03 : 0.04);
  s.warmup_s = std::clamp(s.sample_s * 7, 0.02, opt.quick ? 0.2 : 0.5);
  return s;
}

// Quick: bandwidth at 1, half and all cores; F16, Q8_0, Q4_0, Q4_K, Q6_K at all cores, 6 token counts.
// Full: every power of two of threads, every weight type, tokens 1, 2, 4, ... 1024.
CpuPoints cpu_points(const ProfileOptions& opt, const CpuKernels& cpu, int32_t cores) {
  CpuPoints pts;
  pts.bw_threads = opt.quick && cores > 2 ? std::vector<int32_t>{1, std::max(2, cores / 2), cores} : pow2_upto(cores);
  if (opt.quick) pts.dtypes = kQuickDtypes;
  else pts.dtypes.assign(std::begin(kWeightTypes), std::end(kWeightTypes));
  pts.mm_threads = !cpu.multithreaded ? std::vector<int32_t>{1} : opt.quick ? std::vector<int32_t>{cores} : pow2_upto(cores);
  pts.tokens = opt.quick ? kQuickTokens : pow2_upto(1024);
  return pts;
}

// Phase: identity of the machine and the profile's header.
HardwareProfile describe_machine(const CpuKernels& cpu, GpuProber* gpu, const ProfileOptions& opt) {
  HardwareProfile p;
  p.source = "measured";
  p.mode = opt.quick ? "quick" : "full";
  p.created = now_utc();
  p.machine = detect_machine();
  if (!cpu.simd.empty()) p.machine.simd = cpu.simd;
  if (gpu) {
    p.machine.gpu_name = gpu->name();
    p.machine.gpu_driver = gpu->driver();
  }
  p.cpu.kernels = cpu.name;
  p.cpu.threads = cpu.multithreaded ? all_threads(opt, p.machine) : 1;  // what plans should assume these kernels use
  return p;
}

// Phase: host bandwidth by threads, then the matmul curves, all of it walking progress [begin, end).
Status measure_host(CpuProfiler& host, const CpuPoints& pts, const CpuSampling& s, ProfileClock::time_point deadline,
                    ProfileProgress& progress, double begin, double end, CpuProfile* out) {
  progress.begin_span(begin, end, pts.samples(s.rounds));
  out->mem_bw = host.measure_bandwidth(pts.bw_threads, s, deadline, progress);
  FERRY_ASSIGN_OR_RETURN(out->matmul, host.measure_matmul(pts, s, deadline, progress));
  return Status::ok();
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

// Phase: a machine busy with something else for the whole CPU part (another job, a model file's
// writeback) would plan every later run for a CPU that slow; the rounds only outvote short bursts.
// Interference only slows a measurement down, so: the bandwidth at all threads again; if more than 15 %
// above the first figure, the CPU part again, each point keeping the faster of its two figures (docs/
// PLANNER.md, "A busy machine"). Returns whether it measured again.
Expected<bool> recheck_if_busy(CpuProfiler& host, const CpuPoints& pts, const CpuSampling& s,
                               ProfileClock::time_point deadline, ProfileProgress& progress, CpuProfile* cpu) {
  if (cpu->mem_bw.empty()) return false;
  const BandwidthPoint first = cpu->mem_bw.back();
  progress.report(progress.last(), "host memory bandwidth again (was the machine busy?)");
  const double again = host.bandwidth_now(first.threads, std::max(3, s.min_rounds), s.sample_s);
  if (!(again > kCpuRecheckRatio * first.gbs)) return false;
  CpuProfile second = *cpu;
  progress.set_prefix("again (the machine was busy): ");
  const Status st = measure_host(host, pts, s, deadline, progress, progress.last(), 0.99, &second);
  progress.set_prefix("");
  FERRY_RETURN_IF_ERROR(st);
  merge_faster(second, cpu);
  return true;
}

// The profile's notes: what else the machine did while the CPU was measured, how much the samples of a
// figure scattered, and what the profiler did about a busy machine.
std::string load_note(const MachineLoadMeter::Load& l, const std::string& spread, double waited_s,
                      bool measured_again) {
  char b[256];
  std::snprintf(b, sizeof b, "while the CPU was measured: other processes %.2f cores, hypervisor steal %.2f cores",
                l.other_cores, l.steal_cores);
  std::string s = b;
  if (!spread.empty()) s += "; CPU samples' spread (IQR / median): " + spread;
  if (waited_s > 0) {
    std::snprintf(b, sizeof b, "; waited %.1f s for file writes first", waited_s);
    s += b;
  }
  if (measured_again) s += "; measured twice (the machine was busy), faster figures kept";
  return s;
}

}  // namespace

Expected<HardwareProfile> measure_profile(const CpuKernels& cpu, GpuProber* gpu, const ProfileOptions& opt) {
  if (!cpu.make_ops) return make_error(ErrorCode::kInvalidArgument, "no CPU kernels to measure");
  const auto t_start = ProfileClock::now();
  const double budget = opt.time_budget_s > 0 ? opt.time_budget_s : (opt.quick ? 60.0 : 900.0);
  ProfileProgress progress(opt.progress);
  const double host_end = gpu ? 0.75 : 0.95, gpu_end = gpu ? 0.95 : host_end;

  const double waited = wait_for_file_writes(kFileWriteWaitS, [&](const std::string& what) { progress.report(0, what); });
  // The budget counts from here: the wait is not measuring.
  const auto host_deadline = ProfileClock::now() + std::chrono::duration_cast<ProfileClock::duration>(
                                                       std::chrono::duration<double>(budget * (gpu ? 0.7 : 0.9)));
  HardwareProfile p = describe_machine(cpu, gpu, opt);
  const int32_t cores = all_threads(opt, p.machine);
  const CpuPoints pts = cpu_points(opt, cpu, cores);
  const CpuSampling sampling = cpu_sampling(opt);

  progress.report(0, "preparing host buffers");
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CpuProfiler> host,
                         CpuProfiler::create(cpu, opt, cores, host_buffer_bytes(p.machine, opt.buffer_bytes)));
  FERRY_ASSIGN_OR_RETURN(p.cpu.call_overhead_us, host->call_overhead_us());
  MachineLoadMeter load;
  FERRY_RETURN_IF_ERROR(measure_host(*host, pts, sampling, host_deadline, progress, 0.0, host_end, &p.cpu));
  const MachineLoadMeter::Load host_load = load.since_start();
  const std::string host_spread = host->spread_summary();

  if (gpu) {
    LinkProfile l;
    GpuProfile g;
    const CpuLoad cpu_load = [&](const std::atomic<bool>& stop) { return host->run_load(stop); };
    FERRY_RETURN_IF_ERROR(measure_gpu_part(*gpu, cpu_load, opt, progress, host_end, gpu_end, &l, &g));
    p.link = l;
    p.gpu = std::move(g);
  }
  const auto recheck_deadline = ProfileClock::now() + std::chrono::duration_cast<ProfileClock::duration>(
                                                          std::chrono::duration<double>(budget * 0.5));
  FERRY_ASSIGN_OR_RETURN(const bool again, recheck_if_busy(*host, pts, sampling, recheck_deadline, progress, &p.cpu));
  p.notes = load_note(host_load, host_spread, waited, again);
  p.seconds = std::round(since(t_start) * 10) / 10;
  progress.report(1.0, "done");
  FERRY_RETURN_IF_ERROR(validate_profile(p, "measured profile"));
  return p;
}

Status remeasure_cpu(const CpuKernels& cpu, const std::vector<DType>& dtypes, const ProfileOptions& opt,
                     HardwareProfile* p) {
  if (!cpu.make_ops) return make_error(ErrorCode::kInvalidArgument, "no CPU kernels to measure");
  if (p->cpu.mem_bw.empty()) return make_error(ErrorCode::kInvalidArgument, "the profile has no host bandwidth");
  // What to measure: the bandwidth points the profile has; per dtype, its curves' thread and token counts
  // (a dtype without a curve: the thread counts of the others, the quick token counts). Grouped by
  // (threads, tokens) so each group is one set of rounds.
  std::set<int32_t> curve_threads;
  for (const ThroughputCurve& c : p->cpu.matmul) curve_threads.insert(c.threads);
  if (curve_threads.empty()) curve_threads.insert(p->cpu.threads);
  std::map<std::pair<int32_t, std::vector<int32_t>>, std::vector<DType>> groups;
  for (DType t : dtypes) {
    bool found = false;
    for (const ThroughputCurve& c : p->cpu.matmul)
      if (c.dtype == t) {
        groups[{c.threads, c.tokens}].push_back(t);
        found = true;
      }
    if (!found)
      for (int32_t th : curve_threads) groups[{th, kQuickTokens}].push_back(t);
  }
  int32_t max_threads = p->cpu.threads;
  for (const BandwidthPoint& b : p->cpu.mem_bw) max_threads = std::max(max_threads, b.threads);
  for (int32_t th : curve_threads) max_threads = std::max(max_threads, th);

  ProfileOptions o = opt;
  o.quick = true;
  const CpuSampling s = cpu_sampling(o);
  const auto never = ProfileClock::time_point::max();
  ProfileProgress progress(opt.progress);
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CpuProfiler> host,
                         CpuProfiler::create(cpu, o, max_threads, host_buffer_bytes(p->machine, o.buffer_bytes)));
  size_t steps = static_cast<size_t>(s.rounds) * p->cpu.mem_bw.size();
  for (const auto& [key, types] : groups) steps += static_cast<size_t>(s.rounds) * key.second.size() * types.size();
  progress.begin_span(0, 1, steps);
  std::vector<int32_t> bw_threads;
  for (const BandwidthPoint& b : p->cpu.mem_bw) bw_threads.push_back(b.threads);
  const std::vector<BandwidthPoint> bw = host->measure_bandwidth(bw_threads, s, never, progress);
  std::vector<ThroughputCurve> curves;
  for (const auto& [key, types] : groups) {
    CpuPoints pts;
    pts.dtypes = types;
    pts.mm_threads = {key.first};
    pts.tokens = key.second;
    FERRY_ASSIGN_OR_RETURN(std::vector<ThroughputCurve> got, host->measure_matmul(pts, s, never, progress));
    curves.insert(curves.end(), got.begin(), got.end());
  }
  progress.report(1.0, "done");

  p->cpu.mem_bw = bw;
  for (ThroughputCurve& c : curves) {
    auto same = [&](const ThroughputCurve& o) { return o.dtype == c.dtype && o.threads == c.threads; };
    auto it = std::find_if(p->cpu.matmul.begin(), p->cpu.matmul.end(), same);
    if (it != p->cpu.matmul.end()) *it = std::move(c);
    else p->cpu.matmul.push_back(std::move(c));
  }
  return validate_profile(*p, "re-measured profile");
}

}  // namespace ferry::plan
