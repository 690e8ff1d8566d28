// The continuous-batching scheduler (scheduler.h): a queue of submitted requests, a slot per engine
// sequence, and one thread that admits, builds a step (decode tokens first, then prompt chunks), runs
// it, and turns each logits row into the next token of its request.
#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
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

// What prompt reuse compares: a token row's id; an image row's hash (FNV-1a over its embedding and its
// four M-RoPE positions) with the top bit set, which no token id has.
uint64_t image_row_key(const float* embd, int32_t n_embd, const int32_t pos4[4]) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(embd, static_cast<size_t>(n_embd) * sizeof(float));
  mix(pos4, 4 * sizeof(int32_t));
  return h | (1ull << 63);
}

// A prompt's rows as the scheduler keeps them.
struct Prompt {
  std::vector<int32_t> tokens;      // -1: an image row
  std::vector<uint64_t> keys;       // per row (image_row_key for image rows)
  std::vector<int32_t> image_row;   // per row: its row in embd, or -1
  std::vector<float> embd;          // [n_embd, image rows]
  std::vector<int32_t> mrope;       // [4 * n] section-major, or empty
  int32_t next_rope_pos = 0;
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool has_mrope() const { return !mrope.empty(); }
  // Row k's position in M-RoPE stream st.
  int32_t rope(int32_t k, int st) const { return mrope[static_cast<size_t>(st) * tokens.size() + k]; }
};

struct Pending {
  std::shared_ptr<Request> req;
  Prompt prompt;
  GenerationParams params;
  int32_t max_new = 0;  // tokens it may generate
  Clock::time_point submitted;
};

// One engine sequence and the request it is running (req == nullptr: free).
struct Slot {
  std::shared_ptr<Request> req;
  int32_t seq = 0;
  Prompt prompt;
  int32_t n_fed = 0;         // prompt tokens in the KV cache
  int32_t max_new = 0;
  int32_t reserved = 0;      // KV cells reserved
  int32_t n_generated = 0;
  int32_t next_token = -1;   // sampled and not yet fed (>= 0: the sequence decodes)
  bool ignore_eos = false;
  std::vector<int32_t> shown_special;  // special tokens whose text the reply shows
  const char* constraint_kind = "";  // what constrains the reply, for an error: grammar, JSON schema, tool call
  int64_t admitted_order = 0;
  // A free slot's sequence keeps the prompt of its last request in the cache (cached = those rows' keys),
  // for a next request that starts the same way (a chat sends its history again each turn).
  std::vector<uint64_t> cached;
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
    for (auto& t : tasks_) t->done.set_value(make_error(ErrorCode::kBusy, "the server is shutting down"));
  }

  Expected<std::shared_ptr<Request>> submit(std::vector<int32_t> prompt, const GenerationParams& params) override {
    PromptInput p;
    p.tokens = std::move(prompt);
    return submit_prompt(std::move(p), params);
  }
  Expected<std::shared_ptr<Request>> submit_prompt(PromptInput prompt, const GenerationParams& params) override;
  Status run_between_steps(const std::function<Status()>& fn) override {
    auto t = std::make_shared<Task>();
    t->fn = fn;
    std::future<Status> done = t->done.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || closing_) return make_error(ErrorCode::kBusy, "the server is shutting down");
      tasks_.push_back(std::move(t));
    }
    cv_.notify_all();
    return done.get();
  }
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
  Slot& pick_slot(const std::vector<uint64_t>& keys, int32_t* reuse);
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
  // Every token's bytes, per set of shown special tokens (one set per chat format, in practice one), made at
  // the first constrained request that needs it.
  std::map<std::vector<int32_t>, std::shared_ptr<const TokenPieces>> token_pieces_;
  std::vector<int32_t> rope4_;     // per row of the step being built: its 4 M-RoPE positions
  std::vector<const float*> row_embd_;  // per row: its image embedding, or null

  struct Task {
    std::function<Status()> fn;
    std::promise<Status> done;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::deque<std::shared_ptr<Task>> tasks_;  // run_between_steps
  SchedulerStats stats_;
  int64_t next_id_ = 1;
  int32_t running_ = 0;
  bool stop_ = false;
  bool closing_ = false;  // shutdown(): no new requests
  std::thread thread_;
};

