// The continuous-batching scheduler (scheduler.h): a queue of submitted requests, a slot per engine
// sequence, and one thread that admits, builds a step (decode tokens first, then prompt chunks), runs
// it, and turns each logits row into the next token of its request.
#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "model/model_spec.h"
#include "serve/stop_text.h"
#include "serve/token_choice.h"
#include "text/tokenizer.h"

namespace ferry::serve {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Pending {
  std::shared_ptr<Request> req;
  std::vector<int32_t> prompt;
  GenerationParams params;
  int32_t max_new = 0;  // tokens it may generate
  Clock::time_point submitted;
};

// One engine sequence and the request it is running (req == nullptr: free).
struct Slot {
  std::shared_ptr<Request> req;
  int32_t seq = 0;
  std::vector<int32_t> prompt;
  int32_t n_fed = 0;         // prompt tokens in the KV cache
  int32_t max_new = 0;
  int32_t reserved = 0;      // KV cells reserved
  int32_t n_generated = 0;
  int32_t next_token = -1;   // sampled and not yet fed (>= 0: the sequence decodes)
  bool ignore_eos = false;
  int64_t admitted_order = 0;
  // A free slot's sequence keeps the prompt of its last request in the cache (cached = those tokens), for
  // a next request that starts the same way (a chat sends its history again each turn).
  std::vector<int32_t> cached;
  int64_t last_used = 0;
  std::unique_ptr<TokenChooser> chooser;
  text::Utf8Streamer utf8;
  std::unique_ptr<StopText> stop;
  Clock::time_point submitted, admitted, first_token;
};

class SchedulerImpl final : public Scheduler {
 public:
  SchedulerImpl(engine::Engine& engine, const SchedulerOptions& o, int32_t ctx_limit)
      : engine_(engine), options_(o), ctx_limit_(ctx_limit), slots_(static_cast<size_t>(o.n_parallel)) {
    for (int32_t i = 0; i < o.n_parallel; ++i) slots_[i].seq = i;
    stats_.kv_cells_total = engine.n_ctx();
    thread_ = std::thread([this] { loop(); });
  }

  ~SchedulerImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    const Status bye = make_error(ErrorCode::kInternal, "the server is shutting down");
    for (Pending& p : queue_) p.req->finish(FinishReason::kCancelled, bye, 0, 0, 0);
    for (Slot& s : slots_)
      if (s.req) s.req->finish(FinishReason::kCancelled, bye, s.n_generated, 0, 0);
  }

  Expected<std::shared_ptr<Request>> submit(std::vector<int32_t> prompt, const GenerationParams& params) override;
  SchedulerStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    SchedulerStats s = stats_;
    s.queued = static_cast<int32_t>(queue_.size());
    return s;
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      for (Pending& p : queue_) p.req->cancel();
      for (Slot& s : slots_)
        if (s.req) s.req->cancel();
    }
    cv_.notify_all();
  }
  int32_t ctx_per_request() const override { return ctx_limit_; }
  int32_t n_parallel() const override { return options_.n_parallel; }

 private:
  void loop();
  void admit(Clock::time_point now);                // under mu_
  // The free slot for `prompt`: the one whose cached prompt shares the longest prefix with it (*reuse
  // tokens, at most all but its last token), else the least recently used.
  Slot& pick_slot(const std::vector<int32_t>& prompt, int32_t* reuse);
  void drop_cache(Slot& s);
  void handle_cancels();
  Status step();
  void take_token(Slot& s, const float* logits);
  void finish(Slot& s, FinishReason reason, Status error = Status::ok());

  engine::Engine& engine_;
  const SchedulerOptions options_;
  const int32_t ctx_limit_;
  std::vector<Slot> slots_;        // owned by the loop's thread
  int64_t next_order_ = 0;
  int32_t reserved_ = 0;           // cells reserved by running slots (loop's thread)
  int32_t cached_ = 0;             // cells holding free slots' cached prompts (loop's thread)
  engine::Batch batch_;
  std::vector<float> logits_;
  std::vector<int32_t> row_slot_;  // slot of each logits row of the step

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  SchedulerStats stats_;
  int64_t next_id_ = 1;
  int32_t running_ = 0;
  bool stop_ = false;
  bool closing_ = false;  // shutdown(): no new requests
  std::thread thread_;
};

