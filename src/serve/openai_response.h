// The OpenAI API's response bodies: a whole chat completion / text completion, the chunks of a streamed
// one (server-sent events), usage, logprobs, and the model list. JSON only; the HTTP server sends them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/openai_request.h"
#include "serve/request.h"
#include "serve/tool_calls.h"
#include "text/tokenizer.h"

namespace ferry::serve {

struct ResponseContext {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;       // "chatcmpl-N" / "cmpl-N"
  int64_t created = 0;  // Unix seconds
  std::string model;    // the model's id
  bool logprobs = false;
  const text::Tokenizer* tokenizer = nullptr;  // renders the alternatives of logprobs
};

// "stop" or "length" (a cancelled or failed request sends no finish reason).
const char* api_finish_reason(FinishReason r);

nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens);

// The whole response of a request that finished (kStop / kLength): text, finish reason, usage, logprobs.
// With `tools` (a chat request with tools, its reply parsed, each call with its id): message.content is the
// text outside the calls (null when empty), message.tool_calls the calls, and finish_reason "tool_calls"
// when there are any.
nlohmann::json completion_json(const ResponseContext& ctx, const RequestUpdate& all, const ParsedReply* tools = nullptr);

// One streamed chunk: new text (and its tokens' logprobs); `first` adds the assistant role (chat);
// finish_reason non-null ends the choice.
nlohmann::json chunk_json(const ResponseContext& ctx, const std::string& text, const std::vector<TokenLogprob>& lps,
                          bool first, const char* finish_reason);
// A streamed tool call: the chunk that opens call `index` (id, type, name, empty arguments) when `opening`,
// else the one with its arguments.
nlohmann::json tool_call_chunk_json(const ResponseContext& ctx, int index, const ParsedToolCall& call, bool opening);
// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseContext& ctx, int32_t prompt_tokens, int32_t completion_tokens);

// GET /v1/models.
nlohmann::json models_json(const std::string& model_id, int64_t created, int32_t ctx_per_request);

// JSON text for the wire: invalid UTF-8 (a token's partial bytes) replaced, never an exception.
std::string dump(const nlohmann::json& j);

}  // namespace ferry::serve
