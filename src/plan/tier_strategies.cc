// The strategies of one tier and the choice among them (see the header).
#include "plan/tier_strategies.h"

#include <algorithm>
#include <cstdio>

namespace ferry::plan::detail {

namespace {

// Why `loser` is slower than `winner`, in one phrase from the work each resource does.
std::string why_lost(const StrategyEstimate& loser, const StrategyEstimate& winner) {
  char b[256];
  const double slower = winner.step_ms > 0 ? loser.step_ms / winner.step_ms - 1 : 0;
  const double top = std::max({loser.cpu_ms, loser.gpu_ms, loser.copy_ms});
  std::string what;
  if (loser.step_ms > 1.25 * std::max(top, 1e-12) && loser.cpu_ms > 0 && loser.gpu_ms > 0) {
    std::snprintf(b, sizeof b, "serial: %.1f ms CPU + %.1f ms GPU + %.1f ms hand-overs do not overlap", loser.cpu_ms,
                  loser.gpu_ms, loser.xfer_ms);
    what = b;
  } else if (top == loser.copy_ms) {
    std::snprintf(b, sizeof b, "link-bound: %.1f ms of weight copies per step", loser.copy_ms);
    what = b;
  } else if (top == loser.cpu_ms) {
    std::snprintf(b, sizeof b, "CPU-bound: %.1f ms of CPU work per step", loser.cpu_ms);
    what = b;
  } else {
    std::snprintf(b, sizeof b, "GPU-bound: %.1f ms of GPU work per step", loser.gpu_ms);
    what = b;
  }
  std::snprintf(b, sizeof b, "%.2f ms (%s): ", loser.step_ms, percent(slower).c_str());
  return b + what;
}

// Preference on (near) ties: the simpler strategy.
int preference(Strategy s) {
  switch (s) {
    case Strategy::kStatic: return 0;
    case Strategy::kGpuStream: return 1;
    case Strategy::kDynamic: return 2;
  }
  return 3;
}

bool better(const StrategyEstimate& a, const StrategyEstimate& b) {
  if (a.step_ms < b.step_ms * (1 - 1e-9)) return true;
  if (b.step_ms < a.step_ms * (1 - 1e-9)) return false;
  return preference(a.strategy) < preference(b.strategy);
}

// Dynamic: start from even mixes (a share of the flexible sub-layers streamed, spread over the layers),
// keep the fastest, then flip single sub-layers between the CPU and the ring while that helps.
std::vector<Placement> balance(const PlacementPricer& pricer, const std::vector<Placement>& base,
                               const std::vector<size_t>& flex, int64_t n, int64_t c, int32_t ring_slots) {
  std::vector<size_t> order(flex.size());
  for (size_t j = 0; j < flex.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return spread_key(static_cast<uint32_t>(a), static_cast<uint32_t>(flex.size())) <
           spread_key(static_cast<uint32_t>(b), static_cast<uint32_t>(flex.size()));
  });
  std::vector<Placement> best_pl = base;
  double best = 1e300;
  constexpr int kMixes = 8;
  for (int f = 0; f <= kMixes; ++f) {
    std::vector<Placement> pl = base;
    const size_t k = (flex.size() * f + kMixes / 2) / kMixes;
    for (size_t j = 0; j < k; ++j) pl[flex[order[j]]] = Placement::kStreamed;
    const double t = pricer.step_s(pl, n, c, ring_slots);
    if (t < best * (1 - 1e-9)) {
      best = t;
      best_pl = pl;
    }
  }
  for (int pass = 0; pass < 3; ++pass) {
    bool improved = false;
    for (size_t i : flex) {
      std::vector<Placement> pl = best_pl;
      pl[i] = pl[i] == Placement::kCpu ? Placement::kStreamed : Placement::kCpu;
      const double t = pricer.step_s(pl, n, c, ring_slots);
      if (t < best * (1 - 1e-9)) {
        best = t;
        best_pl = std::move(pl);
        improved = true;
      }
    }
    if (!improved) break;
  }
  return best_pl;
}

}  // namespace

std::string percent(double fraction) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", fraction * 100);
  return b;
}

std::vector<StrategyEstimate> tier_strategies(const PlacementPricer& pricer, const std::vector<bool>& resident,
                                              uint64_t slot_bytes, int32_t ring_slots, int64_t n, int64_t c) {
  const size_t m = pricer.size();
  std::vector<Placement> base(m, Placement::kCpu);
  std::vector<size_t> flex;  // non-resident sub-layers that may go either way
  for (size_t i = 0; i < m; ++i) {
    if (pricer.is_embed(i)) base[i] = Placement::kCpu;  // a row gather, on the host
    else if (resident[i] || pricer.matrix_bytes()[i] == 0) base[i] = Placement::kResident;  // (vectors only)
    else if (pricer.is_attn(i)) base[i] = Placement::kStreamed;  // guaranteed to fit a slot (else resident)
    else if (slot_bytes > 0 && pricer.matrix_bytes()[i] <= slot_bytes) flex.push_back(i);
  }
  std::vector<StrategyEstimate> out;

  std::vector<Placement> stream = base;
  for (size_t i : flex) stream[i] = Placement::kStreamed;
  StrategyEstimate gpu_stream = pricer.estimate(Strategy::kGpuStream, stream, n, c, ring_slots);
  if (slot_bytes == 0) {
    gpu_stream.feasible = false;
    gpu_stream.why_not = "no ring: every attention sub-layer is resident and nothing else may stream";
  } else if (flex.empty()) {
    gpu_stream.feasible = false;
    gpu_stream.why_not = "nothing left to stream";
  }
  out.push_back(gpu_stream);

  out.push_back(pricer.estimate(Strategy::kStatic, base, n, c, ring_slots));

  StrategyEstimate dynamic;
  dynamic.strategy = Strategy::kDynamic;
  if (slot_bytes == 0 || flex.size() < 2) {
    dynamic.why_not = slot_bytes == 0 ? "no ring" : "fewer than two sub-layers to balance";
    out.push_back(dynamic);
    return out;
  }
  const std::vector<Placement> balanced = balance(pricer, base, flex, n, c, ring_slots);
  dynamic = pricer.estimate(Strategy::kDynamic, balanced, n, c, ring_slots);
  bool any_cpu = false, any_stream = false;
  for (size_t i : flex) (balanced[i] == Placement::kCpu ? any_cpu : any_stream) = true;
  if (!any_cpu || !any_stream) {
    dynamic.feasible = false;
    dynamic.why_not = any_stream ? "the best balance streams everything (= gpu-stream)"
                                 : "the best balance keeps everything on the CPU (= static)";
  }
  out.push_back(dynamic);
  return out;
}

void choose_strategy(Plan& plan) {
  std::vector<const StrategyEstimate*> ok;
  for (const auto& c : plan.candidates)
    if (c.feasible) ok.push_back(&c);
  FERRY_ASSERT(!ok.empty());  // static is always feasible
  std::sort(ok.begin(), ok.end(), [](auto* a, auto* b) { return better(*a, *b); });
  plan.strategy = ok[0]->strategy;
  plan.predicted_ms = ok[0]->step_ms;
  plan.placement = ok[0]->placement;
  if (ok.size() > 1) {
    plan.runner_up = strategy_name(ok[1]->strategy);
    plan.why_runner_up_lost = why_lost(*ok[1], *ok[0]);
  }
}

}  // namespace ferry::plan::detail
