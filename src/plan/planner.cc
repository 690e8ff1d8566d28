// Planner: resident set (by predicted time saved per byte, shared by all tiers), then per tier the
// three strategies of DESIGN.md §4 evaluated by simulation (plan/simulate.h) and the fastest kept.
//
// Rules the executor can rely on:
//  - The KV cache for the planned context lives in VRAM, so attention always runs on the GPU: a
//    non-resident attention sub-layer is streamed, in every strategy.
//  - Norm and bias vectors of every sub-layer are resident (tiny; a streamed sub-layer moves only
//    its matrices). The embedding is a row gather on the CPU in every strategy.
//  - Sub-layers whose matrices exceed a ring slot never stream (they are resident or on the CPU).
//  - The ring (K slots of ring_slot_bytes) exists when ring_slots > 0; slot size is chosen among
//    {no ring, largest attention, largest layer sub-layer} and K among kRingDepths (or the user's K),
//    whichever plans best; the slots' bytes come off the resident set. "Best": the lowest scenario
//    time, except that within copy_window of it a candidate is charged copy_risk per ms of weight
//    copies its decode step makes (the robust choice, docs/PLANNER.md).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/thread_pool.h"
#include "plan/cost_model.h"
#include "plan/simulate.h"

namespace ferry::plan {

using model::ModelSpec;
using model::SubLayer;
using model::SubLayerKind;

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kGpuStream: return "gpu-stream";
    case Strategy::kStatic: return "static";
    case Strategy::kDynamic: return "dynamic";
  }
  return "?";
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kResident: return "resident";
    case Placement::kStreamed: return "streamed";
    case Placement::kCpu: return "cpu";
  }
  return "?";
}

std::vector<uint8_t> split_layers(const std::vector<SubLayer>& subs, const std::vector<Placement>& placement) {
  std::vector<uint8_t> out(subs.size(), 0);
  for (size_t i = 0; i < subs.size() && i < placement.size(); ++i) {
    if (!model::is_ffn_slice(subs[i]) || subs[i].slice != 0) continue;
    const size_t e = std::min({subs.size(), placement.size(), i + static_cast<size_t>(subs[i].n_slices)});
    bool cpu = false;
    for (size_t k = i; k < e; ++k) cpu |= placement[k] == Placement::kCpu;
    for (size_t k = i; k < e && cpu; ++k) out[k] = 1;
  }
  return out;
}

std::vector<int32_t> token_tiers(int32_t batch) {
  std::vector<int32_t> t;
  for (int64_t n = 1; n < batch; n *= 2) t.push_back(static_cast<int32_t>(n));
  t.push_back(std::max<int32_t>(1, batch));
  return t;
}

const Plan& PlanSet::plan_for(int32_t n_tokens) const {
  FERRY_ASSERT(!tiers.empty());
  for (const Plan& p : tiers)
    if (p.tokens >= n_tokens) return p;
  return tiers.back();
}

Planner::Planner(const HardwareProfile& profile, PlannerOptions options) : profile_(profile), options_(options) {}

namespace {

// Ring depths the planner tries when PlannerOptions::ring_slots is 0. A deeper ring lets the copy
// engine run further ahead across runs of resident / CPU sub-layers, and keeps up to K streamed
// sub-layers in their slots from one decode step to the next; each slot costs resident bytes.
constexpr int32_t kRingDepths[] = {2, 3, 4, 6, 8};

constexpr uint64_t kAlign = 256;  // device allocations are 256-byte aligned
uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

bool is_matrix(const model::WeightRef& w) { return w.rows > 1; }

// The matrices prefill GEMMs multiply: the largest one (elements, per expert for expert groups), the
// widest input, and whether any is quantized (only those are dequantized into the F16 staging).
struct GemmShapes {
  int64_t max_elems = 0, max_cols = 0;
  bool quantized = false;
};
GemmShapes gemm_shapes(const std::vector<SubLayer>& subs) {
  GemmShapes g;
  for (const auto& s : subs)
    for (const auto& w : s.weights)
      // Embed is a gather; the head is a mat-vec per sequence (max_sequences rows): neither GEMMs.
      if (is_matrix(w) && s.kind != SubLayerKind::kEmbed && s.kind != SubLayerKind::kHead) {
        const int64_t rows =
            s.kind == SubLayerKind::kExperts ? w.rows / std::max<int32_t>(1, s.expert_end - s.expert_begin) : w.rows;
        g.max_elems = std::max(g.max_elems, rows * w.cols);
        g.max_cols = std::max(g.max_cols, w.cols);
        g.quantized |= traits(w.dtype).quantized;
      }
  return g;
}
// The cost model of a plan with options `o`: its threads and its GEMM staging (auto plans, and
// predictions asked with auto, are priced with the whole matrix, as the cost model's 0).
CostModel make_cost_model(const HardwareProfile& profile, const PlannerOptions& o) {
  CostModel cm(profile, o.cpu_threads);
  cm.set_gemm_staging_bytes(o.gemm_staging_bytes == PlannerOptions::kGemmStagingAuto ? 0 : o.gemm_staging_bytes);
  return cm;
}

// Bytes of the F16 staging at PlannerOptions::gemm_staging_bytes `staging` (0 / auto: the whole matrix).
uint64_t gemm_staging_need(const GemmShapes& g, uint64_t staging) {
  if (!g.quantized) return 0;
  const uint64_t whole = 2ull * static_cast<uint64_t>(g.max_elems);
  if (staging == 0 || staging == PlannerOptions::kGemmStagingAuto) return whole;
  return std::min<uint64_t>(whole, std::max<uint64_t>(staging, 256ull * g.max_cols));
}

// Van der Corput rank of i among count items: 0, count/2, count/4, 3count/4, ... Used to spread
// equally good candidates over the layers instead of taking layer 0 first, so that resident
// (or CPU) sub-layers interleave with streamed ones and the copy engine always has time to refill.
uint64_t spread_key(uint32_t i, uint32_t count) {
  uint32_t bits = 0;
  while ((1u << bits) < count) ++bits;
  uint64_t r = 0;
  for (uint32_t b = 0; b < bits; ++b)
    if (i & (1u << b)) r |= 1ull << (bits - 1 - b);
  return r;
}

struct Costs {            // one sub-layer at one (n, c)
  double cpu_s = 0, gpu_s = 0, copy_s = 0;
  double gpu_graph_s = 0; // on the GPU, replayed from a CUDA graph
};

struct Variant {          // a ring configuration and what it implies
  uint64_t slot = 0;      // 0 = no ring
  int32_t slots = 0;      // K (0 when there is no ring)
  uint64_t fixed = 0;     // KV + scratch + workspace + vectors + ring
  uint64_t must = 0;      // matrices that must be resident (attention that cannot stream)
  bool feasible = false;
};

struct TierEval {
  Plan plan;
};

class Builder {
 public:
  Builder(const CostModel& cm, const ModelSpec& spec, const std::vector<SubLayer>& subs, const PlannerOptions& o)
      : cm_(cm), spec_(spec), subs_(subs), o_(o) {
    const size_t n = subs.size();
    mat_bytes_.assign(n, 0);
    vec_bytes_.assign(n, 0);
    for (size_t i = 0; i < n; ++i)
      for (const auto& w : subs[i].weights) (is_matrix(w) ? mat_bytes_[i] : vec_bytes_[i]) += align_up(w.bytes);
    tiers_ = token_tiers(o.batch);
  }

