// PlanSet output: JSON (the contract of `ferry plan --json`) and a one-screen text form.
// Both are pure functions of the PlanSet, so equal plans print byte-identical output.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/planner.h"

namespace ferry::plan {

using json = nlohmann::ordered_json;
using model::SubLayerKind;

namespace {

// Milliseconds rounded to the microsecond: stable text, no float noise in diffs.
double ms(double x) { return std::round(x * 1000.0) / 1000.0; }

json vram_json(const VramBreakdown& v) {
  return json{{"weights", v.weights}, {"kv", v.kv},           {"ring", v.ring},
              {"scratch", v.scratch}, {"workspace", v.workspace}, {"total", v.total}};
}

char placement_char(Placement p) {
  switch (p) {
    case Placement::kResident: return 'R';
    case Placement::kStreamed: return 'S';
    case Placement::kCpu: return 'C';
  }
  return '?';
}

// One character per layer for the sub-layers of `kinds` (MoE: router + expert groups of a layer;
// 'M' when they are not all in one place). '.' for a layer without such a sub-layer.
// slice >= 0: only that FFN slice of each layer.
std::string layer_row(const PlanSet& ps, const std::vector<Placement>& pl, std::initializer_list<SubLayerKind> kinds,
                      int32_t slice = -1) {
  std::string row(static_cast<size_t>(std::max(ps.n_layer, 0)), '.');
  for (size_t i = 0; i < ps.sublayers.size(); ++i) {
    const SubLayerSummary& s = ps.sublayers[i];
    if (s.layer < 0 || s.layer >= ps.n_layer) continue;
    if (slice >= 0 && s.slice != slice) continue;
    if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) continue;
    if (s.bytes == 0) continue;
    char& c = row[static_cast<size_t>(s.layer)];
    const char here = placement_char(pl[i]);
    c = (c == '.' || c == here) ? here : 'M';
  }
  return row;
}

char head_char(const PlanSet& ps, const std::vector<Placement>& pl) {
  for (size_t i = 0; i < ps.sublayers.size(); ++i)
    if (ps.sublayers[i].kind == SubLayerKind::kHead) return placement_char(pl[i]);
  return '?';
}

std::string tier_range(const PlanSet& ps, size_t a, size_t b) {
  if (a == b) return std::to_string(ps.tiers[a].tokens);
  return std::to_string(ps.tiers[a].tokens) + "-" + std::to_string(ps.tiers[b].tokens);
}

void appendf(std::string& out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  out += buf;
}

}  // namespace

