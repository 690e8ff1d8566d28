// The continuous-batching scheduler on tiny models (CPU): a greedy request generates the same tokens
// alone and among others that join and leave mid-way; seeded sampling repeats; max_tokens, the
// per-request context, cancellation, the bounded queue and KV reservations behave as scheduler.h says.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/tiny_model.h"
#include "serve/scheduler.h"

namespace ferry::serve {
namespace {

using ferry::testing::TempDir;
using ferry::testing::TinyModel;

struct Fixture {
  TempDir dir;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<Scheduler> sched;

  explicit Fixture(DType wtype = DType::F32, SchedulerOptions so = {}, int32_t n_ctx = 512, int32_t n_batch = 64) {
    TinyModel m;
    m.wtype = wtype;
    const std::string path = dir.file("tiny.gguf");
    Status st = write_tiny_model(m, path);
    EXPECT_TRUE(st.is_ok()) << st.message();
    engine::EngineOptions eo;
    eo.model_path = path;
    eo.n_ctx = n_ctx;
    eo.n_seq_max = so.n_parallel;
    eo.n_batch = n_batch;
    eo.n_threads = 2;
    auto e = engine::Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    engine = std::move(e).value();
    auto s = Scheduler::start(*engine, so);
    EXPECT_TRUE(s.has_value()) << s.status().message();
    sched = std::move(s).value();
  }
};

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((37 * i + 11 * salt + 5) % 300);
  return p;
}

GenerationParams greedy(int32_t max_tokens) {
  GenerationParams g;
  g.max_tokens = max_tokens;
  g.sampling.temp = 0.f;
  g.ignore_eos = true;
  g.top_logprobs = 0;  // the logprob entries carry the token ids
  return g;
}

std::vector<int32_t> ids(const RequestUpdate& u) {
  std::vector<int32_t> v;
  for (const TokenLogprob& lp : u.logprobs) v.push_back(lp.token);
  return v;
}

// Waits for the end, adding to what *u already holds.
RequestUpdate& finish(Request& r, RequestUpdate* u) {
  while (!u->finished) r.wait(u, std::chrono::milliseconds(1000));
  return *u;
}

std::shared_ptr<Request> submit(Scheduler& s, std::vector<int32_t> p, const GenerationParams& g) {
  auto r = s.submit(std::move(p), g);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return r ? *r : nullptr;
}

class SchedulerGreedy : public ::testing::TestWithParam<DType> {};

TEST_P(SchedulerGreedy, SameTokensAloneAndBatched) {
  SchedulerOptions so;
  so.n_parallel = 4;
  Fixture f(GetParam(), so, 512, 48);  // n_batch 48: the long prompts are cut into chunks
  ASSERT_TRUE(f.sched);
  // Prompt lengths around the kernels' size thresholds, one longer than a step.
  const int lens[5] = {3, 9, 70, 17, 1};
  const int gens[5] = {24, 11, 20, 30, 16};
  std::vector<std::vector<int32_t>> alone(5);
  const int64_t steps0 = f.sched->stats().steps;
  for (int i = 0; i < 5; ++i) {
    RequestUpdate u = submit(*f.sched, prompt(lens[i], i), greedy(gens[i]))->wait_all();
    ASSERT_TRUE(u.finished);
    EXPECT_EQ(u.reason, FinishReason::kLength);
    EXPECT_EQ(u.completion_tokens, gens[i]);
    EXPECT_EQ(u.prompt_tokens, lens[i]);
    alone[i] = ids(u);
    ASSERT_EQ(static_cast<int>(alone[i].size()), gens[i]);
  }
  const int64_t steps_alone = f.sched->stats().steps - steps0;
  // Together: five requests for four sequences, the later ones arriving while the first decode, so
  // steps mix decode tokens with prompt chunks and sequences leave and join.
  std::vector<std::shared_ptr<Request>> reqs;
  std::vector<RequestUpdate> got(5);
  for (int i = 0; i < 5; ++i) {
    reqs.push_back(submit(*f.sched, prompt(lens[i], i), greedy(gens[i])));
    if (i == 1) ASSERT_TRUE(reqs[0]->wait(&got[0], std::chrono::milliseconds(10000)));
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ids(finish(*reqs[i], &got[i])), alone[i]) << "request " << i;
  const SchedulerStats st = f.sched->stats();
  EXPECT_LT(st.steps - steps0 - steps_alone, steps_alone * 3 / 4);  // the requests did share steps
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_cells_reserved, 0);
  EXPECT_EQ(st.finished[static_cast<int>(FinishReason::kLength)], 10);
}