  const std::vector<uint64_t>& mat_bytes() const { return mat_bytes_; }
  const std::vector<uint64_t>& vec_bytes() const { return vec_bytes_; }
  const std::vector<int32_t>& tiers() const { return tiers_; }

  bool is_embed(size_t i) const { return subs_[i].kind == SubLayerKind::kEmbed; }
  bool is_attn(size_t i) const { return subs_[i].kind == SubLayerKind::kAttention; }
  bool is_head(size_t i) const { return subs_[i].kind == SubLayerKind::kHead; }


  int64_t out_rows(int64_t n) const { return std::min<int64_t>(n, std::max(1, o_.max_sequences)); }

  // Costs of sub-layer i at (n, c), computed once per (n, c): planning simulates thousands of steps.
  const Costs& costs(size_t i, int64_t n, int64_t c) const { return costs_row(n, c)[i]; }
  // Every sub-layer's costs at (n, c). Thread-safe: candidates are evaluated on several threads (a row,
  // once made, never moves or changes).
  const std::vector<Costs>& costs_row(int64_t n, int64_t c) const {
    std::lock_guard<std::mutex> lock(cache_mu_);
    std::vector<Costs>& row = cache_[{n, c}];
    if (row.empty()) {
      row.resize(subs_.size());
      for (size_t j = 0; j < subs_.size(); ++j) {
        const int64_t rows = is_head(j) ? out_rows(n) : n;
        Costs& k = row[j];
        k.cpu_s = cm_.cpu_sublayer_s(subs_[j], spec_, rows, c);
        if (cm_.has_gpu()) {
          k.gpu_s = cm_.gpu_sublayer_s(subs_[j], spec_, rows, c);
          k.gpu_graph_s = cm_.gpu_sublayer_s(subs_[j], spec_, rows, c, /*graph=*/true);
          k.copy_s = cm_.h2d_s(static_cast<double>(mat_bytes_[j]));
        }
      }
    }
    return row;
  }

  // Plan::sub_ms of a placement at tier n.
  std::vector<double> sub_ms(const std::vector<Placement>& placement, int32_t n) const {
    std::vector<double> ms(subs_.size(), 0.0);
    for (size_t i = 0; i < subs_.size() && i < placement.size(); ++i) {
      const Costs& k = costs(i, n, eval_context());
      ms[i] = (placement[i] == Placement::kCpu ? k.cpu_s : k.gpu_s) * 1e3;
    }
    return ms;
  }

  // KV + scratch + workspace + all vectors: what every plan with a GPU needs.
  uint64_t kv_bytes() const {
    uint64_t kv = 0;
    for (const auto& s : subs_) kv += s.kv_bytes(spec_, o_.context);
    return align_up(kv);
  }
  uint64_t scratch_bytes() const {
    const int64_t n = tiers_.back();
    const int64_t d = spec_.n_embd, qd = spec_.q_dim(), kvd = spec_.kv_dim();
    const int64_t ff = spec_.n_expert > 0 ? static_cast<int64_t>(spec_.n_ff_expert) * spec_.n_expert_used : spec_.n_ff;
    // F32 activations of one step: residual, normed input, q, k, v, attention out, gate, up (GLU in
    // place), plus logits for the rows that need them.
    uint64_t b = 4ull * n * (2 * d + 2 * qd + 2 * kvd + 2 * ff) + 4ull * out_rows(n) * spec_.n_vocab;
    // GEMMs of quantized weights: a dequantized F16 copy of the largest matrix; activations in F16.
    const GemmShapes g = gemm_shapes(subs_);
    b += gemm_staging_need(g, o_.gemm_staging_bytes);
    b += 2ull * g.max_cols * n;
    return align_up(b);
  }
  uint64_t vectors_total() const {
    uint64_t v = 0;
    for (uint64_t b : vec_bytes_) v += b;
    return v;
  }

  Variant variant(uint64_t slot, int32_t slots) const {
    Variant v;
    v.slot = slot;
    v.slots = slot > 0 ? slots : 0;
    v.fixed = kv_bytes() + scratch_bytes() + o_.workspace_bytes + vectors_total() +
              static_cast<uint64_t>(v.slots) * slot;
    for (size_t i = 0; i < subs_.size(); ++i)
      if (is_attn(i) && mat_bytes_[i] > slot) v.must += mat_bytes_[i];  // == must_resident
    v.feasible = v.fixed + v.must <= o_.vram_budget;
    return v;
  }

  // Predicted time saved per byte by making sub-layer i resident, over the scenario's tiers.
  double saving_per_byte(size_t i, uint64_t slot) const {
    if (mat_bytes_[i] == 0) return 0;
    const int32_t P = prompt_tokens();
    const int32_t chunk = std::min<int32_t>(P, tiers_.back());
    const int32_t chunk_tier = tier_for(chunk);
    const double chunks = std::ceil(static_cast<double>(P) / chunk);
    const bool streamable = mat_bytes_[i] <= slot;
    double saved = 0;
    for (auto [n, w] : {std::pair<int32_t, double>{1, static_cast<double>(o_.gen_tokens)},
                        std::pair<int32_t, double>{chunk_tier, chunks}}) {
      const Costs& k = costs(i, n, eval_context());
      const double hop = 2 * cm_.activation_h2d_s(4.0 * spec_.n_embd * n);
      // Time the sub-layer costs when not resident. Attention: its copy. A sub-layer that can go
      // either way: the CPU and the link share it in a balanced step (each at its contended rate),
      // never worse than the better path alone. Otherwise: the CPU, serially.
      double alt;
      if (is_attn(i)) {
        alt = std::max(k.copy_s, k.gpu_s);
      } else if (streamable) {
        const double cpu_path = (k.cpu_s + hop) / cm_.cpu_share_while_copying();
        const double copy_path = k.copy_s / cm_.copy_share_while_cpu();
        const double balanced = 1.0 / (1.0 / cpu_path + 1.0 / copy_path);
        alt = std::max(k.gpu_s, std::min({balanced, k.copy_s, k.cpu_s + hop}));
      } else {
        alt = k.cpu_s + hop;
      }
      saved += w * std::max(0.0, alt - k.gpu_s);
    }
    return saved / static_cast<double>(mat_bytes_[i]);
  }