Expected<std::shared_ptr<Request>> SchedulerImpl::submit(std::vector<int32_t> prompt, const GenerationParams& params) {
  const int32_t n_vocab = engine_.spec().n_vocab;
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "empty prompt (no tokens)");
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab)
      return make_error(ErrorCode::kInvalidArgument, "prompt token %d outside the vocabulary [0, %d)", t, n_vocab);
  if (n_prompt >= ctx_limit_)
    return make_error(ErrorCode::kInvalidArgument,
                      "the prompt has %d tokens, which leaves no room for a reply in the context of %d tokens per "
                      "request",
                      n_prompt, ctx_limit_);
  std::shared_ptr<Request> req;
  Pending p;
  p.prompt = std::move(prompt);
  p.params = params;
  const int32_t room = ctx_limit_ - n_prompt;
  p.max_new = params.max_tokens < 0 ? room : std::min(params.max_tokens, room);
  p.submitted = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || closing_) return make_error(ErrorCode::kBusy, "the server is shutting down");
    // Waiting: the queued requests that no free sequence will take at the next step.
    const int32_t waiting = static_cast<int32_t>(queue_.size()) - (options_.n_parallel - running_);
    if (waiting >= options_.queue_size) {
      ++stats_.rejected_busy;
      return make_error(ErrorCode::kBusy, "%d requests are running and %d waiting, the most the server queues",
                        running_, static_cast<int32_t>(queue_.size()));
    }
    p.req = std::make_shared<Request>(next_id_++, n_prompt);
    ++stats_.submitted;
    if (p.max_new == 0) {  // nothing to generate: done without touching the engine
      ++stats_.finished[static_cast<int>(FinishReason::kLength)];
      p.req->finish(FinishReason::kLength, Status::ok(), 0, 0, 0);
      return p.req;
    }
    req = p.req;
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
  return req;
}

void SchedulerImpl::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || running_ > 0; });
      if (stop_) return;
      admit(Clock::now());
    }
    handle_cancels();
    if (running_ == 0) continue;
    Status st = step();
    if (!st.is_ok()) {
      // The engine failed the step: every request in it ends with the error (their cells are freed).
      for (Slot& s : slots_)
        if (s.req) finish(s, FinishReason::kError, st);
    }
  }
}

// FIFO: the head of the queue waits for a sequence and for room for its reservation; nobody overtakes
// it (a long request is never starved by short ones). Cancelled requests leave the queue at once.
void SchedulerImpl::admit(Clock::time_point now) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->req->cancel_requested()) {
      ++stats_.finished[static_cast<int>(FinishReason::kCancelled)];
      it->req->finish(FinishReason::kCancelled, Status::ok(), 0, ms_between(it->submitted, now), 0);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  const int32_t n_cells = engine_.n_ctx();
  while (!queue_.empty()) {
    Pending& p = queue_.front();
    const int32_t need = static_cast<int32_t>(p.prompt.size()) + p.max_new;
    if (running_ == static_cast<int32_t>(slots_.size()) || reserved_ + need > n_cells) break;
    int32_t reuse = 0;
    Slot& s = pick_slot(p.prompt, &reuse);
    // The cells it needs beyond what it reuses come from free cells, then from other slots' caches
    // (least recently used first).
    const int32_t own_cache = static_cast<int32_t>(s.cached.size());
    while (reserved_ + (cached_ - own_cache) + need > n_cells) {
      Slot* victim = nullptr;
      for (Slot& o : slots_)
        if (&o != &s && !o.req && !o.cached.empty() && (!victim || o.last_used < victim->last_used)) victim = &o;
      FERRY_ASSERT(victim != nullptr);  // reserved_ + need <= n_cells: dropping every cache makes room
      drop_cache(*victim);
    }
    engine_.seq_rm(s.seq, reuse);  // keep the shared prefix, drop the rest of the cached prompt
    cached_ -= own_cache;
    s.cached.clear();
    s.req = std::move(p.req);
    s.prompt = std::move(p.prompt);
    s.n_fed = reuse;
    s.max_new = p.max_new;
    s.reserved = need;
    s.n_generated = 0;
    s.next_token = -1;
    s.ignore_eos = p.params.ignore_eos;
    s.admitted_order = next_order_++;
    s.chooser = std::make_unique<TokenChooser>(p.params);
    for (int32_t t : s.prompt) s.chooser->accept_prompt(t);
    s.utf8 = text::Utf8Streamer();
    s.stop = std::make_unique<StopText>(p.params.stop);
    s.submitted = p.submitted;
    s.admitted = now;
    reserved_ += need;
    ++running_;
    stats_.prompt_tokens_reused += reuse;
    queue_.pop_front();
  }
  stats_.running = running_;
  stats_.kv_cells_reserved = reserved_;
  stats_.kv_cells_cached = cached_;
}