INSTANTIATE_TEST_SUITE_P(Types, SchedulerGreedy, ::testing::Values(DType::F32, DType::Q8_0, DType::Q4_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Scheduler, SeededSamplingRepeats) {
  Fixture f;
  GenerationParams g;
  g.max_tokens = 16;
  g.sampling.temp = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.min_p = 0.f;
  g.ignore_eos = true;
  g.top_logprobs = 0;
  g.sampling.seed = 42;
  const auto a = ids(submit(*f.sched, prompt(5, 1), g)->wait_all());
  const auto b = ids(submit(*f.sched, prompt(5, 1), g)->wait_all());
  g.sampling.seed = 43;
  const auto c = ids(submit(*f.sched, prompt(5, 1), g)->wait_all());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Scheduler, PromptLimitsAndClamp) {
  SchedulerOptions so;
  so.n_parallel = 2;
  so.ctx_per_request = 40;
  Fixture f(DType::F32, so, 128);
  EXPECT_EQ(f.sched->ctx_per_request(), 40);
  EXPECT_EQ(f.sched->submit({}, greedy(4)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.sched->submit({1, 300}, greedy(4)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.sched->submit(prompt(40, 1), greedy(4)).status().code(), ErrorCode::kInvalidArgument);
  // max_tokens far beyond the room: clamped to the 10 cells left, then kLength.
  RequestUpdate u = submit(*f.sched, prompt(30, 1), greedy(1 << 30))->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kLength);
  EXPECT_EQ(u.completion_tokens, 10);
  // max_tokens 0: finished at once.
  u = submit(*f.sched, prompt(3, 1), greedy(0))->wait_all();
  EXPECT_EQ(u.completion_tokens, 0);
  EXPECT_EQ(u.reason, FinishReason::kLength);
}

// The tests below need a request that is still generating when the test acts: "long" requests have
// room for 16K tokens (a second or so on the tiny model), and are cancelled once they served their part.
constexpr int32_t kLongCtx = 16384;

TEST(Scheduler, CancelFreesTheSequence) {
  SchedulerOptions so;
  so.n_parallel = 1;
  Fixture f(DType::F32, so, kLongCtx);
  auto long_one = submit(*f.sched, prompt(4, 1), greedy(-1));
  auto next = submit(*f.sched, prompt(4, 2), greedy(3));  // waits for the only sequence
  RequestUpdate some;
  ASSERT_TRUE(long_one->wait(&some, std::chrono::milliseconds(10000)));
  long_one->cancel();
  RequestUpdate u = long_one->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kCancelled);
  EXPECT_LT(u.completion_tokens, kLongCtx - 4);
  EXPECT_EQ(next->wait_all().completion_tokens, 3);
  // A cancelled request that is still queued leaves the queue.
  auto a = submit(*f.sched, prompt(4, 1), greedy(-1));
  auto b = submit(*f.sched, prompt(4, 2), greedy(-1));
  b->cancel();
  EXPECT_EQ(b->wait_all().reason, FinishReason::kCancelled);
  a->cancel();
  EXPECT_EQ(a->wait_all().reason, FinishReason::kCancelled);
  EXPECT_EQ(f.sched->stats().running, 0);
  EXPECT_EQ(f.sched->stats().finished[static_cast<int>(FinishReason::kCancelled)], 3);
}

TEST(Scheduler, FullQueueIsBusy) {
  SchedulerOptions so;
  so.n_parallel = 1;
  so.queue_size = 1;
  Fixture f(DType::F32, so, kLongCtx);
  auto a = submit(*f.sched, prompt(4, 1), greedy(-1));
  RequestUpdate some;
  ASSERT_TRUE(a->wait(&some, std::chrono::milliseconds(10000)));  // a runs
  auto b = submit(*f.sched, prompt(4, 2), greedy(3));             // b waits
  auto c = f.sched->submit(prompt(4, 3), greedy(3));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.status().code(), ErrorCode::kBusy);
  EXPECT_EQ(f.sched->stats().rejected_busy, 1);
  EXPECT_EQ(f.sched->stats().queued, 1);
  a->cancel();
  EXPECT_EQ(b->wait_all().completion_tokens, 3);
}