Expected<std::shared_ptr<Request>> SchedulerImpl::submit_prompt(PromptInput in, const GenerationParams& params) {
  const int32_t n_vocab = engine_.spec().n_vocab;
  const int32_t n_embd = engine_.spec().n_embd;
  const int32_t n_prompt = static_cast<int32_t>(in.tokens.size());
  if (in.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "empty prompt (no tokens)");
  int64_t image_rows = 0;
  for (int32_t t : in.tokens) {
    if (t == -1 && !in.embd.empty()) {
      ++image_rows;
      continue;
    }
    if (t < 0 || t >= n_vocab)
      return make_error(ErrorCode::kInvalidArgument, "prompt token %d outside the vocabulary [0, %d)", t, n_vocab);
  }
  if (in.embd.size() != static_cast<size_t>(image_rows) * static_cast<size_t>(n_embd))
    return make_error(ErrorCode::kInvalidArgument, "the prompt's %lld image rows need %lld embedding floats, got %zu",
                      static_cast<long long>(image_rows), static_cast<long long>(image_rows) * n_embd, in.embd.size());
  if (!in.mrope_pos.empty() && in.mrope_pos.size() != 4 * static_cast<size_t>(n_prompt))
    return make_error(ErrorCode::kInvalidArgument, "the prompt's M-RoPE positions hold %zu values, expected 4 x %d",
                      in.mrope_pos.size(), n_prompt);
  if (image_rows > 0 && in.mrope_pos.empty())
    return make_error(ErrorCode::kInvalidArgument, "a prompt with images needs its M-RoPE positions");
  Prompt prompt;
  prompt.tokens = std::move(in.tokens);
  prompt.embd = std::move(in.embd);
  prompt.mrope = std::move(in.mrope_pos);
  prompt.next_rope_pos = in.next_rope_pos;
  prompt.keys.resize(prompt.tokens.size());
  prompt.image_row.assign(prompt.tokens.size(), -1);
  for (int32_t k = 0, img = 0; k < n_prompt; ++k) {
    if (prompt.tokens[k] >= 0) {
      prompt.keys[k] = static_cast<uint64_t>(prompt.tokens[k]);
      continue;
    }
    const int32_t pos4[4] = {prompt.rope(k, 0), prompt.rope(k, 1), prompt.rope(k, 2), prompt.rope(k, 3)};
    prompt.keys[k] = image_row_key(prompt.embd.data() + static_cast<size_t>(img) * n_embd, n_embd, pos4);
    prompt.image_row[k] = img++;
  }
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
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || running_ > 0 || !tasks_.empty(); });
      if (stop_) return;
      while (!tasks_.empty()) {  // between two steps: nothing else touches the engine
        std::shared_ptr<Task> t = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        t->done.set_value(t->fn());
        lock.lock();
        if (stop_) return;
      }
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
    const int32_t need = p.prompt.size() + p.max_new;
    if (running_ == static_cast<int32_t>(slots_.size()) || reserved_ + need > n_cells) break;
    int32_t reuse = 0;
    Slot& s = pick_slot(p.prompt.keys, &reuse);
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
    s.shown_special = p.params.shown_special;
    s.constraint_kind = p.params.tool_call ? "forced tool call" : p.params.grammar ? "grammar" : "JSON schema";
    s.admitted_order = next_order_++;
    std::unique_ptr<TokenConstraint> constraint;
    if (p.params.json_schema != nullptr || p.params.grammar != nullptr || p.params.tool_call != nullptr) {
      auto& pieces = token_pieces_[p.params.shown_special];
      if (pieces == nullptr)
        pieces = std::make_shared<TokenPieces>(engine_.tokenizer(), engine_.spec().n_vocab, p.params.shown_special);
      constraint = p.params.tool_call != nullptr ? tool_call_constraint(pieces, p.params.tool_call)
                   : p.params.grammar != nullptr ? grammar_constraint(pieces, p.params.grammar)
                                                 : json_constraint(pieces, p.params.json_schema);
    }
    s.chooser = std::make_unique<TokenChooser>(p.params, std::move(constraint));
    for (int32_t t : s.prompt.tokens)
      if (t >= 0) s.chooser->accept_prompt(t);
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