Slot& SchedulerImpl::pick_slot(const std::vector<int32_t>& prompt, int32_t* reuse) {
  Slot* best = nullptr;
  int32_t best_len = -1;
  for (Slot& s : slots_) {
    if (s.req) continue;
    const size_t n = std::min(s.cached.size(), prompt.size() - 1);  // the last prompt token is always computed
    const int32_t len = static_cast<int32_t>(
        std::mismatch(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n), s.cached.begin()).first -
        prompt.begin());
    if (len > best_len || (len == best_len && s.last_used < best->last_used)) {
      best = &s;
      best_len = len;
    }
  }
  FERRY_ASSERT(best != nullptr);
  *reuse = best_len;
  return *best;
}

void SchedulerImpl::drop_cache(Slot& s) {
  engine_.seq_rm(s.seq);
  cached_ -= static_cast<int32_t>(s.cached.size());
  s.cached.clear();
}

void SchedulerImpl::handle_cancels() {
  for (Slot& s : slots_)
    if (s.req && s.req->cancel_requested()) finish(s, FinishReason::kCancelled);
}

// One step: a decode token of every sequence that has one, then prompt chunks in admission order up to
// n_batch tokens. Logits for the decode tokens and for the last token of a prompt that completes.
Status SchedulerImpl::step() {
  const int32_t n_batch = engine_.options().n_batch;
  batch_.clear();
  row_slot_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    Slot& s = slots_[i];
    if (!s.req || s.next_token < 0) continue;
    const int32_t pos = static_cast<int32_t>(s.prompt.size()) + s.n_generated - 1;
    batch_.add(s.next_token, pos, s.seq, true);
    row_slot_.push_back(i);
  }
  const int32_t n_decode = batch_.size();
  std::vector<int32_t> prefill;
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i)
    if (slots_[i].req && slots_[i].n_fed < static_cast<int32_t>(slots_[i].prompt.size())) prefill.push_back(i);
  std::sort(prefill.begin(), prefill.end(),
            [&](int32_t a, int32_t b) { return slots_[a].admitted_order < slots_[b].admitted_order; });
  int64_t n_prompt_tokens = 0;
  for (int32_t i : prefill) {
    Slot& s = slots_[i];
    const int32_t n_prompt = static_cast<int32_t>(s.prompt.size());
    const int32_t chunk = std::min(n_prompt - s.n_fed, n_batch - batch_.size());
    if (chunk <= 0) break;
    for (int32_t k = s.n_fed; k < s.n_fed + chunk; ++k) {
      const bool last = k == n_prompt - 1;
      batch_.add(s.prompt[k], k, s.seq, last);
      if (last) row_slot_.push_back(i);
    }
    s.n_fed += chunk;
    n_prompt_tokens += chunk;
  }
  if (batch_.size() == 0) return Status::ok();
  batch_.n_decode = n_decode;

  logits_.clear();
  const Clock::time_point t0 = Clock::now();
  FERRY_RETURN_IF_ERROR(engine_.step(batch_, &logits_));
  const Clock::time_point t1 = Clock::now();
  const int32_t n_vocab = engine_.spec().n_vocab;
  FERRY_ASSERT(logits_.size() == row_slot_.size() * static_cast<size_t>(n_vocab));
  // Logits rows are in batch order: the decode rows, then the prompts' last tokens (row_slot_ order).
  for (size_t r = 0; r < row_slot_.size(); ++r) take_token(slots_[row_slot_[r]], logits_.data() + r * n_vocab);

  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.step_tokens += batch_.size();
  stats_.prompt_tokens += n_prompt_tokens;
  stats_.last_step_ms = ms_between(t0, t1);
  stats_.step_seconds += stats_.last_step_ms / 1e3;
  return Status::ok();
}

