// Step simulation: how long consecutive steps take when a chain of sub-layers runs on the CPU or the
// GPU while a copy engine streams weights through a ring of K slots. The chain is sequential (each
// sub-layer needs the previous one's output); the copy engine runs ahead, bounded by free slots, and
// across step boundaries (weights do not depend on data). CPU kernels and copies share host memory:
// while both run, each progresses at its measured share (cpu_share_while_copying,
// copy_share_while_cpu). A fluid event simulation: exact for this model, no time steps.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::plan {

struct SimItem {
  bool on_gpu = false;    // computes on the GPU (resident or streamed), else on the CPU
  bool streamed = false;  // weights come through the ring (on_gpu must be true)
  double xfer_s = 0;      // activation hand-over before it runs (device change), not contended
  double compute_s = 0;   // alone
  double copy_s = 0;      // weight copy time alone (streamed only)
};

struct SimParams {
  int32_t ring_slots = 2;
  double cpu_share_while_copying = 1;
  double copy_share_while_cpu = 1;
};

struct SimResult {
  std::vector<double> step_end;  // completion time of each step, from t = 0 (cold ring)
};

// steps[i] = the items of step i in execution order.
SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params);

}  // namespace ferry::plan
