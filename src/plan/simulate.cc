// Fluid event simulation of the compute chain + copy engine (see simulate.h).
#include "plan/simulate.h"

#include <algorithm>
#include <limits>

#include "base/status.h"

namespace ferry::plan {

SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params) {
  FERRY_ASSERT(params.ring_slots >= 1);
  struct Flat {
    const SimItem* item;
    size_t step;
    int64_t copy_ord;  // index among streamed items, -1 otherwise
  };
  std::vector<Flat> items;
  std::vector<size_t> streamed;  // item index of each copy, in copy order
  for (size_t s = 0; s < steps.size(); ++s)
    for (const SimItem& it : steps[s]) {
      int64_t ord = -1;
      if (it.streamed) {
        FERRY_ASSERT(it.on_gpu);
        ord = static_cast<int64_t>(streamed.size());
        streamed.push_back(items.size());
      }
      items.push_back({&it, s, ord});
    }

  SimResult result;
  result.step_end.assign(steps.size(), 0.0);
  const size_t n = items.size(), m = streamed.size();
  std::vector<char> computed(n, 0), copied(m, 0);
  size_t ci = 0, cj = 0;           // next compute item, next copy
  int phase = 0;                   // compute: 0 waiting, 1 hand-over, 2 computing
  double c_left = 0;               // remaining work of the current compute phase (alone-seconds)
  bool copying = false;
  double k_left = 0;
  double t = 0;
  const size_t K = static_cast<size_t>(params.ring_slots);

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
        result.step_end[items[ci].step] = t;
        ++ci;
        phase = 0;
        progressed = true;
      }
      if (!copying && cj < m && (cj < K || computed[streamed[cj - K]])) {
        copying = true;
        k_left = items[streamed[cj]].item->copy_s;
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
