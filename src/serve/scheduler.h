// Scheduler: continuous batching over one Engine. Requests are admitted into the engine's sequences
// (at most n_parallel at once); every step then carries one decode token of each running sequence and
// fills the rest of the step, up to the engine's n_batch, with prompt chunks of newly admitted ones, so
// a long prompt never stops the others' replies and the executor runs the plan of that step's token
// count (its tier). One thread owns the engine and runs the steps; callers submit from any thread and
// read their Request (serve/request.h) from theirs.
//
// KV cells are shared by all sequences. A request reserves prompt + max_tokens cells, at most
// ctx_per_request, when it is admitted, so a running request never runs out of cells; requests wait in
// a bounded FIFO queue while every sequence is busy or the free cells cannot hold their reservation,
// and submit() refuses a request (kBusy) when the queue is full.
//
// Prompt reuse: when a request ends, its sequence keeps the prompt's cells (not the reply's). A new
// request goes to the free sequence whose kept prompt shares the longest prefix with its own and
// computes only the rest (a chat client sends the whole history each turn); kept prompts give way,
// least recently used first, when a reservation needs their cells. On the CPU and reference devices a
// prompt token's K/V do not depend on how the prompt was cut into steps, so reuse changes no result.
//
// Numerics: each step declares its decode tokens (engine::Batch::n_decode), so on the CPU and reference
// devices a token's logits do not depend on which other requests share its step: a greedy request
// generates the same tokens alone or among others. The GPU executor does not give that guarantee (its
// kernels differ by step size), only agreement within its tolerance.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "serve/request.h"

namespace ferry::serve {

struct SchedulerOptions {
  int32_t n_parallel = 4;       // sequences generated at once (<= the engine's n_seq_max and n_batch)
  int32_t ctx_per_request = 0;  // KV cells one request may hold (prompt + reply); 0: n_ctx / n_parallel
  int32_t queue_size = 64;      // requests that may wait for a sequence or cells; beyond: kBusy
};

struct SchedulerStats {
  int32_t running = 0;           // requests in a sequence now
  int32_t queued = 0;            // requests waiting
  int64_t submitted = 0;         // accepted by submit()
  int64_t rejected_busy = 0;     // refused because the queue was full
  int64_t finished[4] = {};      // by FinishReason
  int64_t prompt_tokens = 0;     // prompt tokens computed
  int64_t prompt_tokens_reused = 0;  // prompt tokens found in the cache (not computed again)
  int64_t generated_tokens = 0;  // tokens sampled
  int64_t steps = 0;             // engine steps
  int64_t step_tokens = 0;       // tokens in those steps
  double step_seconds = 0;       // their total time
  double last_step_ms = 0;
  int32_t kv_cells_total = 0;
  int32_t kv_cells_reserved = 0;  // reserved by running requests
  int32_t kv_cells_cached = 0;    // holding finished requests' prompts for reuse
};

class Scheduler {
 public:
  // Starts the scheduler's thread over `engine`, which it then owns until destruction (nothing else
  // may step it). Errors: options the engine cannot serve (kInvalidArgument).
  static Expected<std::unique_ptr<Scheduler>> start(engine::Engine& engine, const SchedulerOptions& options);
  // Stops the thread; requests still queued or running finish with kCancelled.
  virtual ~Scheduler() = default;

  // Queues a request. Errors: an empty prompt, a token outside the vocabulary, or a prompt that leaves
  // no room for a reply within ctx_per_request (kInvalidArgument); a full queue (kBusy). max_tokens
  // beyond the room left is clamped to it (the request then ends with kLength at the limit).
  virtual Expected<std::shared_ptr<Request>> submit(std::vector<int32_t> prompt, const GenerationParams& params) = 0;

  // Refuses new requests from now on (kBusy) and cancels every queued and running one (a server
  // shutting down). The thread keeps running until destruction.
  virtual void shutdown() = 0;

  virtual SchedulerStats stats() const = 0;
  virtual int32_t ctx_per_request() const = 0;
  virtual int32_t n_parallel() const = 0;
};

}  // namespace ferry::serve
