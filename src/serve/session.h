// Session: a model opened for serving, what `ferry serve` and `ferry chat` start from and what a library
// user would: runtime::open with one engine sequence per parallel request, the continuous-batching
// Scheduler over its engine, and the model's ChatFormatter.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "runtime/runtime.h"
#include "serve/chat_format.h"
#include "serve/scheduler.h"

namespace ferry::serve {

struct SessionOptions {
  runtime::OpenOptions open;  // n_seq_max is set to scheduler.n_parallel
  SchedulerOptions scheduler;
};

class Session {
 public:
  // Errors: those of runtime::open, Scheduler::start and ChatFormatter::for_engine.
  static Expected<std::unique_ptr<Session>> open(SessionOptions options);
  ~Session();

  runtime::Runtime& runtime() { return *runtime_; }
  engine::Engine& engine() { return runtime_->engine(); }
  Scheduler& scheduler() { return *scheduler_; }
  const ChatFormatter& chat() const { return chat_; }

  // A conversation's prompt tokens (formatted by chat(), tokenized as tokenize_prompt does).
  Expected<std::vector<int32_t>> chat_prompt(text::ChatRequest request) const;

 private:
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<Scheduler> scheduler_;  // stopped before the runtime goes
  ChatFormatter chat_;
};

}  // namespace ferry::serve
