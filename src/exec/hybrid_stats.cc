// HybridRunner, statistics and timeline: per-tier counts and times of the steps run (TierStats), the
// spans a Timeline records (device spans from timing events measured against an origin event, CPU spans
// and host waits from the host clock), and explain_text's one-screen comparison with the plan.
#include <algorithm>
#include <cstdio>

#include "exec/hybrid_runner_impl.h"

namespace ferry::exec {

namespace detail {

using model::SubLayerKind;
using plan::Placement;

namespace {

// KV cells before this step as the cost model counts context: the newest position + 1 - the step's tokens.
double step_context(const StepIo& in) {
  int32_t last = 0;
  for (int32_t i = 0; i < in.n_tokens; ++i) last = std::max(last, in.pos[i] + 1);
  return std::max(0, last - in.n_tokens);
}

}  // namespace

TierStats HybridRunnerImpl::blank_stats(int32_t tokens, plan::Strategy s, double predicted_ms) const {
  TierStats t;
  t.tokens = tokens;
  t.strategy = s;
  t.predicted_ms = predicted_ms;
  t.sub_ms.assign(sublayers_.size(), 0.0);
  return t;
}

void HybridRunnerImpl::reset_stats() {
  for (TierStats& t : tier_stats_) {
    const TierStats fresh = blank_stats(t.tokens, t.strategy, t.predicted_ms);
    t = fresh;
  }
  cache_.stats = ExpertCacheStats{};
}

void HybridRunnerImpl::set_timeline(Timeline* timeline) {
  timeline_ = timeline;
  pending_prefetches_.clear();
  timeline_step_ = 0;
  if (!timeline_) return;
  Status s = Status::ok();
  auto make = [&](std::vector<std::unique_ptr<Event>>& v, size_t n) {
    while (s.is_ok() && v.size() < n) {
      auto e = device_->create_event(true);
      if (!e) {
        s = e.status();
        return;
      }
      v.push_back(std::move(*e));
    }
  };
  make(sublayer_start_events_, sublayers_.size());
  make(sublayer_end_events_, sublayers_.size());
  const size_t K = ring_ ? static_cast<size_t>(ring_->slots()) : 0;
  make(prefetch_start_events_, K);
  make(prefetch_end_events_, K);
  if (s.is_ok() && !timeline_origin_event_) {
    auto e = device_->create_event(true);
    if (e) timeline_origin_event_ = std::move(*e);
    else s = e.status();
  }
  if (s.is_ok()) s = device_->synchronize();
  if (s.is_ok()) s = device_->record(*timeline_origin_event_, *compute_stream_);
  if (s.is_ok()) s = device_->sync(*timeline_origin_event_);
  if (!s.is_ok()) {
    timeline_ = nullptr;  // recording is best effort: a device without timing events records nothing
    return;
  }
  timeline_origin_ms_ = now_ms();
}

void HybridRunnerImpl::begin_timeline_step(size_t tier, int32_t n_tokens, double start_ms) {
  StepMark mark;
  mark.step = timeline_step_;
  mark.tier = plan_.tiers[tier].tokens;
  mark.n_tokens = n_tokens;
  mark.t0_ms = start_ms - timeline_origin_ms_;
  timeline_->steps.push_back(mark);
}

void HybridRunnerImpl::end_timeline_step() {
  timeline_->steps.back().t1_ms = now_ms() - timeline_origin_ms_;
  ++timeline_step_;
}

double HybridRunnerImpl::timeline_ms(Event& e) {
  auto ms = device_->elapsed_ms(*timeline_origin_event_, e);
  return ms ? *ms : -1.0;
}

void HybridRunnerImpl::timeline_span(Lane lane, double t0, double t1, const std::string& label, uint64_t bytes) {
  if (!timeline_ || t0 < 0 || t1 < t0) return;
  Span sp;
  sp.lane = lane;
  sp.t0_ms = t0;
  sp.t1_ms = t1;
  sp.step = timeline_step_;
  sp.tier = timeline_->steps.empty() ? 0 : timeline_->steps.back().tier;
  sp.label = label;
  sp.bytes = bytes;
  timeline_->spans.push_back(std::move(sp));
}

Status HybridRunnerImpl::record_step_times(const Step& step) {
  const std::vector<Placement>& pl = placements_[step.tier];
  const std::vector<size_t>& streamed = streamed_by_tier_[step.tier];
  TierStats& stats = tier_stats_[step.tier];
  const Status s = device_->sync(*copy_stream_);
  for (size_t i = 0; i < sublayers_.size() && s.is_ok(); ++i) {
    const bool on_cpu = step.cpu_start_ms[i] >= 0;
    const bool on_dev = pl[i] != Placement::kCpu;
    if (options_.measure) {
      if (on_cpu) {
        stats.sub_ms[i] += step.cpu_end_ms[i] - step.cpu_start_ms[i];
      } else if (on_dev) {
        auto ms = device_->elapsed_ms(*sublayer_start_events_[i], *sublayer_end_events_[i]);
        if (ms) stats.sub_ms[i] += *ms;
      }
    }
    if (step.recording) {
      if (on_cpu) {
        timeline_span(Lane::kCpu, step.cpu_start_ms[i] - timeline_origin_ms_, step.cpu_end_ms[i] - timeline_origin_ms_,
                      sublayers_[i].label());
      } else if (on_dev) {
        timeline_span(Lane::kGpu, timeline_ms(*sublayer_start_events_[i]), timeline_ms(*sublayer_end_events_[i]),
                      sublayers_[i].label());
      }
    }
  }
  for (size_t c = 0; c < step.fills_issued && c < fill_start_events_.size() && c < fill_copied_.size(); ++c) {
    if (!fill_copied_[c]) continue;
    if (options_.measure) {
      auto ms = device_->elapsed_ms(*fill_start_events_[c], *fill_end_events_[c]);
      if (ms) stats.copy_ms += *ms;
    }
    if (step.recording)
      timeline_span(Lane::kCopy, timeline_ms(*fill_start_events_[c]), timeline_ms(*fill_end_events_[c]),
                    "copy " + sublayers_[streamed[c]].label(), slot_layouts_[streamed[c]].bytes);
  }
  if (step.recording) {
    for (const PendingCopy& p : step.previous_prefetches) {
      const int32_t keep = timeline_step_;
      timeline_step_ = p.step;
      timeline_span(Lane::kCopy, timeline_ms(*prefetch_start_events_[p.slot]), timeline_ms(*prefetch_end_events_[p.slot]),
                    p.label, p.bytes);
      timeline_step_ = keep;
    }
    for (const auto& [a, b] : step.host_waits)
      timeline_span(Lane::kHost, a - timeline_origin_ms_, b - timeline_origin_ms_, "wait");
  }
  return s;
}

void HybridRunnerImpl::count_cpu_time(const Step& step) {
  if (step.tier >= plan_.tiers.size()) return;
  TierStats& stats = tier_stats_[step.tier];
  const std::vector<double>& plan_ms = plan_.tiers[step.tier].sub_ms;
  for (size_t i = 0; i < sublayers_.size(); ++i) {
    // CPU sub-layers the plan prices at >= 20 us (TierStats::cpu_ms).
    if (step.cpu_start_ms[i] < 0 || i >= plan_ms.size() || plan_ms[i] < 0.02 ||
        sublayers_[i].kind == SubLayerKind::kEmbed)
      continue;
    stats.cpu_ms += step.cpu_end_ms[i] - step.cpu_start_ms[i];
    stats.cpu_plan_ms += plan_ms[i];
    ++stats.cpu_calls;
  }
}

void HybridRunnerImpl::count_step(size_t tier, const StepIo& in, double start_ms) {
  TierStats& stats = tier_stats_[tier];
  ++stats.steps;
  stats.context_sum += step_context(in);
  stats.wall_ms += now_ms() - start_ms;
}

}  // namespace detail

std::optional<double> cpu_vs_profile(const std::vector<TierStats>& stats, int64_t min_calls) {
  double ms = 0, plan_ms = 0;
  int64_t calls = 0;
  for (const TierStats& t : stats) {
    ms += t.cpu_ms;
    plan_ms += t.cpu_plan_ms;
    calls += t.cpu_calls;
  }
  if (calls < min_calls || plan_ms <= 0) return std::nullopt;
  return ms / plan_ms;
}

double TierStats::predicted_at_steps(const plan::PlanSet& ps, size_t tier) const {
  if (steps == 0 || tier >= ps.tiers.size()) return predicted_ms;
  return plan::predicted_at(ps.tiers[tier], ps.eval_context, context_sum / steps);
}

std::string explain_text(const HybridRunner& r) {
  std::string out;
  char line[512];
  const plan::PlanSet& ps = r.plan();
  std::snprintf(line, sizeof line, "%-6s %-10s %6s %12s %12s %8s %7s %9s %6s %9s\n", "tier", "strategy", "steps",
                "predicted ms", "measured ms", "ratio", "copies", "copy MiB", "hits", "prefetch");
  out += line;
  for (size_t ti = 0; ti < r.stats().size(); ++ti) {
    const TierStats& t = r.stats()[ti];
    if (t.steps == 0) continue;
    const double meas = t.wall_ms / t.steps, pred = t.predicted_at_steps(ps, ti);
    std::snprintf(line, sizeof line, "%-6d %-10s %6lld %12.3f %12.3f %8.2f %7lld %9.1f %6lld %9lld\n", t.tokens,
                  plan::strategy_name(t.strategy), static_cast<long long>(t.steps), pred, meas,
                  pred > 0 ? meas / pred : 0.0, static_cast<long long>(t.copies),
                  t.copy_bytes / 1048576.0, static_cast<long long>(t.prefetch_hits),
                  static_cast<long long>(t.prefetch_copies));
    out += line;
  }
  bool any_sub = false;
  for (const TierStats& t : r.stats())
    for (double v : t.sub_ms) any_sub |= v > 0;
  if (!any_sub) return out;
  int width = 14;  // the longest label ("blk.47.experts[120:128)" for expert groups)
  for (const plan::SubLayerSummary& sl : ps.sublayers) width = std::max(width, static_cast<int>(sl.label.size()));
  out += "\nper sub-layer, ms per step (device: compute-stream events; cpu: host clock), and the plan's time for it\n"
         "alone (cpu: no copies running; device: kernels without a graph, the copy not included)\n";
  for (size_t ti = 0; ti < r.stats().size(); ++ti) {
    const TierStats& t = r.stats()[ti];
    if (t.steps == 0) continue;
    std::snprintf(line, sizeof line, "tier %d: copies %.3f ms/step\n", t.tokens, t.copy_ms / t.steps);
    out += line;
    const std::vector<double>* pred = ti < ps.tiers.size() ? &ps.tiers[ti].sub_ms : nullptr;
    for (size_t i = 0; i < t.sub_ms.size(); ++i) {
      const double meas = t.sub_ms[i] / t.steps;
      const bool same_place = pred != nullptr && i < ps.tiers[ti].placement.size() &&
                              ps.tiers[ti].placement[i] == r.placements()[ti][i];  // not a forced strategy's
      if (same_place && i < pred->size() && (*pred)[i] > 0) {
        std::snprintf(line, sizeof line, "  %-*s %-9s %10.3f  plan %8.3f  %+5.0f %%\n", width, ps.sublayers[i].label.c_str(),
                      plan::placement_name(r.placements()[ti][i]), meas, (*pred)[i], (meas / (*pred)[i] - 1) * 100);
      } else {
        std::snprintf(line, sizeof line, "  %-*s %-9s %10.3f\n", width, ps.sublayers[i].label.c_str(),
                      plan::placement_name(r.placements()[ti][i]), meas);
      }
      out += line;
    }
  }
  return out;
}

}  // namespace ferry::exec