  int32_t tier_for(int32_t n) const {
    for (int32_t t : tiers_)
      if (t >= n) return t;
    return tiers_.back();
  }
  int32_t prompt_tokens() const { return std::max(1, std::min(o_.prompt_tokens, o_.context)); }
  int32_t eval_context() const {
    return o_.eval_context > 0 ? std::min(o_.eval_context, o_.context) : prompt_tokens();
  }

  // Priority of the sub-layers for residency in variant v (budget-independent): attention first
  // (it runs next to its KV cache on the GPU in every strategy, so non-resident attention always
  // streams: DESIGN.md §4's VRAM priority), then by predicted time saved per byte; equally good
  // candidates are spread over the layers instead of taking layer 0 first.
  std::vector<size_t> priority_order(const Variant& v) const {
    struct Cand {
      size_t i;
      int64_t bucket;
      uint64_t spread;
    };
    std::map<SubLayerKind, uint32_t> count, seen;
    for (const auto& s : subs_) ++count[s.kind];
    std::vector<Cand> cands;
    for (size_t i = 0; i < subs_.size(); ++i) {
      const uint32_t rank = seen[subs_[i].kind]++;
      if (must_resident(v, i) || is_embed(i) || mat_bytes_[i] == 0) continue;
      const double r = saving_per_byte(i, v.slot);
      if (r <= 0) continue;
      // 0.1 % buckets: candidates within a bucket count as equally good.
      const int64_t bucket = static_cast<int64_t>(std::floor(std::log(r) * 1000.0));
      cands.push_back({i, bucket, spread_key(rank, count[subs_[i].kind])});
    }
    std::sort(cands.begin(), cands.end(), [this](const Cand& a, const Cand& b) {
      if (is_attn(a.i) != is_attn(b.i)) return is_attn(a.i);
      if (a.bucket != b.bucket) return a.bucket > b.bucket;
      if (a.spread != b.spread) return a.spread < b.spread;
      return a.i < b.i;
    });
    std::vector<size_t> order;
    for (const Cand& c : cands) order.push_back(c.i);
    return order;
  }

  bool must_resident(const Variant& v, size_t i) const { return is_attn(i) && mat_bytes_[i] > v.slot; }

