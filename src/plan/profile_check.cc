// recheck_profile_after_run: see profile_check.h.
#include "plan/profile_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <set>

namespace ferry::plan {

namespace {

// How far the re-measured figures of `after` are from `before`'s, as ratios after / before: the host
// bandwidth points, the one-token points of the re-measured curves at the profile's threads (decode, what
// a run's CPU sub-layers mostly are), and every re-measured point.
struct Movement {
  std::vector<double> bandwidth, decode, all;
  // Whether the figures moved as a whole: the median ratio of every point, or of the one-token points,
  // beyond kFigureMovedRatio either way. A single point off (one noisy sample series) is not a move.
  bool moved() const { return off(all) || off(decode); }

 private:
  static bool off(std::vector<double> v) {
    if (v.empty()) return false;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return std::fabs(std::log(v[v.size() / 2])) > std::log(kFigureMovedRatio);
  }
};

Movement movement(const HardwareProfile& before, const HardwareProfile& after, const std::vector<DType>& dtypes) {
  Movement m;
  auto add = [&](std::vector<double>* v, double r) {
    if (!(r > 0) || !std::isfinite(r)) return;
    if (v) v->push_back(r);
    m.all.push_back(r);
  };
  for (const BandwidthPoint& a : after.cpu.mem_bw)
    for (const BandwidthPoint& b : before.cpu.mem_bw)
      if (a.threads == b.threads) add(&m.bandwidth, a.gbs / b.gbs);
  for (const ThroughputCurve& a : after.cpu.matmul) {
    if (std::find(dtypes.begin(), dtypes.end(), a.dtype) == dtypes.end()) continue;
    for (const ThroughputCurve& b : before.cpu.matmul) {
      if (b.dtype != a.dtype || b.threads != a.threads) continue;
      for (size_t i = 0; i < a.tokens.size(); ++i)
        for (size_t k = 0; k < b.tokens.size(); ++k)
          if (a.tokens[i] == b.tokens[k])
            add(a.tokens[i] == 1 && a.threads == before.cpu.threads ? &m.decode : nullptr, a.gflops[i] / b.gflops[k]);
    }
  }
  return m;
}

std::string types_text(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

// "0.35x" or "0.33-0.4x" (two significant digits); "n/a" for no ratios.
std::string range_text(const std::vector<double>& ratios) {
  if (ratios.empty()) return "n/a";
  const double lo = *std::min_element(ratios.begin(), ratios.end());
  const double hi = *std::max_element(ratios.begin(), ratios.end());
  char a[32], b[32];
  std::snprintf(a, sizeof a, "%.2g", lo);
  std::snprintf(b, sizeof b, "%.2g", hi);
  return std::string(a) == b ? std::string(a) + "x" : std::string(a) + "-" + b + "x";
}

}  // namespace

std::vector<DType> matmul_weight_types(const std::vector<model::SubLayer>& subs) {
  std::set<DType> used;
  for (const model::SubLayer& s : subs)
    if (s.kind != model::SubLayerKind::kEmbed)
      for (const model::WeightRef& w : s.weights)
        if (w.rows > 1) used.insert(w.dtype);
  std::vector<DType> out;
  for (DType t : kWeightTypes)
    if (used.count(t)) out.push_back(t);
  for (DType t : kExpertWeightTypes)  // gpt-oss's MXFP4: measured when a model has it, not in every profile
    if (used.count(t)) out.push_back(t);
  return out;
}

Expected<std::string> recheck_profile_after_run(const ProfileRecheck& r, const CpuKernels& cpu,
                                                const ProfileOptions& options) {
  if (!cpu_time_off(r.cpu_vs_profile)) return std::string();
  const bool slower = r.cpu_vs_profile > 1;
  char head[512];
  std::snprintf(head, sizeof head, "the CPU sub-layers ran %.1fx %s than the profile %s predicts",
                slower ? r.cpu_vs_profile : 1 / r.cpu_vs_profile, slower ? "slower" : "faster",
                r.profile_path.c_str());
  if (!r.cached)
    return std::string("warning: ") + head + "; plans made from it are off (measure it again: ferry profile -o " +
           r.profile_path + ")";
  FERRY_ASSIGN_OR_RETURN(const HardwareProfile before, load_profile(r.profile_path));
  std::vector<DType> dtypes = r.weight_types;
  if (dtypes.empty())
    for (const ThroughputCurve& c : before.cpu.matmul)
      if (std::find(dtypes.begin(), dtypes.end(), c.dtype) == dtypes.end()) dtypes.push_back(c.dtype);
  HardwareProfile after = before;
  const auto t0 = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(remeasure_cpu(cpu, dtypes, options, &after));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Movement m = movement(before, after, dtypes);
  char what[256];
  std::snprintf(what, sizeof what, "re-measured the host bandwidth and the CPU kernels of %s (%.1f s)",
                types_text(dtypes).c_str(), seconds);
  if (!m.moved()) {
    char b[256];
    std::snprintf(b, sizeof b, ": they hold (within %.0f %%), so something else %s this run (a busy machine?); the "
                  "profile is unchanged",
                  (kFigureMovedRatio - 1) * 100, slower ? "slowed" : "sped up");
    return std::string(head) + "; " + what + b;
  }
  char note[256];
  std::snprintf(note, sizeof note, "%s: host bandwidth and CPU kernels of %s re-measured after a run at %.2fx the "
                "planned CPU time", now_utc().c_str(), types_text(dtypes).c_str(), r.cpu_vs_profile);
  after.notes = after.notes.empty() ? note : after.notes + "; " + note;
  FERRY_RETURN_IF_ERROR(save_profile(after, r.profile_path));
  return std::string(head) + "; " + what + ": one-token rates now " + range_text(m.decode) +
         " the profile's, bandwidth " + range_text(m.bandwidth) + "; " + r.profile_path +
         " updated (the next plan uses them)";
}

}  // namespace ferry::plan
