// A generation request as the scheduler (serve/scheduler.h) runs it: what to generate (GenerationParams),
// and the Request handle the caller keeps. The scheduler's thread publishes text as it becomes final and
// finishes the request once; the caller's thread waits for updates and may cancel at any time (the
// sequence is freed at the scheduler's next step). Neither side ever waits on the other: a slow reader
// only lets its updates pile up, which max_tokens bounds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "serve/gbnf.h"
#include "serve/json_schema.h"
#include "serve/tool_call_prefix.h"

namespace ferry::serve {

struct GenerationParams {
  int32_t max_tokens = -1;          // most tokens to generate; < 0: up to the request's context limit
  engine::SamplerParams sampling;   // temp <= 0: greedy; seed: the draws of a sampled request
  float presence_penalty = 0.f;     // subtracted from the logit of every token generated so far
  float frequency_penalty = 0.f;    // subtracted once per time a token was generated so far
  std::vector<std::string> stop;    // the text ends before the first of these (not included)
  int32_t top_logprobs = -1;        // < 0: no logprobs; else the chosen token's and this many best
  bool ignore_eos = false;          // keep generating past end-of-generation tokens
  // JSON mode / structured outputs: the reply is one JSON object this schema accepts
  // (serve/token_constraint.h); null: free text.
  std::shared_ptr<const JsonSchema> json_schema;
  // A GBNF grammar the reply follows from its `root` rule (serve/gbnf.h); null: none. Not with json_schema.
  std::shared_ptr<const Grammar> grammar;
  // A forced tool call: the reply is a call in this shape (serve/tool_call_prefix.h); null: none.
  std::shared_ptr<const ToolCallShape> tool_call;
  // Special tokens whose text the reply shows (the tool-call markers of the chat format); the others show none.
  std::vector<int32_t> shown_special;
  // For tests of what the server makes of a reply: these tokens are chosen in turn instead of sampled
  // (the model still runs and logprobs are still its own); sampling resumes after them.
  std::vector<int32_t> forced_tokens;
};

// Why a request ended: an end-of-generation token or a stop string; max_tokens or the context limit;
// a cancel; an engine error.
enum class FinishReason : uint8_t { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = -1;
  std::string bytes;  // the token's text (raw bytes: may be part of a UTF-8 sequence)
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // the most likely tokens and their logprobs, best first
};

// What a request produced since the caller last looked.
struct RequestUpdate {
  std::string text;                    // newly final text: valid UTF-8, stop strings cut off
  std::vector<TokenLogprob> logprobs;  // one per newly generated token (when asked for)
  bool finished = false;
  // When finished:
  FinishReason reason = FinishReason::kStop;
  Status error;                        // reason kError: what went wrong
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;       // generated tokens (a final end-of-generation token included)
  double queue_ms = 0;                 // submitted -> admitted into a sequence
  double ttft_ms = 0;                  // submitted -> first token
};

class Request {
 public:
  Request(int64_t id, int32_t prompt_tokens) : id_(id), prompt_tokens_(prompt_tokens) {}

  int64_t id() const { return id_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }

  // Waits until the request has something new or `timeout` passes; moves what is new into *out (text
  // and logprobs appended, finished fields set once). Returns true when *out got something.
  bool wait(RequestUpdate* out, std::chrono::milliseconds timeout);
  // Waits for the end and returns everything (text and logprobs appended into one update).
  RequestUpdate wait_all();
  // Asks the scheduler to stop this request; its sequence is freed at the next step and it finishes
  // with kCancelled (unless it finished first).
  void cancel();
  bool cancel_requested() const;

  // The scheduler's side.
  void publish(std::string text, std::vector<TokenLogprob> logprobs);
  void finish(FinishReason reason, Status error, int32_t completion_tokens, double queue_ms, double ttft_ms);
  bool is_finished() const;

 private:
  const int64_t id_;
  const int32_t prompt_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RequestUpdate pending_;   // not yet taken by wait()
  bool has_news_ = false;
  bool finished_ = false;
  bool cancel_ = false;
};

}  // namespace ferry::serve