TEST(Scheduler, ReservationsWaitForCells) {
  // 6000 cells, 4000 per request: two sequences, but only one long reservation fits at a time.
  SchedulerOptions so;
  so.n_parallel = 2;
  so.ctx_per_request = 4000;
  Fixture f(DType::F32, so, 6000);
  auto a = submit(*f.sched, prompt(10, 1), greedy(200));
  auto b = submit(*f.sched, prompt(10, 2), greedy(-1));  // reserves 4000 cells: waits for a
  RequestUpdate ua = a->wait_all();
  RequestUpdate some;
  ASSERT_TRUE(b->wait(&some, std::chrono::milliseconds(10000)));
  EXPECT_EQ(ua.completion_tokens, 200);
  EXPECT_GT(f.sched->stats().kv_cells_reserved, 3999);
  // A small request fits beside the long one and ends while it goes on.
  RequestUpdate ud = submit(*f.sched, prompt(10, 3), greedy(20))->wait_all();
  EXPECT_EQ(ud.completion_tokens, 20);
  EXPECT_FALSE(b->is_finished());
  b->cancel();
  finish(*b, &some);
  EXPECT_GE(some.queue_ms, 0.0);
  EXPECT_EQ(f.sched->stats().kv_cells_reserved, 0);
}

TEST(Scheduler, ReusesAPromptPrefixWithTheSameResult) {
  SchedulerOptions so;
  so.n_parallel = 2;
  Fixture f(DType::Q8_0, so, 512, 16);
  // A conversation's second turn: the first prompt, its reply, a new question.
  const std::vector<int32_t> first = prompt(40, 1);
  const RequestUpdate u1 = submit(*f.sched, first, greedy(8))->wait_all();
  std::vector<int32_t> second = first;
  for (int32_t t : ids(u1)) second.push_back(t);
  for (int32_t t : prompt(6, 2)) second.push_back(t);
  const int64_t computed0 = f.sched->stats().prompt_tokens;
  const RequestUpdate u2 = submit(*f.sched, second, greedy(12))->wait_all();
  const SchedulerStats st = f.sched->stats();
  EXPECT_EQ(st.prompt_tokens_reused, 40);
  EXPECT_EQ(st.prompt_tokens - computed0, static_cast<int64_t>(second.size()) - 40);
  EXPECT_EQ(st.kv_cells_cached, static_cast<int32_t>(second.size()));  // both prompts ended in one sequence
  // The same request on a scheduler that computes it all gives the same tokens.
  Fixture fresh(DType::Q8_0, so, 512, 16);
  EXPECT_EQ(ids(submit(*fresh.sched, second, greedy(12))->wait_all()), ids(u2));
  EXPECT_EQ(fresh.sched->stats().prompt_tokens_reused, 0);
  // The same prompt again: all but its last token come from the cache.
  submit(*f.sched, second, greedy(1))->wait_all();
  EXPECT_EQ(f.sched->stats().prompt_tokens_reused, 40 + static_cast<int64_t>(second.size()) - 1);
}

TEST(Scheduler, KeptPromptsGiveWayToReservations) {
  // 200 cells, 2 sequences, 150 per request: a kept prompt of 100 cells must be dropped for a request
  // that needs 150.
  SchedulerOptions so;
  so.n_parallel = 2;
  so.ctx_per_request = 150;
  Fixture f(DType::F32, so, 200);
  submit(*f.sched, prompt(100, 1), greedy(4))->wait_all();
  EXPECT_EQ(f.sched->stats().kv_cells_cached, 100);
  const RequestUpdate u = submit(*f.sched, prompt(20, 2), greedy(130))->wait_all();
  EXPECT_EQ(u.completion_tokens, 130);
  const SchedulerStats st = f.sched->stats();
  EXPECT_EQ(st.kv_cells_cached, 20);  // the first prompt gave way; the second is kept
  EXPECT_EQ(st.kv_cells_reserved, 0);
  EXPECT_EQ(f.engine->seq_next_pos(0) + f.engine->seq_next_pos(1), 20);
}

}  // namespace
}  // namespace ferry::serve
