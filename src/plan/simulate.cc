// Fluid event simulation of the compute chain + copy engine + K-slot ring (see simulate.h). The copy
// queue (fills, hits, prefetches) is built first: which fill hits depends only on the order of fills,
// as in exec::WeightRing::fill. Then the chain and the copy engine advance event by event. The chain
// is walked segment by segment: a segment is one plain item or one group (its slices run at once);
// it runs on two lanes, GPU and CPU, of which a plain item uses the one of its device, so that a
// plain item and a group on one lane take the very same path.
#include "plan/simulate.h"

#include <algorithm>
#include <limits>

#include "base/status.h"

namespace ferry::plan {

namespace {

struct Flat {
  const SimItem* item;
  size_t step;
  size_t pos;           // index inside its step
  int64_t data = -1;    // streamed: the fill whose copy brought its weights
};

struct Fill {
  size_t step;             // the step that issues it (a prefetch: the step it follows)
  bool prefetch = false;   // issued after `step` ended
  bool hit = false;        // the slot already holds the sub-layer: nothing copied
  double copy_s = 0;
  int64_t gate = -1;       // step that must have ended before the copy starts (-1: none)
  int64_t dep = -1;        // flat item that must have been computed (the slot's last consumer)
};

}  // namespace

SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params) {
  FERRY_ASSERT(params.ring_slots >= 1);
  const size_t K = static_cast<size_t>(params.ring_slots);
  const bool prefetch = params.prefetch_after_step_end;
  SimResult result;
  result.step_end.assign(steps.size(), 0.0);
  result.step_copy_s.assign(steps.size(), 0.0);
  result.counts.assign(steps.size(), SimStepCounts{});
  result.start.resize(steps.size());
  result.end.resize(steps.size());
  result.ready.resize(steps.size());

  // The executor's fill order, with the ring's contents tracked by id. The planner calls this many
  // thousand times a plan: sized once, no growth.
  size_t n_items = 0, n_streamed = 0;
  for (const auto& step : steps) {
    n_items += step.size();
    for (const SimItem& it : step) n_streamed += it.streamed ? 1 : 0;
  }
  std::vector<Flat> items;
  items.reserve(n_items);
  std::vector<Fill> fills;
  fills.reserve(n_streamed + (prefetch ? K * steps.size() : 0));
  std::vector<int32_t> slot_id(K, -1);        // sub-layer in (or on its way to) the slot; -1 none
  std::vector<int64_t> slot_src(K, -1);       // the fill that copied it
  std::vector<int64_t> slot_consumer(K, -1);  // flat item that last read the slot
  auto add_fill = [&](size_t s, bool pre, size_t k, const SimItem& it, int64_t gate) -> int64_t {
    Fill f;
    f.step = s;
    f.prefetch = pre;
    f.hit = it.id >= 0 && slot_id[k] == it.id;
    f.copy_s = it.copy_s;
    f.gate = gate;
    f.dep = slot_consumer[k];
    fills.push_back(f);
    const int64_t idx = static_cast<int64_t>(fills.size()) - 1;
    if (!f.hit) {
      slot_id[k] = it.id;
      slot_src[k] = idx;
    }
    return slot_src[k];
  };
  std::vector<size_t> streamed;  // flat indices of the step's streamed items
  streamed.reserve(n_streamed);
  for (size_t s = 0; s < steps.size(); ++s) {
    result.start[s].assign(steps[s].size(), -1.0);
    result.end[s].assign(steps[s].size(), -1.0);
    result.ready[s].assign(steps[s].size(), -1.0);
    streamed.clear();
    for (size_t p = 0; p < steps[s].size(); ++p) {
      const SimItem& it = steps[s][p];
      if (it.streamed) {
        FERRY_ASSERT(it.on_gpu);
        streamed.push_back(items.size());
      }
      items.push_back({&it, s, p});
    }
    for (size_t j = 0; j < streamed.size(); ++j) {
      const size_t k = j % K;
      const int64_t gate = prefetch && s > 0 && j < K ? static_cast<int64_t>(s) - 1 : -1;
      items[streamed[j]].data = add_fill(s, false, k, *items[streamed[j]].item, gate);
      slot_consumer[k] = static_cast<int64_t>(streamed[j]);
    }
    // The last step's prefetch changes nothing simulated: left out. Items without an id cannot be
    // recognised by the next step, so nothing is prefetched for them (their fills still wait for the
    // step's end, as the executor's would).
    if (prefetch && s + 1 < steps.size())
      for (size_t j = 0; j < std::min(K, streamed.size()); ++j)
        if (items[streamed[j]].item->id >= 0)
          (void)add_fill(s, true, j, *items[streamed[j]].item, static_cast<int64_t>(s));
  }
  for (const Fill& f : fills) {
    SimStepCounts& c = result.counts[f.step];
    if (f.prefetch) {
      if (f.hit) continue;
      ++c.prefetch_copies;
      result.step_copy_s[f.step + 1] += f.copy_s;
    } else if (f.hit) {
      ++c.hits;
      continue;
    } else {
      ++c.copies;
      result.step_copy_s[f.step] += f.copy_s;
    }
    ++result.copies;
  }
  const size_t n = items.size(), m = fills.size();
  std::vector<char> computed(n, 0), copied(m, 0);
  std::vector<double> fill_end(m, -1.0);
  std::vector<char> step_done(steps.size(), 0);
  // The running segment is items [ci, seg_end); none is set up while seg_end == ci.
  size_t ci = 0, seg_end = 0, cj = 0;  // segment start, its end, next fill in queue order
  // One lane per device. Each runs the segment's items of its device in order; cur == seg_end once
  // it has run them all (a plain item leaves the other lane empty from the start).
  struct Lane {
    bool gpu = false;
    size_t cur = 0;      // flat index of the item it runs
    int phase = 0;       // 0 waiting for its weights, 1 hand-over, 2 computing
    double c_left = 0;   // remaining work of the current phase (alone-seconds)
  };
  Lane lanes[2];
  lanes[0].gpu = true;
  bool copying = false;
  double k_left = 0;
  double t = 0;

  auto copy_may_start = [&](const Fill& f) {
    if (f.dep >= 0 && !computed[f.dep]) return false;
    if (f.gate >= 0 && !step_done[f.gate]) return false;
    return true;
  };
  // The lane's next item from flat index `from` on, inside the running segment.
  auto next_on = [&](const Lane& l, size_t from) {
    while (from < seg_end && items[from].item->on_gpu != l.gpu) ++from;
    return from;
  };
  auto active = [&](const Lane& l) { return l.cur < seg_end; };
  // Only a CPU item computing competes with the copies for host memory: GPU compute slows nothing.
  auto cpu_computing = [&](const Lane& l) { return active(l) && l.phase == 2 && !items[l.cur].item->on_gpu; };

  while (ci < n) {
    // Start what can start (zero-length phases complete in the same instant). The order of the checks
    // decides ties at one instant (e.g. a hand-over queued behind a copy that ends now): an item is
    // looked at in the pass after the one its predecessor ended in, once the copy queue has moved, the
    // same whether the two are plain items or one lane's items in a group.
    bool progressed = true;
    while (progressed && ci < n) {
      progressed = false;
      if (seg_end == ci) {
        // Set up the next segment: a group runs on while the items carry its number, within the step.
        seg_end = ci + 1;
        const int32_t g = items[ci].item->group;
        if (g >= 0)
          while (seg_end < n && items[seg_end].step == items[ci].step && items[seg_end].item->group == g) ++seg_end;
        for (Lane& l : lanes) {
          l.cur = next_on(l, ci);
          l.phase = 0;
          l.c_left = 0;
        }
      }
      for (Lane& l : lanes) {
        if (!active(l)) continue;
        const Flat& f = items[l.cur];
        if (l.phase == 0) {
          const bool h2d = f.item->on_gpu && f.item->xfer_s > 0;
          if ((f.data < 0 || copied[f.data]) && !(h2d && copying && params.handover_behind_copy)) {
            l.phase = 1;
            l.c_left = f.item->xfer_s;
            progressed = true;
          }
        }
        if (l.phase == 1 && l.c_left <= 0) {
          l.phase = 2;
          l.c_left = f.item->compute_s;
          result.start[f.step][f.pos] = t;
          progressed = true;
        }
        if (l.phase == 2 && l.c_left <= 0) {
          // Its slot may be refilled now, even while the rest of its group still runs.
          computed[l.cur] = 1;
          result.end[f.step][f.pos] = t;
          l.cur = next_on(l, l.cur + 1);
          l.phase = 0;
          progressed = true;
        }
      }
      if (seg_end > ci && !active(lanes[0]) && !active(lanes[1])) {
        // The segment has ended: the next one may start (a segment lies within one step).
        const size_t s = items[ci].step;
        result.step_end[s] = t;
        if (seg_end == n || items[seg_end].step != s) step_done[s] = 1;
        ci = seg_end;
        progressed = true;
      }
      // Hits enqueue nothing: the queue moves past them at once (their data is an earlier copy's).
      while (!copying && cj < m && fills[cj].hit) {
        copied[cj] = 1;
        fill_end[cj] = t;
        ++cj;
        progressed = true;
      }
      if (!copying && cj < m && copy_may_start(fills[cj])) {
        copying = true;
        k_left = fills[cj].copy_s;
        progressed = true;
      }
      if (copying && k_left <= 0) {
        copied[cj] = 1;
        fill_end[cj] = t;
        ++cj;
        copying = false;
        progressed = true;
      }
    }
    if (ci >= n) break;

    const bool cpu_running = cpu_computing(lanes[0]) || cpu_computing(lanes[1]);
    const double r_copy = (copying && cpu_running) ? params.copy_share_while_cpu : 1.0;
    double r_lane[2];
    double dt = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < 2; ++i) {
      r_lane[i] = (copying && cpu_computing(lanes[i])) ? params.cpu_share_while_copying : 1.0;
      if (active(lanes[i]) && lanes[i].phase >= 1) dt = std::min(dt, lanes[i].c_left / r_lane[i]);
    }
    if (copying) dt = std::min(dt, k_left / r_copy);
    FERRY_ASSERT_MSG(dt < std::numeric_limits<double>::infinity(), "simulation stalled (ring dependency cycle)");
    t += dt;
    for (size_t i = 0; i < 2; ++i) {
      Lane& l = lanes[i];
      if (!active(l) || l.phase < 1) continue;
      l.c_left = std::max(0.0, l.c_left - dt * r_lane[i]);
      // Snap rounding residue so the task that set dt completes exactly.
      if (l.c_left < 1e-15) l.c_left = 0;
    }
    if (copying) k_left = std::max(0.0, k_left - dt * r_copy);
    if (copying && k_left < 1e-15) k_left = 0;
  }
  for (const Flat& f : items)
    if (f.data >= 0) result.ready[f.step][f.pos] = fill_end[f.data];
  return result;
}

}  // namespace ferry::plan