// The next token of `s` from its logits row: sample, stream its text through the stop strings, and end
// the request on an end-of-generation token, a stop string, or its token limit.
void SchedulerImpl::take_token(Slot& s, const float* logits) {
  const text::Tokenizer& tok = engine_.tokenizer();
  std::vector<TokenLogprob> lps;
  TokenLogprob lp;
  const int32_t token = s.chooser->choose(logits, engine_.spec().n_vocab, &lp);
  if (s.n_generated == 0) s.first_token = Clock::now();
  ++s.n_generated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.generated_tokens;
  }
  const bool eog = tok.is_eog(token);
  const std::string bytes = eog ? std::string() : tok.token_to_piece(token, false);
  if (s.chooser->wants_logprobs()) {
    lp.bytes = bytes;
    lps.push_back(std::move(lp));
  }
  s.req->publish(s.stop->push(s.utf8.push(bytes)), std::move(lps));
  if (eog && !s.ignore_eos) return finish(s, FinishReason::kStop);
  if (s.stop->found()) return finish(s, FinishReason::kStop);
  if (s.n_generated >= s.max_new) return finish(s, FinishReason::kLength);
  s.next_token = token;
}

void SchedulerImpl::finish(Slot& s, FinishReason reason, Status error) {
  if (reason != FinishReason::kCancelled && reason != FinishReason::kError) {
    std::string tail = s.stop->push(s.utf8.flush());
    tail += s.stop->flush();
    s.req->publish(std::move(tail), {});
  }
  const double ttft = s.n_generated > 0 ? ms_between(s.submitted, s.first_token) : 0;
  const double queue_ms = ms_between(s.submitted, s.admitted);
  // The sequence and the counters first, so whoever the request wakes sees them freed. A prompt that was
  // computed whole stays in the cache for the next request that starts with it; its generated tokens go
  // (they were computed as decode tokens, which a next prompt's identical tokens would not be, so reusing
  // them would change that request's numbers).
  const int32_t n_prompt = static_cast<int32_t>(s.prompt.size());
  if (reason != FinishReason::kError && s.n_fed == n_prompt) {
    engine_.seq_rm(s.seq, n_prompt);
    s.cached = std::move(s.prompt);
    cached_ += n_prompt;
  } else {
    engine_.seq_rm(s.seq);
  }
  s.last_used = next_order_++;
  reserved_ -= s.reserved;
  s.chooser.reset();
  s.stop.reset();
  s.prompt.clear();
  s.next_token = -1;
  std::shared_ptr<Request> req;
  {
    std::lock_guard<std::mutex> lock(mu_);  // shutdown() reads s.req from another thread
    req = std::move(s.req);
    --running_;
    ++stats_.finished[static_cast<int>(reason)];
    stats_.running = running_;
    stats_.kv_cells_reserved = reserved_;
    stats_.kv_cells_cached = cached_;
  }
  req->finish(reason, std::move(error), s.n_generated, queue_ms, ttft);
}

}  // namespace

Expected<std::unique_ptr<Scheduler>> Scheduler::start(engine::Engine& engine, const SchedulerOptions& options) {
  const engine::EngineOptions& eo = engine.options();
  if (options.n_parallel < 1 || options.n_parallel > eo.n_seq_max)
    return make_error(ErrorCode::kInvalidArgument, "parallel sequences must be 1..%d (the engine's n_seq_max), got %d",
                      eo.n_seq_max, options.n_parallel);
  if (options.n_parallel > eo.n_batch)
    return make_error(ErrorCode::kInvalidArgument,
                      "%d parallel sequences do not fit a step of %d tokens (n_batch): lower --parallel or raise -b",
                      options.n_parallel, eo.n_batch);
  if (options.queue_size < 0)
    return make_error(ErrorCode::kInvalidArgument, "queue size must be >= 0, got %d", options.queue_size);
  const int32_t n_ctx = engine.n_ctx();
  const int32_t limit = options.ctx_per_request > 0 ? options.ctx_per_request : n_ctx / options.n_parallel;
  if (limit < 2 || limit > n_ctx)
    return make_error(ErrorCode::kInvalidArgument,
                      "the context per request must be 2..%d tokens (the KV cells of all requests), got %d", n_ctx,
                      limit);
  return std::unique_ptr<Scheduler>(new SchedulerImpl(engine, options, limit));
}

}  // namespace ferry::serve
