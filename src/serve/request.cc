// Request: the hand-over between the scheduler's thread and the caller's (request.h).
#include "serve/request.h"

namespace ferry::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

bool Request::wait(RequestUpdate* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return has_news_; });
  if (!has_news_) return false;
  out->text += pending_.text;
  for (TokenLogprob& lp : pending_.logprobs) out->logprobs.push_back(std::move(lp));
  pending_.text.clear();
  pending_.logprobs.clear();
  if (pending_.finished) {
    out->finished = true;
    out->reason = pending_.reason;
    out->error = pending_.error;
    out->prompt_tokens = pending_.prompt_tokens;
    out->completion_tokens = pending_.completion_tokens;
    out->queue_ms = pending_.queue_ms;
    out->ttft_ms = pending_.ttft_ms;
  }
  has_news_ = false;
  return true;
}

RequestUpdate Request::wait_all() {
  RequestUpdate all;
  while (!all.finished) wait(&all, std::chrono::milliseconds(1000));
  return all;
}

void Request::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_ = true;
}

bool Request::cancel_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancel_;
}

bool Request::is_finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void Request::publish(std::string text, std::vector<TokenLogprob> logprobs) {
  if (text.empty() && logprobs.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_.text += text;
    for (TokenLogprob& lp : logprobs) pending_.logprobs.push_back(std::move(lp));
    has_news_ = true;
  }
  cv_.notify_all();
}

void Request::finish(FinishReason reason, Status error, int32_t completion_tokens, double queue_ms, double ttft_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    pending_.finished = true;
    pending_.reason = reason;
    pending_.error = std::move(error);
    pending_.prompt_tokens = prompt_tokens_;
    pending_.completion_tokens = completion_tokens;
    pending_.queue_ms = queue_ms;
    pending_.ttft_ms = ttft_ms;
    has_news_ = true;
  }
  cv_.notify_all();
}

}  // namespace ferry::serve