  // Greedy knapsack over `order` with `weights_room` bytes for optional matrices: take what fits.
  std::vector<bool> greedy(const Variant& v, const std::vector<size_t>& order, uint64_t weights_room) const {
    std::vector<bool> res(subs_.size(), false);
    for (size_t i = 0; i < subs_.size(); ++i) res[i] = must_resident(v, i);
    uint64_t left = weights_room;
    for (size_t i : order)
      if (mat_bytes_[i] <= left) {
        res[i] = true;
        left -= mat_bytes_[i];
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
  std::vector<Breakpoint> breakpoints(const Variant& v, const std::vector<size_t>& order, uint64_t budget) const {
    std::vector<Breakpoint> out;
    const uint64_t base = v.fixed + v.must;
    uint64_t room = 0;
    for (int guard = 0; guard < 4096 && base + room <= budget; ++guard) {
      Breakpoint bp;
      bp.resident = greedy(v, order, room);
      uint64_t used = 0, next = UINT64_MAX, before = 0;
      for (size_t i : order) {
        if (bp.resident[i]) {
          used += mat_bytes_[i];
          before += mat_bytes_[i];
        } else {
          next = std::min(next, before + mat_bytes_[i]);  // > room: it did not fit
        }
      }
      bp.need = base + used;
      out.push_back(std::move(bp));
      if (next == UINT64_MAX) break;
      room = next;
    }
    return out;
  }

  // Which sub-layers the executor replays from CUDA graphs (exec/hybrid_runner.cc): in steps of up to
  // kGpuMatvecMaxTokens tokens, the whole step when everything after the embedding is resident, else
  // every run of >= 2 consecutive resident sub-layers other than the head.
  std::vector<char> graphed(const std::vector<Placement>& pl, int64_t n) const {
    std::vector<char> g(subs_.size(), 0);
    if (static_cast<double>(n) > kGpuMatvecMaxTokens) return g;
    bool all = true;
    for (size_t i = 0; i < subs_.size(); ++i)
      if (!is_embed(i) && pl[i] != Placement::kResident) all = false;
    if (all) {
      for (size_t i = 0; i < subs_.size(); ++i) g[i] = !is_embed(i);
      return g;
    }
    const std::vector<uint8_t> mx = split_layers(subs_, pl);
    auto segment = [&](size_t i) { return pl[i] == Placement::kResident && !is_head(i) && !is_embed(i) && !mx[i]; };
    for (size_t i = 0; i < subs_.size();) {
      size_t e = i;
      while (e < subs_.size() && segment(e)) ++e;
      if (e - i >= 2)
        for (size_t k = i; k < e; ++k) g[k] = 1;
      i = e > i ? e : i + 1;
    }
    return g;
  }

  std::vector<SimItem> items(const std::vector<Placement>& pl, int64_t n, int64_t c) const {
    std::vector<SimItem> out;
    out.reserve(subs_.size());
    bool prev_gpu = false;  // a step starts on the host (token ids)
    const double act = 4.0 * spec_.n_embd * static_cast<double>(n);
    const std::vector<char> graph = graphed(pl, n);
    const std::vector<uint8_t> mx = split_layers(subs_, pl);
    bool group_xfer = false;  // the current mixed group's CPU lane has its hand-overs
    const std::vector<Costs>& row = costs_row(n, c);
    for (size_t i = 0; i < subs_.size(); ++i) {
      const Costs& k = row[i];
      SimItem it;
      it.id = static_cast<int32_t>(i);
      it.on_gpu = pl[i] != Placement::kCpu;
      it.streamed = pl[i] == Placement::kStreamed;
      if (mx[i]) {
        // Slices run at once (SimItem::group); the residual stays on the device. The CPU lane pays the
        // normed rows down and its partial sum up.
        if (subs_[i].slice == 0) group_xfer = false;
        it.group = subs_[i].layer;
        if (!it.on_gpu && !group_xfer) {
          it.xfer_s = cm_.activation_d2h_s(act) + cm_.activation_h2d_s(act) + o_.split_layer_s;
          group_xfer = true;
        }
        if (!prev_gpu && subs_[i].slice == 0) it.xfer_s += cm_.activation_h2d_s(act);
        it.compute_s = it.on_gpu ? k.gpu_s : k.cpu_s;
        it.copy_s = it.streamed ? k.copy_s : 0;
        prev_gpu = true;
        out.push_back(it);
        continue;
      }
      if (it.on_gpu != prev_gpu) it.xfer_s = it.on_gpu ? cm_.activation_h2d_s(act) : cm_.activation_d2h_s(act);
      it.compute_s = it.on_gpu ? (graph[i] ? k.gpu_graph_s : k.gpu_s) : k.cpu_s;
      if (is_head(i) && it.on_gpu)  // logits back to the host for sampling
        it.compute_s += cm_.activation_d2h_s(4.0 * spec_.n_vocab * static_cast<double>(out_rows(n)));
      it.copy_s = it.streamed ? k.copy_s : 0;
      prev_gpu = it.on_gpu;
      out.push_back(it);
    }
    return out;
  }

  SimParams sim_params(int32_t slots) const {
    SimParams p;
    p.ring_slots = std::max(1, slots);
    p.cpu_share_while_copying = cm_.cpu_share_while_copying();
    p.copy_share_while_cpu = cm_.copy_share_while_cpu();
    return p;
  }

  // Steady-state step time: three identical steps back to back, the last one measured.
  double step_s(const std::vector<Placement>& pl, int64_t n, int64_t c, int32_t slots) const {
    const std::vector<SimItem> it = items(pl, n, c);
    const SimResult r = simulate({it, it, it}, sim_params(slots));
    return r.step_end[2] - r.step_end[1];
  }

  StrategyEstimate estimate(Strategy s, std::vector<Placement> pl, int64_t n, int64_t c, int32_t slots) const {
    StrategyEstimate e;
    e.strategy = s;
    e.feasible = true;
    const std::vector<SimItem> it3 = items(pl, n, c);
    const SimResult r = simulate({it3, it3, it3}, sim_params(slots));
    e.step_ms = (r.step_end[2] - r.step_end[1]) * 1e3;
    // Copies actually made in the steady state: streamed sub-layers still in their slot from the
    // previous step are not copied again.
    e.copy_ms = r.step_copy_s[2] * 1e3;
    for (const SimItem& it : it3) {
      (it.on_gpu ? e.gpu_ms : e.cpu_ms) += it.compute_s * 1e3;
      e.xfer_ms += it.xfer_s * 1e3;
    }
    for (size_t i = 0; i < pl.size(); ++i) {
      if (mat_bytes_[i] == 0 || is_embed(i)) continue;
      e.n_cpu += pl[i] == Placement::kCpu;
      e.n_streamed += pl[i] == Placement::kStreamed;
    }
    e.placement = std::move(pl);
    return e;
  }

  // The three strategies for one tier, given the resident set and the ring slot size.
  std::vector<StrategyEstimate> strategies(const std::vector<bool>& res, uint64_t slot, int32_t slots, int64_t n,
                                           int64_t c) const {
    const size_t m = subs_.size();
    std::vector<Placement> base(m, Placement::kCpu);
    std::vector<size_t> flex;  // non-resident sub-layers that may go either way
    for (size_t i = 0; i < m; ++i) {
      if (is_embed(i)) base[i] = Placement::kCpu;                  // a row gather, on the host
      else if (res[i] || mat_bytes_[i] == 0) base[i] = Placement::kResident;  // (vectors only: resident)
      else if (is_attn(i)) base[i] = Placement::kStreamed;  // guaranteed to fit a slot (else resident)
      else if (slot > 0 && mat_bytes_[i] <= slot) flex.push_back(i);
    }
    std::vector<StrategyEstimate> out;

    std::vector<Placement> stream = base;
    for (size_t i : flex) stream[i] = Placement::kStreamed;
    StrategyEstimate gs = estimate(Strategy::kGpuStream, stream, n, c, slots);
    if (slot == 0) {
      gs.feasible = false;
      gs.why_not = "no ring: every attention sub-layer is resident and nothing else may stream";
    } else if (flex.empty()) {
      gs.feasible = false;
      gs.why_not = "nothing left to stream";
    }
    out.push_back(gs);

    StrategyEstimate st = estimate(Strategy::kStatic, base, n, c, slots);
    out.push_back(st);

    StrategyEstimate dyn;
    dyn.strategy = Strategy::kDynamic;
    if (slot == 0 || flex.size() < 2) {
      dyn.why_not = slot == 0 ? "no ring" : "fewer than two sub-layers to balance";
      out.push_back(dyn);
      return out;
    }
    // Balance: start from even mixes (a share f of the flexible sub-layers streamed, spread over the
    // layers), keep the best, then flip single sub-layers while that helps.
    std::vector<size_t> order(flex.size());
    for (size_t j = 0; j < flex.size(); ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return spread_key(static_cast<uint32_t>(a), static_cast<uint32_t>(flex.size())) <
             spread_key(static_cast<uint32_t>(b), static_cast<uint32_t>(flex.size()));
    });
    std::vector<Placement> best_pl = base;
    double best = 1e300;
    constexpr int kSteps = 8;
    for (int f = 0; f <= kSteps; ++f) {
      std::vector<Placement> pl = base;
      const size_t k = (flex.size() * f + kSteps / 2) / kSteps;
      for (size_t j = 0; j < k; ++j) pl[flex[order[j]]] = Placement::kStreamed;
      const double t = step_s(pl, n, c, slots);
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
        const double t = step_s(pl, n, c, slots);
        if (t < best * (1 - 1e-9)) {
          best = t;
          best_pl = std::move(pl);
          improved = true;
        }
      }
      if (!improved) break;
    }
    dyn = estimate(Strategy::kDynamic, best_pl, n, c, slots);
    bool any_cpu = false, any_stream = false;
    for (size_t i : flex) (best_pl[i] == Placement::kCpu ? any_cpu : any_stream) = true;
    if (!any_cpu || !any_stream) {
      dyn.feasible = false;
      dyn.why_not = any_stream ? "the best balance streams everything (= gpu-stream)"
                               : "the best balance keeps everything on the CPU (= static)";
    }
    out.push_back(dyn);
    return out;
  }

  const ModelSpec& spec() const { return spec_; }
  const CostModel& cost_model() const { return cm_; }

 private:
  const CostModel& cm_;
  const ModelSpec& spec_;
  const std::vector<SubLayer>& subs_;
  const PlannerOptions& o_;
  std::vector<uint64_t> mat_bytes_, vec_bytes_;
  std::vector<int32_t> tiers_;
  mutable std::mutex cache_mu_;
  mutable std::map<std::pair<int64_t, int64_t>, std::vector<Costs>> cache_;
};

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", x * 100);
  return b;
}

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
  std::snprintf(b, sizeof b, "%.2f ms (%s): ", loser.step_ms, pct(slower).c_str());
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

