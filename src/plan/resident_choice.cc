// The shared resident set and the ring: variants, candidates, their scenario and the choice (see the
// header).
#include "plan/resident_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "base/thread_pool.h"
#include "plan/tier_strategies.h"

namespace ferry::plan::detail {

using model::SubLayerKind;

namespace {

// Ring depths the planner tries when PlannerOptions::ring_slots is 0. A deeper ring lets the copy
// engine run further ahead across runs of resident / CPU sub-layers, and keeps up to K streamed
// sub-layers in their slots from one decode step to the next; each slot costs resident bytes.
constexpr int32_t kRingDepths[] = {2, 3, 4, 6, 8};

// Resident sets scored per ring variant at most (see resident_candidates).
constexpr size_t kMaxBreakpoints = 96;

bool must_resident(const PlacementPricer& pricer, const RingVariant& v, size_t i) {
  return pricer.is_attn(i) && pricer.matrix_bytes()[i] > v.slot_bytes;
}

RingVariant make_variant(const PlacementPricer& pricer, uint64_t slot_bytes, int32_t slots) {
  const PlannerOptions& o = pricer.options();
  RingVariant v;
  v.slot_bytes = slot_bytes;
  v.slots = slot_bytes > 0 ? slots : 0;
  v.fixed_bytes = pricer.kv_bytes() + pricer.scratch_bytes() + o.workspace_bytes + pricer.vectors_total() +
                  static_cast<uint64_t>(v.slots) * slot_bytes;
  for (size_t i = 0; i < pricer.size(); ++i)
    if (must_resident(pricer, v, i)) v.must_bytes += pricer.matrix_bytes()[i];
  v.feasible = v.fixed_bytes + v.must_bytes <= o.vram_budget;
  return v;
}

// Predicted time saved per byte by making sub-layer i resident, over the scenario's tiers.
double saving_per_byte(const PlacementPricer& pricer, size_t i, uint64_t slot_bytes) {
  const uint64_t bytes = pricer.matrix_bytes()[i];
  if (bytes == 0) return 0;
  const CostModel& cm = pricer.cost_model();
  const int32_t P = pricer.prompt_tokens();
  const int32_t chunk = std::min<int32_t>(P, pricer.tiers().back());
  const int32_t chunk_tier = pricer.tier_for(chunk);
  const double chunks = std::ceil(static_cast<double>(P) / chunk);
  const bool streamable = bytes <= slot_bytes;
  double saved = 0;
  for (auto [n, weight] : {std::pair<int32_t, double>{1, static_cast<double>(pricer.options().gen_tokens)},
                           std::pair<int32_t, double>{chunk_tier, chunks}}) {
    const SubLayerCosts& k = pricer.costs(i, n, pricer.eval_context());
    const double hop = 2 * cm.activation_h2d_s(4.0 * pricer.spec().n_embd * n);
    // Time the sub-layer costs when not resident. Attention: its copy. A sub-layer that can go
    // either way: the CPU and the link share it in a balanced step (each at its contended rate),
    // never worse than the better path alone. Otherwise: the CPU, serially.
    double alt;
    if (pricer.is_attn(i)) {
      alt = std::max(k.copy_s, k.gpu_s);
    } else if (streamable) {
      const double cpu_path = (k.cpu_s + hop) / cm.cpu_share_while_copying();
      const double copy_path = k.copy_s / cm.copy_share_while_cpu();
      const double balanced = 1.0 / (1.0 / cpu_path + 1.0 / copy_path);
      alt = std::max(k.gpu_s, std::min({balanced, k.copy_s, k.cpu_s + hop}));
    } else {
      alt = k.cpu_s + hop;
    }
    saved += weight * std::max(0.0, alt - k.gpu_s);
  }
  return saved / static_cast<double>(bytes);
}

// Greedy knapsack over `order` with `weights_room` bytes for optional matrices: take what fits.
std::vector<bool> greedy_set(const PlacementPricer& pricer, const RingVariant& v, const std::vector<size_t>& order,
                             uint64_t weights_room) {
  std::vector<bool> res(pricer.size(), false);
  for (size_t i = 0; i < pricer.size(); ++i) res[i] = must_resident(pricer, v, i);
  uint64_t left = weights_room;
  for (size_t i : order)
    if (pricer.matrix_bytes()[i] <= left) {
      res[i] = true;
      left -= pricer.matrix_bytes()[i];
    }
  return res;
}

// Every distinct greedy resident set for budgets from the variant's minimum up to `budget`, each
// with the budget it needs. The greedy set only changes where a skipped sub-layer starts to fit at
// its turn, so walking those points enumerates them all.
struct Breakpoint {
  uint64_t need = 0;
  std::vector<bool> resident;
};
std::vector<Breakpoint> breakpoints(const PlacementPricer& pricer, const RingVariant& v,
                                    const std::vector<size_t>& order, uint64_t budget) {
  const std::vector<uint64_t>& bytes = pricer.matrix_bytes();
  std::vector<Breakpoint> out;
  const uint64_t base = v.min_budget();
  uint64_t room = 0;
  for (int guard = 0; guard < 4096 && base + room <= budget; ++guard) {
    Breakpoint bp;
    bp.resident = greedy_set(pricer, v, order, room);
    uint64_t used = 0, next = UINT64_MAX, before = 0;
    for (size_t i : order) {
      if (bp.resident[i]) {
        used += bytes[i];
        before += bytes[i];
      } else {
        next = std::min(next, before + bytes[i]);  // > room: it did not fit
      }
    }
    bp.need = base + used;
    out.push_back(std::move(bp));
    if (next == UINT64_MAX) break;
    room = next;
  }
  return out;
}

// Ties (within 1e-12): the shallower ring, then the smaller arena, then the earlier candidate.
bool preferred(const Candidate& a, const Candidate* b) {
  if (!b || a.objective < b->objective * (1 - 1e-12)) return true;
  if (a.objective > b->objective * (1 + 1e-12)) return false;
  if (a.variant->slots != b->variant->slots) return a.variant->slots < b->variant->slots;
  return a.need < b->need;
}

}  // namespace

std::vector<RingVariant> ring_variants(const PlacementPricer& pricer) {
  const PlannerOptions& o = pricer.options();
  // Ring slot candidates: none, the largest attention, the largest layer sub-layer.
  uint64_t max_attn = 0, max_layer = 0;
  for (size_t i = 0; i < pricer.size(); ++i) {
    if (pricer.is_embed(i) || pricer.is_head(i)) continue;
    max_layer = std::max(max_layer, pricer.matrix_bytes()[i]);
    if (pricer.is_attn(i)) max_attn = std::max(max_attn, pricer.matrix_bytes()[i]);
  }
  std::vector<uint64_t> slot_sizes = {0};
  if (max_attn > 0) slot_sizes.push_back(max_attn);
  if (max_layer > max_attn) slot_sizes.push_back(max_layer);
  std::vector<int32_t> depths;
  if (o.ring_slots > 0) depths = {o.ring_slots};
  else depths.assign(std::begin(kRingDepths), std::end(kRingDepths));
  std::vector<RingVariant> variants;
  for (uint64_t slot : slot_sizes) {
    if (slot == 0) {
      variants.push_back(make_variant(pricer, 0, 0));
      continue;
    }
    for (int32_t k : depths) variants.push_back(make_variant(pricer, slot, k));
  }
  return variants;
}

const RingVariant& smallest_variant(const std::vector<RingVariant>& variants) {
  FERRY_ASSERT(!variants.empty());
  const RingVariant* smallest = &variants.front();
  for (const RingVariant& v : variants)
    if (v.min_budget() < smallest->min_budget()) smallest = &v;
  return *smallest;
}

std::vector<size_t> residency_order(const PlacementPricer& pricer, const RingVariant& v) {
  struct Ranked {
    size_t i;
    int64_t bucket;
    uint64_t spread;
  };
  std::map<SubLayerKind, uint32_t> count, seen;
  for (size_t i = 0; i < pricer.size(); ++i) ++count[pricer.sublayer(i).kind];
  std::vector<Ranked> ranked;
  for (size_t i = 0; i < pricer.size(); ++i) {
    const SubLayerKind kind = pricer.sublayer(i).kind;
    const uint32_t rank = seen[kind]++;
    if (must_resident(pricer, v, i) || pricer.is_embed(i) || pricer.matrix_bytes()[i] == 0) continue;
    const double r = saving_per_byte(pricer, i, v.slot_bytes);
    if (r <= 0) continue;
    // 0.1 % buckets: candidates within a bucket count as equally good.
    const int64_t bucket = static_cast<int64_t>(std::floor(std::log(r) * 1000.0));
    ranked.push_back({i, bucket, spread_key(rank, count[kind])});
  }
  std::sort(ranked.begin(), ranked.end(), [&pricer](const Ranked& a, const Ranked& b) {
    if (pricer.is_attn(a.i) != pricer.is_attn(b.i)) return pricer.is_attn(a.i);
    if (a.bucket != b.bucket) return a.bucket > b.bucket;
    if (a.spread != b.spread) return a.spread < b.spread;
    return a.i < b.i;
  });
  std::vector<size_t> order;
  for (const Ranked& r : ranked) order.push_back(r.i);
  return order;
}

const Plan& tier_plan(const PlacementPricer& pricer, Candidate& cand, int32_t n) {
  auto it = cand.tiers.find(n);
  if (it != cand.tiers.end()) return it->second;
  Plan p;
  p.tokens = n;
  p.candidates = tier_strategies(pricer, cand.resident, cand.variant->slot_bytes, cand.variant->slots, n,
                                 pricer.eval_context());
  choose_strategy(p);
  if (n == 1 && cand.decode_strategy && *cand.decode_strategy != p.strategy) {
    for (const StrategyEstimate& e : p.candidates)
      if (e.feasible && e.strategy == *cand.decode_strategy) {
        char why[160];
        std::snprintf(why, sizeof why, "%.2f ms (%s): the resident set grew from a plan decoding with %s",
                      p.predicted_ms, percent(p.predicted_ms / e.step_ms - 1).c_str(), strategy_name(e.strategy));
        p.runner_up = strategy_name(p.strategy);
        p.why_runner_up_lost = why;
        p.strategy = e.strategy;
        p.predicted_ms = e.step_ms;
        p.placement = e.placement;
      }
  }
  return cand.tiers.emplace(n, std::move(p)).first->second;
}

// The scenario the resident set is chosen for: TTFT of the prompt (chunks of the largest tier, each
// at its own context, from a cold ring) plus gen_tokens decode steps.
void score_scenario(const PlacementPricer& pricer, Candidate& cand) {
  const PlannerOptions& o = pricer.options();
  std::vector<std::vector<SimItem>> steps;
  const int32_t P = pricer.prompt_tokens();
  for (int32_t done = 0; done < P;) {
    const int32_t n = std::min(P - done, pricer.tiers().back());
    steps.push_back(pricer.items(tier_plan(pricer, cand, pricer.tier_for(n)).placement, n, done));
    done += n;
  }
  // Then the first decode step: the ring holds the prompt tier's sub-layers, so its first copies are
  // made again (the steady decode step may find its streamed sub-layers still in their slots).
  const Plan& t1 = tier_plan(pricer, cand, 1);
  if (o.gen_tokens > 0) steps.push_back(pricer.items(t1.placement, 1, P));
  const SimResult r = simulate(steps, pricer.sim_params(cand.variant->slots));
  const size_t last_prompt = steps.size() - (o.gen_tokens > 0 ? 2 : 1);
  cand.ttft_ms = r.step_end[last_prompt] * 1e3;
  cand.first_decode_extra_ms =
      o.gen_tokens > 0 ? std::max(0.0, (r.step_end.back() - r.step_end[last_prompt]) * 1e3 - t1.predicted_ms) : 0;
  cand.objective = cand.ttft_ms + cand.first_decode_extra_ms + o.gen_tokens * t1.predicted_ms;
}

double decode_copy_ms(const PlacementPricer& pricer, Candidate& cand) {
  const Plan& t1 = tier_plan(pricer, cand, 1);
  for (const StrategyEstimate& e : t1.candidates)
    if (e.feasible && e.strategy == t1.strategy) return e.copy_ms;
  return 0;
}

std::vector<Candidate> resident_candidates(const PlacementPricer& pricer, const std::vector<RingVariant>& variants) {
  std::vector<Candidate> candidates;
  for (const RingVariant& v : variants) {
    if (!v.feasible) continue;
    const std::vector<size_t> order = residency_order(pricer, v);
    std::vector<Breakpoint> bps = breakpoints(pricer, v, order, pricer.options().vram_budget);
    // Each candidate costs a scenario (every tier balanced); a long list (a deep MoE model's expert
    // groups) keeps kMaxBreakpoints of them, evenly spread and always the fullest.
    if (bps.size() > kMaxBreakpoints) {
      std::vector<Breakpoint> kept;
      for (size_t j = 0; j < kMaxBreakpoints; ++j)
        kept.push_back(std::move(bps[j * (bps.size() - 1) / (kMaxBreakpoints - 1)]));
      bps = std::move(kept);
    }
    for (Breakpoint& bp : bps) {
      Candidate c;
      c.variant = &v;
      c.need = bp.need;
      c.resident = std::move(bp.resident);
      candidates.push_back(std::move(c));
    }
  }
  return candidates;
}

void score_candidates(const PlacementPricer& pricer, std::vector<Candidate>& candidates) {
  // Candidates are independent: scored on several threads (FFN-sliced lists have ~1.5x the sub-layers
  // and ~2x the candidates of whole ones).
  const int32_t threads = static_cast<int32_t>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  (void)parallel_items(candidates.size(), threads, [&](size_t k) {
    score_scenario(pricer, candidates[k]);
    return Status::ok();
  });
}

FastestCandidates fastest_candidates(std::vector<Candidate>& candidates) {
  FastestCandidates out;
  for (Candidate& c : candidates) {
    if (preferred(c, out.overall)) out.overall = &c;
    const Candidate*& d = out.by_depth[c.variant->slots];
    if (preferred(c, d)) d = &c;
  }
  return out;
}

Candidate* robust_choice(const PlacementPricer& pricer, std::vector<Candidate>& candidates, Candidate* fastest) {
  const PlannerOptions& o = pricer.options();
  if (!fastest) return fastest;
  // Each candidate's score once (-1: outside the copy window).
  const bool charge_copies = o.copy_window > 0 && o.copy_risk > 0 && o.gen_tokens > 0;
  std::vector<double> scores(candidates.size(), -1);
  double best_score = -1;
  for (size_t k = 0; k < candidates.size(); ++k) {
    Candidate& c = candidates[k];
    if (charge_copies && c.objective > fastest->objective * (1 + o.copy_window)) continue;
    scores[k] = charge_copies ? c.objective + o.gen_tokens * o.copy_risk * decode_copy_ms(pricer, c) : c.objective;
    if (best_score < 0 || scores[k] < best_score) best_score = scores[k];
  }
  // Scores within score_tie of the best count as equal: the shallowest ring among them wins, then the
  // lowest score. Two profiles of one machine differ by a few percent, and ring depths often plan within
  // 1 % of each other; without the tie the depth (and with it the resident set) followed that noise.
  Candidate* pick = nullptr;
  double pick_score = 0;
  for (size_t k = 0; k < candidates.size(); ++k) {
    Candidate& c = candidates[k];
    const double sc = scores[k];
    if (sc < 0 || sc > best_score * (1 + o.score_tie)) continue;
    if (!pick || c.variant->slots < pick->variant->slots ||
        (c.variant->slots == pick->variant->slots &&
         (sc < pick_score * (1 - 1e-12) || (sc <= pick_score * (1 + 1e-12) && preferred(c, pick))))) {
      pick = &c;
      pick_score = sc;
    }
  }
  return pick;
}

std::optional<Candidate> grow_into_budget(const PlacementPricer& pricer, const Candidate& chosen) {
  // Free VRAM can only take copies or CPU work away, but the greedy sets may switch decode to another
  // strategy at a larger budget, and the robust choice can then prefer a smaller set that leaves part
  // of the budget empty.
  Candidate cur = chosen;
  cur.decode_strategy = tier_plan(pricer, cur, 1).strategy;
  const double copies = decode_copy_ms(pricer, cur);
  bool any = false;
  for (size_t i : residency_order(pricer, *cur.variant)) {
    if (cur.resident[i] || cur.need + pricer.matrix_bytes()[i] > pricer.options().vram_budget) continue;
    Candidate next;
    next.variant = cur.variant;
    next.need = cur.need + pricer.matrix_bytes()[i];
    next.resident = cur.resident;
    next.resident[i] = true;
    next.decode_strategy = cur.decode_strategy;
    score_scenario(pricer, next);
    if (next.objective <= cur.objective * (1 + 1e-9) && decode_copy_ms(pricer, next) <= copies + 1e-9) {
      cur = std::move(next);
      any = true;
    }
  }
  if (!any) return std::nullopt;
  return cur;
}

}  // namespace ferry::plan::detail