std::string plan_to_json(const PlanSet& ps) {
  json j;
  j["model"] = ps.model;
  j["gpu"] = ps.gpu ? json(ps.gpu_name) : json(nullptr);
  j["profile"] = json{{"source", ps.profile_source}, {"fingerprint", ps.profile_fingerprint}};
  j["budget"] = ps.options.vram_budget;
  j["min_budget"] = ps.min_budget;
  j["context"] = ps.options.context;
  j["batch"] = ps.options.batch;
  j["gemm_staging_bytes"] = ps.options.gemm_staging_bytes;  // 0: a whole matrix
  j["eval_context"] = ps.eval_context;
  j["cpu_threads"] = ps.cpu_threads;
  j["cuda_context_headroom"] = ps.cuda_context_bytes;
  json ring = json{{"slots", ps.ring_slots},
                   {"slot_bytes", ps.ring_slot_bytes},
                   {"chosen_by", ps.ring_auto ? "planner" : "user"}};
  json depths = json::array();
  for (const RingChoice& c : ps.ring_choices)
    depths.push_back(json{{"slots", c.slots}, {"scenario_ms", ms(c.scenario_ms)}, {"decode_ms", ms(c.decode_ms)}});
  ring["depths"] = depths;  // the best plan of each depth tried (the chosen one has the lowest scenario_ms)
  j["ring"] = ring;
  j["ffn_slices"] = ps.ffn_slices;
  j["arena"] = vram_json(ps.arena);
  j["predicted"] = json{{"prompt_tokens", std::min(ps.options.prompt_tokens, ps.options.context)},
                        {"ttft_ms", ms(ps.ttft_ms)},
                        {"decode_tok_s", std::round(ps.decode_tok_s * 1000.0) / 1000.0},
                        {"gen_tokens", ps.options.gen_tokens},
                        {"scenario_ms", ms(ps.scenario_ms)},
                        {"first_decode_extra_ms", ms(ps.first_decode_extra_ms)}};
  j["limits"] = json{{"weights_total", ps.weights_total},
                     {"weights_resident", ps.weights_resident},
                     {"decode_ms_w_minus_r_over_h", ms(ps.limit_h_ms)},
                     {"decode_ms_w_minus_r_over_c_plus_p", ms(ps.limit_cp_ms)},
                     {"decode_ms_serial", ms(ps.limit_serial_ms)}};
  j["notes"] = ps.notes;
  json tiers = json::array();
  for (const Plan& p : ps.tiers) {
    json t;
    t["tokens"] = p.tokens;
    t["strategy"] = strategy_name(p.strategy);
    t["predicted_ms"] = ms(p.predicted_ms);
    t["vram"] = vram_json(p.vram);
    json alts = json::object();
    for (const StrategyEstimate& e : p.candidates) {
      json a;
      a["feasible"] = e.feasible;
      if (e.feasible) {
        a["predicted_ms"] = ms(e.step_ms);
        a["cpu_ms"] = ms(e.cpu_ms);
        a["gpu_ms"] = ms(e.gpu_ms);
        a["copy_ms"] = ms(e.copy_ms);
        a["transfer_ms"] = ms(e.xfer_ms);
      } else {
        a["why_not"] = e.why_not;
      }
      alts[strategy_name(e.strategy)] = a;
    }
    t["strategies"] = alts;
    if (!p.runner_up.empty()) t["runner_up"] = json{{"strategy", p.runner_up}, {"why_lost", p.why_runner_up_lost}};
    json pl = json::array();
    for (size_t i = 0; i < ps.sublayers.size(); ++i) {
      const SubLayerSummary& s = ps.sublayers[i];
      pl.push_back(json{{"sublayer", s.label},
                        {"kind", model::sublayer_kind_name(s.kind)},
                        {"layer", s.layer},
                        {"bytes", s.bytes},
                        {"where", placement_name(p.placement[i])}});
    }
    t["placement"] = pl;
    tiers.push_back(t);
  }
  j["tiers"] = tiers;
  return j.dump(2) + "\n";
}