Slot& SchedulerImpl::pick_slot(const std::vector<uint64_t>& prompt, int32_t* reuse) {
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
  // Per row: its M-RoPE positions (every stream at the row's position for a request without images) and,
  // for an image row, its embedding.
  rope4_.clear();
  row_embd_.clear();
  bool any_mrope = false;
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    Slot& s = slots_[i];
    if (!s.req || s.next_token < 0) continue;
    const int32_t pos = s.prompt.size() + s.n_generated - 1;
    batch_.add(s.next_token, pos, s.seq, true);
    const int32_t rp = s.prompt.has_mrope() ? s.prompt.next_rope_pos + s.n_generated - 1 : pos;
    rope4_.insert(rope4_.end(), {rp, rp, rp, rp});
    row_embd_.push_back(nullptr);
    any_mrope |= s.prompt.has_mrope();
    row_slot_.push_back(i);
  }
  const int32_t n_decode = batch_.size();
  std::vector<int32_t> prefill;
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i)
    if (slots_[i].req && slots_[i].n_fed < slots_[i].prompt.size()) prefill.push_back(i);
  std::sort(prefill.begin(), prefill.end(),
            [&](int32_t a, int32_t b) { return slots_[a].admitted_order < slots_[b].admitted_order; });
  int64_t n_prompt_tokens = 0;
  bool any_image = false;
  const size_t n_embd = static_cast<size_t>(engine_.spec().n_embd);
  for (int32_t i : prefill) {
    Slot& s = slots_[i];
    const Prompt& p = s.prompt;
    const int32_t n_prompt = p.size();
    const int32_t chunk = std::min(n_prompt - s.n_fed, n_batch - batch_.size());
    if (chunk <= 0) break;
    for (int32_t k = s.n_fed; k < s.n_fed + chunk; ++k) {
      const bool last = k == n_prompt - 1;
      batch_.add(p.tokens[k], k, s.seq, last);
      if (p.has_mrope()) rope4_.insert(rope4_.end(), {p.rope(k, 0), p.rope(k, 1), p.rope(k, 2), p.rope(k, 3)});
      else rope4_.insert(rope4_.end(), {k, k, k, k});
      const int32_t img = p.image_row[k];
      row_embd_.push_back(img >= 0 ? p.embd.data() + static_cast<size_t>(img) * n_embd : nullptr);
      any_image |= img >= 0;
      if (last) row_slot_.push_back(i);
    }
    any_mrope |= p.has_mrope();
    s.n_fed += chunk;
    n_prompt_tokens += chunk;
  }
  if (batch_.size() == 0) return Status::ok();
  batch_.n_decode = n_decode;
  const int32_t n = batch_.size();
  if (any_image) {  // the image rows' embeddings (the token rows' part is not read)
    batch_.embd.assign(static_cast<size_t>(n) * n_embd, 0.f);
    for (int32_t r = 0; r < n; ++r)
      if (row_embd_[r] != nullptr) std::memcpy(batch_.embd.data() + r * n_embd, row_embd_[r], n_embd * sizeof(float));
  }
  if (any_mrope) {  // section-major
    batch_.mrope_pos.resize(4 * static_cast<size_t>(n));
    for (int32_t r = 0; r < n; ++r)
      for (int st = 0; st < 4; ++st) batch_.mrope_pos[static_cast<size_t>(st) * n + r] = rope4_[4 * r + st];
  }

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
// the request on an end-of-generation token, a stop string, the close of its JSON object (JSON mode), or
// its token limit.
void SchedulerImpl::take_token(Slot& s, const float* logits) {
  const text::Tokenizer& tok = engine_.tokenizer();
  std::vector<TokenLogprob> lps;
  TokenLogprob lp;
  const int32_t token = s.chooser->choose(logits, engine_.spec().n_vocab, &lp);
  if (s.chooser->constraint_failed())
    return finish(s, FinishReason::kError,
                  make_error(ErrorCode::kInternal, "no token of the vocabulary continues the reply as its %s allows",
                             s.constraint_kind));
  if (s.n_generated == 0) s.first_token = Clock::now();
  ++s.n_generated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.generated_tokens;
  }
  const bool eog = tok.is_eog(token);
  const bool shown = std::find(s.shown_special.begin(), s.shown_special.end(), token) != s.shown_special.end();
  const std::string bytes = eog ? std::string() : tok.token_to_piece(token, shown);
  if (s.chooser->wants_logprobs()) {
    lp.bytes = bytes;
    lps.push_back(std::move(lp));
  }
  s.req->publish(s.stop->push(s.utf8.push(bytes)), std::move(lps));
  if (eog && !s.ignore_eos) return finish(s, FinishReason::kStop);
  if (s.stop->found()) return finish(s, FinishReason::kStop);
  if (s.chooser->constraint_complete()) return finish(s, FinishReason::kStop);  // nothing more may follow
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
  const int32_t n_prompt = s.prompt.size();
  if (reason != FinishReason::kError && s.n_fed == n_prompt) {
    engine_.seq_rm(s.seq, n_prompt);
    s.cached = std::move(s.prompt.keys);
    cached_ += n_prompt;
  } else {
    engine_.seq_rm(s.seq);
  }
  s.last_used = next_order_++;
  reserved_ -= s.reserved;
  s.chooser.reset();
  s.stop.reset();
  s.prompt = Prompt{};
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

PromptInput prompt_input(const engine::PromptRows& rows, int32_t n_embd) {
  PromptInput p;
  p.tokens = rows.tokens;
  for (const engine::PromptRows::Span& sp : rows.spans)
    p.embd.insert(p.embd.end(), sp.embd, sp.embd + static_cast<size_t>(sp.end - sp.begin) * static_cast<size_t>(n_embd));
  p.mrope_pos = rows.mrope_pos;
  p.next_rope_pos = rows.next_rope_pos;
  return p;
}

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
