// Step simulation: how long consecutive steps take when a chain of sub-layers runs on the CPU or the
// GPU while a copy engine streams weights through a ring of K slots, as the hybrid executor runs them
// (exec/hybrid_runner.cc, exec/weight_ring.h):
//  - the chain is sequential (each sub-layer needs the previous one's output, handed across devices);
//  - the j-th streamed sub-layer of a step goes to slot j mod K; its copy starts when the copy engine
//    is free (copies run in order) and the slot's previous occupant has been computed;
//  - the first K copies of a step are issued when the previous step ends (the executor prefetches
//    them after its end-of-step sync), later ones as slots free up inside the step;
//  - a slot that still holds the same sub-layer (same id) from the previous step is not copied again;
//  - CPU kernels and copies share host memory: while both run, each progresses at its measured share
//    (cpu_share_while_copying, copy_share_while_cpu).
// A fluid event simulation: exact for this model, no time steps.
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
  int32_t id = -1;        // sub-layer identity for slot reuse across steps; -1: never reused
};

struct SimParams {
  int32_t ring_slots = 2;
  double cpu_share_while_copying = 1;
  double copy_share_while_cpu = 1;
  // The first ring_slots copies of step s > 0 wait for the end of step s - 1 (the executor's
  // end-of-step prefetch). false: they start as soon as their slot is free (an idealised executor).
  bool prefetch_after_step_end = true;
};

struct SimResult {
  std::vector<double> step_end;  // completion time of each step, from t = 0 (cold ring)
  int64_t copies = 0;            // copies made (streamed items not found in their slot)
  std::vector<double> step_copy_s;  // per step: copy time alone of the copies its items needed
};

// steps[i] = the items of step i in execution order.
SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params);

}  // namespace ferry::plan