std::string plan_to_text(const PlanSet& ps) {
  std::string out;
  uint64_t total = 0;
  for (const SubLayerSummary& s : ps.sublayers) total += s.bytes + s.vector_bytes;
  appendf(out, "plan for %s: %d layers, %s of weights; context %d, tiers 1..%d%s\n",
          ps.model.empty() ? "(unnamed model)" : ps.model.c_str(), ps.n_layer, format_bytes(total).c_str(),
          ps.options.context, ps.options.batch,
          ps.ffn_slices > 1 ? ("; FFNs in " + std::to_string(ps.ffn_slices) + " slices").c_str() : "");
  const double prompt = std::min(ps.options.prompt_tokens, ps.options.context);
  if (!ps.gpu) {
    appendf(out, "no GPU: every sub-layer runs on the CPU\n");
  } else {
    const VramBreakdown& a = ps.arena;
    appendf(out, "GPU %s, arena budget %s (minimum %s); one arena for all tiers:\n", ps.gpu_name.c_str(),
            format_bytes(ps.options.vram_budget).c_str(), format_bytes(ps.min_budget).c_str());
    appendf(out, "  weights %s + KV %s + ring %s + scratch %s%s + cuBLAS %s = %s; CUDA context ~%s beside the arena\n",
            format_bytes(a.weights).c_str(), format_bytes(a.kv).c_str(),
            ps.ring_slots > 0
                ? (std::to_string(ps.ring_slots) + "x" + format_bytes(ps.ring_slot_bytes)).c_str()
                : "0",
            format_bytes(a.scratch).c_str(),
            ps.options.gemm_staging_bytes > 0
                ? (" (GEMM staging " + format_bytes(ps.options.gemm_staging_bytes) + ")").c_str()
                : "",
            format_bytes(a.workspace).c_str(), format_bytes(a.total).c_str(), format_bytes(ps.cuda_context_bytes).c_str());
    if (!ps.ring_choices.empty()) {
      // Ring depth: each K tried with its best resident set (scenario = TTFT + decode of gen_tokens).
      std::string tried;
      for (const RingChoice& c : ps.ring_choices) {
        char b[96];
        std::snprintf(b, sizeof b, "%sK=%d %.2f", tried.empty() ? "" : ", ", c.slots, c.decode_ms);
        tried += b;
      }
      if (ps.ring_slots > 0)
        appendf(out, "  ring depth K=%d (%s); decode ms per depth tried: %s\n", ps.ring_slots,
                ps.ring_auto ? "planner's choice" : "given", tried.c_str());
      else
        appendf(out, "  no ring (%s); decode ms per depth tried: %s\n",
                ps.ring_auto ? "planner's choice" : "a ring was given but no ring planned better", tried.c_str());
    }
  }
  appendf(out, "predicted: TTFT %.1f ms for %.0f tokens, decode %.2f tok/s", ps.ttft_ms, prompt, ps.decode_tok_s);
  if (ps.gpu)
    appendf(out, " (limits: (W-R)/H %.1f ms, (W-R)/(C+P) %.1f ms, serial %.1f ms per token)", ps.limit_h_ms,
            ps.limit_cp_ms, ps.limit_serial_ms);
  appendf(out, "\n\n%6s  %-10s %10s %9s %9s %9s %9s  %s\n", "tokens", "strategy", "step ms", "cpu ms", "copy ms", "gpu ms",
          "tok/s", "runner-up: why it lost");
  for (const Plan& p : ps.tiers) {
    const StrategyEstimate* e = nullptr;
    for (const auto& c : p.candidates)
      if (c.strategy == p.strategy) e = &c;
    appendf(out, "%6d  %-10s %10.2f %9.2f %9.2f %9.2f %9.1f  %s%s%s\n", p.tokens, strategy_name(p.strategy),
            p.predicted_ms, e ? e->cpu_ms : 0.0, e ? e->copy_ms : 0.0, e ? e->gpu_ms : 0.0,
            p.tokens * 1e3 / p.predicted_ms, p.runner_up.c_str(), p.runner_up.empty() ? "-" : " ",
            p.why_runner_up_lost.c_str());
  }
  // Placement map: attention is one row (resident set is shared, non-resident attention always
  // streams); the FFN row per group of tiers with the same placement.
  const bool moe = std::any_of(ps.sublayers.begin(), ps.sublayers.end(),
                               [](const SubLayerSummary& s) { return s.kind == SubLayerKind::kExperts; });
  appendf(out, "\nplacement by layer 0..%d (R resident, S streamed, C cpu%s):\n", ps.n_layer - 1,
          moe ? ", M mixed expert groups" : "");
  const std::string attn = layer_row(ps, ps.tiers.front().placement, {SubLayerKind::kAttention});
  appendf(out, "  %-14s %s\n", "attn (all)", attn.c_str());
  // With FFN slices, one row per slice index (slices of a layer in different places run at once).
  int32_t rows = 1;
  for (const SubLayerSummary& s : ps.sublayers) rows = std::max(rows, s.slice + 1);
  auto ffn_rows = [&](size_t t) {
    std::vector<std::string> r;
    for (int32_t k = 0; k < rows; ++k)
      r.push_back(layer_row(ps, ps.tiers[t].placement, {SubLayerKind::kFfn, SubLayerKind::kMoeRouter, SubLayerKind::kExperts},
                            rows > 1 ? k : -1));
    return r;
  };
  size_t a = 0;
  while (a < ps.tiers.size()) {
    const std::vector<std::string> row = ffn_rows(a);
    const char head = head_char(ps, ps.tiers[a].placement);
    size_t b = a;
    while (b + 1 < ps.tiers.size() && ffn_rows(b + 1) == row && head_char(ps, ps.tiers[b + 1].placement) == head) ++b;
    for (int32_t k = 0; k < rows; ++k) {
      std::string name = (moe ? "moe " : "ffn ") + tier_range(ps, a, b);
      if (rows > 1) name += " s" + std::to_string(k);
      appendf(out, "  %-14s %s", name.c_str(), row[static_cast<size_t>(k)].c_str());
      if (k == rows - 1) appendf(out, "  head %c", head);
      appendf(out, "\n");
    }
    a = b + 1;
  }
  for (const std::string& n : ps.notes) appendf(out, "note: %s\n", n.c_str());
  return out;
}

}  // namespace ferry::plan