void choose(Plan& plan) {
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

// One resident set of one ring variant, evaluated lazily: a tier's plan is computed when asked for.
struct Candidate {
  const Variant* variant = nullptr;
  uint64_t need = 0;                    // budget this set needs
  std::vector<bool> resident;
  std::map<int32_t, Plan> tiers;        // computed tiers by token count
  std::optional<Strategy> decode_strategy;  // tier 1's strategy when fixed (growing a chosen set)
  double ttft_ms = 0;
  double first_decode_extra_ms = 0;     // the first decode step's extra time (ring refill after prefill)
  double objective = 0;                 // ttft + first_decode_extra + gen_tokens * tier-1 step (ms)
};

const Plan& tier_plan(const Builder& b, Candidate& cand, int32_t n) {
  auto it = cand.tiers.find(n);
  if (it != cand.tiers.end()) return it->second;
  Plan p;
  p.tokens = n;
  p.candidates = b.strategies(cand.resident, cand.variant->slot, cand.variant->slots, n, b.eval_context());
  choose(p);
  if (n == 1 && cand.decode_strategy && *cand.decode_strategy != p.strategy) {
    for (const StrategyEstimate& e : p.candidates)
      if (e.feasible && e.strategy == *cand.decode_strategy) {
        char why[160];
        std::snprintf(why, sizeof why, "%.2f ms (%s): the resident set grew from a plan decoding with %s",
                      p.predicted_ms, pct(p.predicted_ms / e.step_ms - 1).c_str(), strategy_name(e.strategy));
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
void evaluate(const Builder& b, Candidate& cand, const PlannerOptions& o) {
  std::vector<std::vector<SimItem>> steps;
  const int32_t P = b.prompt_tokens();
  for (int32_t done = 0; done < P;) {
    const int32_t n = std::min(P - done, b.tiers().back());
    steps.push_back(b.items(tier_plan(b, cand, b.tier_for(n)).placement, n, done));
    done += n;
  }
  // Then the first decode step: the ring holds the prompt tier's sub-layers, so its first copies are
  // made again (the steady decode step may find its streamed sub-layers still in their slots).
  const Plan& t1 = tier_plan(b, cand, 1);
  if (o.gen_tokens > 0) steps.push_back(b.items(t1.placement, 1, P));
  const SimResult r = simulate(steps, b.sim_params(cand.variant->slots));
  const size_t last_prompt = steps.size() - (o.gen_tokens > 0 ? 2 : 1);
  cand.ttft_ms = r.step_end[last_prompt] * 1e3;
  cand.first_decode_extra_ms =
      o.gen_tokens > 0 ? std::max(0.0, (r.step_end.back() - r.step_end[last_prompt]) * 1e3 - t1.predicted_ms) : 0;
  cand.objective = cand.ttft_ms + cand.first_decode_extra_ms + o.gen_tokens * t1.predicted_ms;
}

// Copy time (alone) of the weight copies a steady decode step makes under the candidate's tier-1 plan.
double decode_copy_ms(const Builder& b, Candidate& c) {
  const Plan& t1 = tier_plan(b, c, 1);
  for (const StrategyEstimate& e : t1.candidates)
    if (e.feasible && e.strategy == t1.strategy) return e.copy_ms;
  return 0;
}

// The full PlanSet of the chosen candidate.
PlanSet finish(const Builder& b, Candidate& cand, const PlannerOptions& o) {
  PlanSet ps;
  const Variant& v = *cand.variant;
  ps.resident = cand.resident;
  ps.ring_slots = v.slots;
  ps.ring_slot_bytes = v.slot;
  VramBreakdown a;
  a.kv = b.kv_bytes();
  a.scratch = b.scratch_bytes();
  a.workspace = o.workspace_bytes;
  a.ring = static_cast<uint64_t>(v.slots) * v.slot;
  a.weights = b.vectors_total();
  for (size_t i = 0; i < ps.resident.size(); ++i)
    if (ps.resident[i]) a.weights += b.mat_bytes()[i];
  a.total = a.weights + a.kv + a.ring + a.scratch + a.workspace;
  FERRY_ASSERT(a.total == cand.need && a.total <= o.vram_budget);
  ps.arena = a;
  for (int32_t n : b.tiers()) {
    Plan p = tier_plan(b, cand, n);
    p.vram = a;
    // The chosen placement at context 0, scaled by predicted_ms's ratio to the plain simulation at
    // eval_context (predicted_ms may carry the copy-risk charge). Only for the chosen candidate.
    p.predicted_ms_low = p.predicted_ms;
    if (b.eval_context() > 0) {
      const double hi = b.step_s(p.placement, n, b.eval_context(), v.slots);
      const double lo = b.step_s(p.placement, n, 0, v.slots);
      if (hi > 0) p.predicted_ms_low = p.predicted_ms * lo / hi;
    }
    p.sub_ms = b.sub_ms(p.placement, n);
    ps.tiers.push_back(std::move(p));
  }
  ps.ttft_ms = cand.ttft_ms;
  ps.decode_tok_s = 1e3 / ps.tiers.front().predicted_ms;
  ps.scenario_ms = cand.objective;
  ps.first_decode_extra_ms = cand.first_decode_extra_ms;
  return ps;
}

}  // namespace

Expected<PlanSet> Planner::plan(const ModelSpec& spec, const std::vector<SubLayer>& subs) const {
  const int32_t want = options_.ffn_slices;
  if (want < 0 || want > 64)
    return make_error(ErrorCode::kInvalidArgument, "FFN slices must be 0 (the planner chooses) or 1..64 (got %d)", want);
  bool sliceable = spec.n_expert == 0 && want != 1;
  for (const SubLayer& s : subs) sliceable &= s.n_slices <= 1;  // a list already cut is planned as it is
  auto tag = [](Expected<PlanSet> ps, int32_t slices) {
    if (ps) ps->ffn_slices = slices;
    return ps;
  };
  if (!sliceable) return tag(plan_staging(spec, subs, options_), 1);
  const int32_t n = want == PlannerOptions::kFfnSlicesAuto ? PlannerOptions::kFfnSlicesTry : want;
  FERRY_ASSIGN_OR_RETURN(std::vector<SubLayer> cut, model::slice_ffn_sublayers(spec, subs, n));
  if (want != PlannerOptions::kFfnSlicesAuto) return tag(plan_staging(spec, cut, options_), n);
  Expected<PlanSet> whole = tag(plan_staging(spec, subs, options_), 1);
  // Nothing to gain without a GPU or with every weight resident.
  if (whole && (!whole->gpu || whole->weights_resident >= whole->weights_total)) return whole;
  if (!whole && whole.status().code() != ErrorCode::kOutOfMemory) return whole;
  Expected<PlanSet> sliced = tag(plan_staging(spec, cut, options_), n);
  if (!sliced) return whole ? std::move(whole) : std::move(sliced);
  if (!whole) return sliced;
  // The smaller budget that works is still the whole FFNs' where the slices need more (their minimum
  // holds the ring of the largest attention either way).
  const uint64_t min_budget = std::min(whole->min_budget, sliced->min_budget);
  whole->min_budget = sliced->min_budget = min_budget;
  // The same robust rule as between the candidates of one list: within copy_window of the faster
  // scenario, each pays copy_risk per ms of its decode step's weight copies. Sliced lists stream
  // more often (their smaller slots fit the ring), and those copies measured the least like their
  // prediction (session 10: qwen3-8b Q4_K 4 GiB 4K, sliced 8.4 ms predicted with 7 ms of copies, 10.4
  // measured; whole FFNs 9.4 predicted without copies, 9.2 measured).
  auto decode_copies_ms = [](const PlanSet& ps) {
    const Plan& d = ps.tiers.front();
    for (const StrategyEstimate& e : d.candidates)
      if (e.feasible && e.strategy == d.strategy) return e.copy_ms;
    return 0.0;
  };
  const PlanSet& fast = sliced->scenario_ms < whole->scenario_ms ? *sliced : *whole;
  auto score = [&](const PlanSet& ps) {
    if (ps.scenario_ms > fast.scenario_ms * (1 + options_.copy_window)) return ps.scenario_ms * 2;  // out of the window
    return ps.scenario_ms + options_.gen_tokens * options_.copy_risk * decode_copies_ms(ps);
  };
  if (score(*sliced) < score(*whole)) return sliced;
  return whole;
}

Expected<PlanSet> Planner::plan_staging(const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                        const PlannerOptions& o) const {
  if (o.gemm_staging_bytes != PlannerOptions::kGemmStagingAuto) return plan_once(spec, subs, o);
  PlannerOptions whole_o = o, small_o = o;
  whole_o.gemm_staging_bytes = 0;
  small_o.gemm_staging_bytes = PlannerOptions::kGemmStagingSmall;
  Expected<PlanSet> whole = plan_once(spec, subs, whole_o);
  // Nothing to gain: no GPU, no quantized matrix (no staging at all), or every weight already resident.
  // The minimum budget is still the small staging's: every variant's fixed part holds the staging.
  const GemmShapes g = gemm_shapes(subs);
  if (!g.quantized) return whole;
  if (whole && (!whole->gpu || whole->weights_resident >= whole->weights_total)) {
    const uint64_t saved = gemm_staging_need(g, 0) - gemm_staging_need(g, small_o.gemm_staging_bytes);
    whole->min_budget = whole->min_budget > saved ? whole->min_budget - saved : 0;
    return whole;
  }
  if (!whole && whole.status().code() != ErrorCode::kOutOfMemory) return whole;
  Expected<PlanSet> small = plan_once(spec, subs, small_o);
  if (!small) return whole ? std::move(whole) : std::move(small);
  if (!whole) return small;  // only the small staging fits the budget
  // The smallest budget with a plan is the small staging's (it is what this planner would use there).
  whole->min_budget = std::min(whole->min_budget, small->min_budget);
  // The cost model does not see the smaller GEMMs' prefill cost (session 9: -15 % at 512 tokens), so
  // the small staging must buy a clearly faster decode step with more weights on the GPU.
  const bool more_weights =
      small->arena.weights + small->arena.ring > whole->arena.weights + whole->arena.ring;
  if (more_weights && !small->tiers.empty() && !whole->tiers.empty() &&
      small->tiers.front().predicted_ms < 0.97 * whole->tiers.front().predicted_ms)
    return small;
  return whole;
}

Expected<PlanSet> Planner::plan_once(const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                     const PlannerOptions& o) const {
  if (subs.empty()) return make_error(ErrorCode::kInvalidArgument, "model has no sub-layers");
  if (o.context < 1) return make_error(ErrorCode::kInvalidArgument, "context must be >= 1 (got %d)", o.context);
  if (o.batch < 1 || o.batch > (1 << 20))
    return make_error(ErrorCode::kInvalidArgument, "batch must be in [1, 1048576] (got %d)", o.batch);
  if (o.ring_slots != 0 && (o.ring_slots < 2 || o.ring_slots > 64))
    return make_error(ErrorCode::kInvalidArgument, "ring slots must be 0 (the planner chooses) or 2..64 (got %d)",
                      o.ring_slots);
  if (o.max_sequences < 1) return make_error(ErrorCode::kInvalidArgument, "max_sequences must be >= 1");
  FERRY_RETURN_IF_ERROR(validate_profile(profile_));

  const CostModel cm = make_cost_model(profile_, o);
  const Builder b(cm, spec, subs, o);

  PlanSet ps;
  if (!cm.has_gpu()) {
    // No GPU: one all-CPU plan per tier; the budget does not apply.
    const size_t m = subs.size();
    ps.resident.assign(m, false);
    for (int32_t n : b.tiers()) {
      Plan p;
      p.tokens = n;
      StrategyEstimate st;
      st.strategy = Strategy::kStatic;
      st.feasible = true;
      st.placement.assign(m, Placement::kCpu);
      for (size_t i = 0; i < m; ++i) {
        st.cpu_ms += b.costs(i, n, b.eval_context()).cpu_s * 1e3;
        st.n_cpu += b.mat_bytes()[i] > 0 && !b.is_embed(i);
      }
      st.step_ms = st.cpu_ms;
      StrategyEstimate gs, dyn;
      gs.strategy = Strategy::kGpuStream;
      gs.why_not = "no GPU";
      dyn.strategy = Strategy::kDynamic;
      dyn.why_not = "no GPU";
      p.candidates = {gs, st, dyn};
      choose(p);
      p.predicted_ms_low = 0;
      for (size_t i = 0; i < m; ++i) p.predicted_ms_low += b.costs(i, n, 0).cpu_s * 1e3;
      p.sub_ms = b.sub_ms(p.placement, n);
      ps.tiers.push_back(std::move(p));
    }
    double ttft = 0;
    for (int32_t done = 0, P = b.prompt_tokens(); done < P;) {
      const int32_t n = std::min(P - done, b.tiers().back());
      for (size_t i = 0; i < m; ++i) ttft += b.costs(i, n, done).cpu_s * 1e3;
      done += n;
    }
    ps.ttft_ms = ttft;
    ps.decode_tok_s = 1e3 / ps.tiers.front().predicted_ms;
    ps.scenario_ms = ttft + o.gen_tokens * ps.tiers.front().predicted_ms;
    ps.notes.push_back("no GPU in the profile: every sub-layer runs on the CPU (the VRAM budget does not apply)");
  } else {
    const uint64_t gpu_mem = profile_.gpu->memory_bytes;
    if (o.vram_budget > gpu_mem)
      return make_error(ErrorCode::kInvalidArgument, "VRAM budget %s is more than the %s of %s",
                        format_bytes(o.vram_budget).c_str(), format_bytes(gpu_mem).c_str(), profile_.gpu->name.c_str());
    if (o.vram_budget + o.cuda_context_bytes > gpu_mem)
      ps.notes.push_back("budget + CUDA context (~" + format_bytes(o.cuda_context_bytes) + ") exceed the GPU's " +
                         format_bytes(gpu_mem) + ": the arena may not get the whole budget");
    // Ring slot candidates: none, the largest attention, the largest layer sub-layer.
    uint64_t max_attn = 0, max_layer = 0;
    for (size_t i = 0; i < subs.size(); ++i) {
      if (b.is_embed(i) || b.is_head(i)) continue;
      max_layer = std::max(max_layer, b.mat_bytes()[i]);
      if (b.is_attn(i)) max_attn = std::max(max_attn, b.mat_bytes()[i]);
    }
    std::vector<uint64_t> slots = {0};
    if (max_attn > 0) slots.push_back(max_attn);
    if (max_layer > max_attn) slots.push_back(max_layer);
    // Ring depths: the user's K, else every K of kRingDepths (the deeper rings only where their slots
    // fit: an infeasible variant yields no candidate).
    std::vector<int32_t> depths;
    if (o.ring_slots > 0) depths = {o.ring_slots};
    else depths.assign(std::begin(kRingDepths), std::end(kRingDepths));
    std::vector<Variant> variants;
    uint64_t min_budget = UINT64_MAX;
    const Variant* smallest = nullptr;
    for (uint64_t s : slots) {
      if (s == 0) {
        variants.push_back(b.variant(0, 0));
        continue;
      }
      for (int32_t k : depths) variants.push_back(b.variant(s, k));
    }
    for (const Variant& v : variants)
      if (v.fixed + v.must < min_budget) {
        min_budget = v.fixed + v.must;
        smallest = &v;
      }
    // Candidates: for every ring variant, the greedy resident set at every budget where it changes,
    // up to the budget. The best scenario objective wins. A larger budget sees a superset of these
    // candidates, so its predicted scenario time is never worse (the monotonicity guarantee).
    std::vector<Candidate> cands;
    for (const Variant& v : variants) {
      if (!v.feasible) continue;
      const std::vector<size_t> order = b.priority_order(v);
      for (Builder::Breakpoint& bp : b.breakpoints(v, order, o.vram_budget)) {
        Candidate c;
        c.variant = &v;
        c.need = bp.need;
        c.resident = std::move(bp.resident);
        cands.push_back(std::move(c));
      }
    }
    Candidate* best_c = nullptr;
    std::map<int32_t, const Candidate*> best_by_depth;  // K -> its best candidate (K = 0: no ring)
    auto better_c = [](const Candidate& a, const Candidate* b) {
      // Ties (within 1e-12): the shallower ring, then the smaller arena, then the earlier variant.
      if (!b || a.objective < b->objective * (1 - 1e-12)) return true;
      if (a.objective > b->objective * (1 + 1e-12)) return false;
      if (a.variant->slots != b->variant->slots) return a.variant->slots < b->variant->slots;
      return a.need < b->need;
    };
    // Candidates are independent: evaluated on several threads (the FFN-sliced lists have ~1.5x the
    // sub-layers and ~2x the candidates; qwen3-8b at 4 GiB took 7.5 s on one core).
    const int32_t threads = static_cast<int32_t>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    (void)parallel_items(cands.size(), threads, [&](size_t k) {
      evaluate(b, cands[k], o);
      return Status::ok();
    });
    for (Candidate& c : cands) {
      if (better_c(c, best_c)) best_c = &c;
      const Candidate*& d = best_by_depth[c.variant->slots];
      if (better_c(c, d)) d = &c;
    }
    // Robust choice: within copy_window of the best scenario, charge each candidate its decode copies
    // (the part of the model measured least reliably) and take the cheapest.
    Candidate* fastest = best_c;
    if (best_c && o.copy_window > 0 && o.copy_risk > 0 && o.gen_tokens > 0) {
      double best_score = 0;
      Candidate* pick = nullptr;
      for (Candidate& c : cands) {
        if (c.objective > fastest->objective * (1 + o.copy_window)) continue;
        const double score = c.objective + o.gen_tokens * o.copy_risk * decode_copy_ms(b, c);
        if (!pick || score < best_score * (1 - 1e-12) ||
            (score <= best_score * (1 + 1e-12) && better_c(c, pick))) {
          pick = &c;
          best_score = score;
        }
      }
      best_c = pick;
    }
    // Grow the chosen set into what it leaves of the budget: each further sub-layer (in the variant's
    // priority order) that fits stays if the scenario is no slower and the decode step copies no more,
    // with tier 1 kept on the chosen strategy. Free VRAM can only take copies or CPU work away, but the
    // greedy sets above may switch decode to another strategy at a larger budget, and the robust choice
    // can then prefer a smaller set (session 9: minitron-8b F16 at 2 GiB and 4K context kept 81 MiB
    // resident with 600 MiB of the budget empty, its attention streaming every step).
    std::optional<Candidate> grown;
    Candidate* picked = best_c;
    if (best_c) {
      Candidate cur = *best_c;
      cur.decode_strategy = tier_plan(b, cur, 1).strategy;
      const double copies = decode_copy_ms(b, cur);
      bool any = false;
      for (size_t i : b.priority_order(*cur.variant)) {
        if (cur.resident[i] || cur.need + b.mat_bytes()[i] > o.vram_budget) continue;
        Candidate next;
        next.variant = cur.variant;
        next.need = cur.need + b.mat_bytes()[i];
        next.resident = cur.resident;
        next.resident[i] = true;
        next.decode_strategy = cur.decode_strategy;
        evaluate(b, next, o);
        if (next.objective <= cur.objective * (1 + 1e-9) && decode_copy_ms(b, next) <= copies + 1e-9) {
          cur = std::move(next);
          any = true;
        }
      }
      if (any) {
        grown = std::move(cur);
        best_c = &*grown;
      }
    }
    std::optional<PlanSet> best;
    if (best_c) {
      best = finish(b, *best_c, o);
      best->ring_auto = o.ring_slots == 0;
      if (grown) {
        char note[200];
        std::snprintf(note, sizeof note,
                      "grown into the budget's rest: %s more resident at the same decode strategy (%s -> %s)",
                      format_bytes(grown->need - picked->need).c_str(), format_bytes(picked->need).c_str(),
                      format_bytes(grown->need).c_str());
        best->notes.push_back(note);
      }
      if (picked != fastest) {
        char note[320];
        std::snprintf(note, sizeof note,
                      "robust choice: K=%d, %.2f ms of copies per decode step (scenario %.0f ms) over K=%d, %.2f ms "
                      "(%.0f ms, %.1f%% faster): hidden copies are least certain",
                      picked->variant->slots, decode_copy_ms(b, *picked), picked->objective,
                      fastest->variant->slots, decode_copy_ms(b, *fastest), fastest->objective,
                      (1 - fastest->objective / picked->objective) * 100);
        best->notes.push_back(note);
      }
      for (const auto& [k, c] : best_by_depth) {
        if (k == 0) continue;
        RingChoice rc;
        rc.slots = k;
        rc.scenario_ms = c->objective;
        rc.decode_ms = (c->objective - c->ttft_ms - c->first_decode_extra_ms) / std::max(1, o.gen_tokens);
        best->ring_choices.push_back(rc);
      }
    }
    if (!best) {
      const Variant& v = *smallest;
      return make_error(ErrorCode::kOutOfMemory,
                        "VRAM budget %s is below the minimum %s for %s at context %d (KV cache %s, scratch %s, "
                        "cuBLAS workspace %s, norms %s, %s); raise --vram or lower -c",
                        format_bytes(o.vram_budget).c_str(), format_bytes(min_budget).c_str(),
                        spec.name.empty() ? "this model" : spec.name.c_str(), o.context,
                        format_bytes(b.kv_bytes()).c_str(), format_bytes(b.scratch_bytes()).c_str(),
                        format_bytes(o.workspace_bytes).c_str(), format_bytes(b.vectors_total()).c_str(),
                        v.slot > 0 ? ("ring " + std::to_string(v.slots) + " x " + format_bytes(v.slot)).c_str()
                                   : ("resident attention " + format_bytes(v.must)).c_str());
    }
    std::vector<std::string> notes = std::move(ps.notes);
    for (std::string& n : best->notes) notes.push_back(std::move(n));
    ps = std::move(*best);
    ps.notes = std::move(notes);
    ps.min_budget = min_budget;
    ps.gpu = true;
    ps.gpu_name = profile_.gpu->name;
  }

  ps.model = spec.name;
  ps.n_layer = spec.n_layer;
  ps.options = o;
  ps.eval_context = b.eval_context();
  ps.cpu_threads = cm.cpu_threads();
  ps.profile_source = profile_.source;
  ps.profile_fingerprint = profile_.machine.fingerprint();
  ps.cuda_context_bytes = ps.gpu ? o.cuda_context_bytes : 0;
  for (size_t i = 0; i < subs.size(); ++i) {
    SubLayerSummary s;
    s.label = subs[i].label();
    s.kind = subs[i].kind;
    s.layer = subs[i].layer;
    s.slice = subs[i].n_slices > 1 ? subs[i].slice : -1;
    s.bytes = b.mat_bytes()[i];
    s.vector_bytes = b.vec_bytes()[i];
    s.streamable = ps.ring_slots > 0 && !b.is_embed(i) && s.bytes > 0 && s.bytes <= ps.ring_slot_bytes;
    ps.sublayers.push_back(std::move(s));
    if (b.is_embed(i)) continue;
    ps.weights_total += b.mat_bytes()[i];
    if (ps.resident[i]) ps.weights_resident += b.mat_bytes()[i];
  }
  const double rest = static_cast<double>(ps.weights_total - ps.weights_resident);
  ps.limit_h_ms = rest / (cm.host_combined_gbs() * 1e9) * 1e3;
  ps.limit_cp_ms = rest / ((cm.host_bw_gbs() + cm.link_gbs()) * 1e9) * 1e3;
  ps.limit_serial_ms = ps.limit_h_ms;
  if (!ps.tiers.empty() && cm.host_combined_gbs() > 0) {
    const Plan& d = ps.tiers.front();  // tier 1: decode
    double cpu_bytes = 0, gpu_ms = 0;
    for (size_t i = 0; i < d.placement.size(); ++i)
      if (d.placement[i] == Placement::kCpu && !b.is_embed(i)) cpu_bytes += static_cast<double>(b.mat_bytes()[i]);
    // The GPU's compute that cannot overlap the CPU: all of it but the device slices of FFNs split
    // between the two (SimItem::group), which run beside the CPU's slices.
    for (const SimItem& it : b.items(d.placement, 1, b.eval_context()))
      if (it.on_gpu && it.group < 0) gpu_ms += it.compute_s * 1e3;
    ps.limit_serial_ms = std::max(ps.limit_h_ms, cpu_bytes / (cm.host_combined_gbs() * 1e9) * 1e3 + gpu_ms);
  }
  for (std::string& n : cm.notes_for(subs)) ps.notes.push_back(std::move(n));
  if (profile_.source == "estimated") ps.notes.push_back("profile is estimated, not measured: run `ferry profile`");
  return ps;
}

double predicted_at(const Plan& p, int32_t eval_context, double c) {
  if (eval_context <= 0) return p.predicted_ms;
  return p.predicted_ms_low + (p.predicted_ms - p.predicted_ms_low) * c / eval_context;
}

Expected<double> predict_step_ms(const HardwareProfile& profile, const PlannerOptions& options, const ModelSpec& spec,
                                 const std::vector<SubLayer>& subs, const std::vector<Placement>& placement,
                                 int32_t tokens, int32_t ring_slots) {
  FERRY_RETURN_IF_ERROR(validate_profile(profile));
  if (placement.size() != subs.size())
    return make_error(ErrorCode::kInvalidArgument, "placement has %zu entries for %zu sub-layers", placement.size(),
                      subs.size());
  if (tokens < 1 || ring_slots < 1) return make_error(ErrorCode::kInvalidArgument, "tokens and ring slots must be >= 1");
  const CostModel cm = make_cost_model(profile, options);
  for (Placement p : placement)
    if (p != Placement::kCpu && !cm.has_gpu())
      return make_error(ErrorCode::kInvalidArgument, "the profile has no GPU: every sub-layer must be on the CPU");
  const Builder b(cm, spec, subs, options);
  return b.step_s(placement, tokens, b.eval_context(), ring_slots) * 1e3;
}

Expected<StepsSimulation> simulate_steps(const HardwareProfile& profile, const PlannerOptions& options,
                                         const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                         const std::vector<std::vector<Placement>>& placements,
                                         const std::vector<int32_t>& tokens, int32_t ring_slots) {
  FERRY_RETURN_IF_ERROR(validate_profile(profile));
  if (placements.size() != tokens.size())
    return make_error(ErrorCode::kInvalidArgument, "%zu placements for %zu token counts", placements.size(),
                      tokens.size());
  if (ring_slots < 1) return make_error(ErrorCode::kInvalidArgument, "ring slots must be >= 1");
  const CostModel cm = make_cost_model(profile, options);
  const Builder b(cm, spec, subs, options);
  StepsSimulation out;
  for (size_t s = 0; s < placements.size(); ++s) {
    if (placements[s].size() != subs.size())
      return make_error(ErrorCode::kInvalidArgument, "step %zu: placement has %zu entries for %zu sub-layers", s,
                        placements[s].size(), subs.size());
    if (tokens[s] < 1) return make_error(ErrorCode::kInvalidArgument, "step %zu: tokens must be >= 1", s);
    for (Placement p : placements[s])
      if (p != Placement::kCpu && !cm.has_gpu())
        return make_error(ErrorCode::kInvalidArgument, "the profile has no GPU: every sub-layer must be on the CPU");
    out.items.push_back(b.items(placements[s], tokens[s], b.eval_context()));
  }
  out.result = simulate(out.items, b.sim_params(ring_slots));
  return out;
}

std::string format_bytes(uint64_t bytes) {
  char b[32];
  const double x = static_cast<double>(bytes);
  if (x >= 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.2f GiB", x / (1024.0 * 1024 * 1024));
  else if (x >= 1024.0 * 1024) std::snprintf(b, sizeof b, "%.0f MiB", x / (1024.0 * 1024));
  else if (x >= 1024.0) std::snprintf(b, sizeof b, "%.0f KiB", x / 1024.0);
  else std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(bytes));
  return b;
}

}  // namespace ferry::plan
