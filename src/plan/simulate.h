// Step simulation: how long consecutive steps take when a chain of sub-layers runs on the CPU or the
// GPU while a copy engine streams weights through a ring of K slots, as the hybrid executor runs them
// (exec/hybrid_schedule.cc, exec/weight_ring.h). The copy queue is the executor's, fill for fill:
//  - step start: fills of the step's streamed sub-layers j = 0 .. K-1 (slot j mod K), issued when the
//    previous step has ended;
//  - in the step: the fill of j + K right after j has been computed (its slot's `freed` event);
//  - step end: the executor's prefetch fills j = 0 .. K-1 again (same tier assumed), gated on that end.
//  A fill whose slot already holds the sub-layer (same id) copies nothing: a hit. So a step's fills at
//  its start are hits when the previous step's prefetch brought them (the executor counts them as
//  `prefetch_hits`; the prefetch copies themselves are not in its `copies`), and with <= K streamed
//  sub-layers a steady decode step copies nothing at all.
//  Copies run one at a time in queue order; a copy also waits for its slot's last consumer.
//  - the chain is sequential (each sub-layer needs the previous one's output, handed across devices),
//    except inside a group: the slices of one FFN block (SimItem::group) all read the block's input
//    and their outputs are summed, so the executor runs the group's CPU slices and GPU slices at the
//    same time. A group starts when the item before it has finished; inside it, a GPU lane (its
//    on_gpu items, in order) and a CPU lane (the others, in order) each run their items one after the
//    other, every item going through the usual phases (wait for its weights, hand-over, compute); the
//    group ends when both lanes have ended, and the next item starts then. A group on one lane only
//    is exactly the plain chain;
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
  // FFN slices run concurrently: consecutive items of one step with the same group >= 0 form a group
  // (see the top of the file), because they read the same input and their outputs are summed. -1: a
  // plain chain item.
  int32_t group = -1;
};

struct SimParams {
  int32_t ring_slots = 2;
  double cpu_share_while_copying = 1;
  double copy_share_while_cpu = 1;
  // The executor's end-of-step prefetch: after step s the fills of its first K streamed sub-layers are
  // issued again (gated on the end of step s), and step s + 1's first K fills wait for that end too.
  // false: no prefetch, a step's first fills start as soon as their slot is free (an idealised
  // executor that runs across step boundaries).
  bool prefetch_after_step_end = true;
  // A host-to-device activation hand-over (CPU -> GPU item) waits for the weight copy in flight: both
  // use the GPU's host-to-device copy engine, which runs them in order.
  bool handover_behind_copy = false;
};

// Fill accounting of one step, in the executor's terms (exec::TierStats).
struct SimStepCounts {
  int64_t copies = 0;           // fills of the step's own streamed sub-layers that copied (TierStats::copies)
  int64_t hits = 0;             // fills that found their sub-layer in the slot (TierStats::prefetch_hits)
  int64_t prefetch_copies = 0;  // copies of the prefetch issued after this step (not in TierStats)
};

struct SimResult {
  std::vector<double> step_end;  // completion time of each step, from t = 0 (cold ring)
  int64_t copies = 0;            // copies made (fills and prefetches that were not hits)
  // Per step: copy time alone of the copies its items needed: its own fills that copied plus the
  // previous step's prefetch copies (which a steady step's first fills then hit).
  std::vector<double> step_copy_s;
  std::vector<SimStepCounts> counts;  // per step
  // Timeline per step and item (same shape as the input): when its compute started / ended (the
  // hand-over excluded); streamed items: when the copy that brought its weights ended (else -1).
  std::vector<std::vector<double>> start, end, ready;
};

// steps[i] = the items of step i in execution order.
SimResult simulate(const std::vector<std::vector<SimItem>>& steps, const SimParams& params);

}  // namespace ferry::plan
