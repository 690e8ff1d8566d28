// Fluid event simulation of the compute chain + copy engine + K-slot ring (see simulate.h).
#include "plan/simulate.h"

#include <algorithm>
#include <limits>

#include "base/status.h"

namespace ferry::plan {

SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params) {
  FERRY_ASSERT(params.ring_slots >= 1);
  const size_t K = static_cast<size_t>(params.ring_slots);
  struct Flat {
    const SimItem* item;
    size_t step;
    int64_t copy_ord;  // index among streamed items, -1 otherwise
  };
  struct Copy {
    size_t item;        // index into items
    int64_t prev = -1;  // the copy that last used this slot (its item must be computed first)
    bool hit = false;   // the slot still holds this sub-layer: nothing to copy
    bool gated = false; // one of the first K of a step > 0: waits for the previous step's end
  };
  std::vector<Flat> items;
  std::vector<Copy> copies;
  std::vector<int64_t> slot_last(K, -1);  // per slot: last copy assigned to it
  for (size_t s = 0; s < steps.size(); ++s) {
    size_t j = 0;  // streamed index within the step
    for (const SimItem& it : steps[s]) {
      int64_t ord = -1;
      if (it.streamed) {
        FERRY_ASSERT(it.on_gpu);
        ord = static_cast<int64_t>(copies.size());
        Copy c;
        c.item = items.size();
        const size_t k = j % K;
        c.prev = slot_last[k];
        c.hit = c.prev >= 0 && it.id >= 0 && items[copies[c.prev].item].item->id == it.id;
        c.gated = params.prefetch_after_step_end && s > 0 && j < K;
        slot_last[k] = ord;
        copies.push_back(c);
        ++j;
      }
      items.push_back({&it, s, ord});
    }
  }

  SimResult result;
  result.step_end.assign(steps.size(), 0.0);
  result.step_copy_s.assign(steps.size(), 0.0);
  const size_t n = items.size(), m = copies.size();
  std::vector<char> computed(n, 0), copied(m, 0);
  std::vector<char> step_done(steps.size(), 0);
  size_t ci = 0, cj = 0;           // next compute item, next copy
  int phase = 0;                   // compute: 0 waiting, 1 hand-over, 2 computing
  double c_left = 0;               // remaining work of the current compute phase (alone-seconds)
  bool copying = false;
  double k_left = 0;
  double t = 0;

  auto copy_may_start = [&](const Copy& c) {
    if (c.prev >= 0 && !computed[copies[c.prev].item]) return false;
    if (c.gated && !step_done[items[c.item].step - 1]) return false;
    return true;
  };

  while (ci < n) {
    // Start what can start (zero-length phases complete in the same instant).
    bool progressed = true;
    while (progressed && ci < n) {
      progressed = false;
      if (phase == 0) {
        const Flat& f = items[ci];
        if (f.copy_ord < 0 || copied[f.copy_ord]) {
          phase = 1;
          c_left = f.item->xfer_s;
          progressed = true;
        }
      }
      if (phase == 1 && c_left <= 0) {
        phase = 2;
        c_left = items[ci].item->compute_s;
        progressed = true;
      }
      if (phase == 2 && c_left <= 0) {
        computed[ci] = 1;
        const size_t s = items[ci].step;
        result.step_end[s] = t;
        if (ci + 1 == n || items[ci + 1].step != s) step_done[s] = 1;
        ++ci;
        phase = 0;
        progressed = true;
      }
      if (!copying && cj < m && copy_may_start(copies[cj])) {
        if (copies[cj].hit) {
          copied[cj] = 1;
          ++cj;
        } else {
          copying = true;
          k_left = items[copies[cj].item].item->copy_s;
          ++result.copies;
          result.step_copy_s[items[copies[cj].item].step] += k_left;
        }
        progressed = true;
      }
      if (copying && k_left <= 0) {
        copied[cj] = 1;
        ++cj;
        copying = false;
        progressed = true;
      }
    }
    if (ci >= n) break;

    const bool cpu_running = phase == 2 && !items[ci].item->on_gpu;
    const double r_compute = (phase == 2 && cpu_running && copying) ? params.cpu_share_while_copying : 1.0;
    const double r_copy = (copying && cpu_running) ? params.copy_share_while_cpu : 1.0;
    double dt = std::numeric_limits<double>::infinity();
    if (phase >= 1) dt = std::min(dt, c_left / r_compute);
    if (copying) dt = std::min(dt, k_left / r_copy);
    FERRY_ASSERT_MSG(dt < std::numeric_limits<double>::infinity(), "simulation stalled (ring dependency cycle)");
    t += dt;
    if (phase >= 1) c_left = std::max(0.0, c_left - dt * r_compute);
    if (copying) k_left = std::max(0.0, k_left - dt * r_copy);
    // Snap rounding residue so the task that set dt completes exactly.
    if (phase >= 1 && c_left < 1e-15) c_left = 0;
    if (copying && k_left < 1e-15) k_left = 0;
  }
  return result;
}

}  // namespace ferry::plan
