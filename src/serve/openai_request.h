// The OpenAI API's request bodies (POST /v1/chat/completions and /v1/completions), parsed and checked
// into what the scheduler runs. Every field is checked for its type and range; a field the endpoint does
// not know, or knows but ferry does not do (tools, n > 1, echo, ...), is an error that names it, in
// OpenAI's error shape, so a client learns what is wrong instead of getting a silently different result.
//
// Defaults where the client says nothing are llama-server's: temperature 0.8, top_k 40, top_p 0.95,
// min_p 0.05, no token limit but the request's context (max_tokens beyond the room left is clamped to
// it, and the request then ends with finish_reason "length"), a random seed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/request.h"
#include "text/chat_template.h"

namespace ferry::serve {

// An API error: HTTP status and {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" = null)
  std::string code;   // a machine-readable code ("" = null), e.g. "context_length_exceeded"
};
nlohmann::json error_json(const ApiError& e);

enum class Endpoint { kChat, kCompletions };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;            // as the client named it ("" when it did not)
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage: a last chunk with the usage
  bool logprobs = false;        // the client asked for logprobs (gen.top_logprobs >= 0)
  GenerationParams gen;
  // Endpoint::kChat: the conversation (content parts joined, roles checked), to be formatted.
  text::ChatRequest chat;
  // Endpoint::kCompletions: the prompt as text, or as token ids when the client sent ids.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
};

// Parses a request body for endpoint `e`; a request without "seed" gets `random_seed`.
std::variant<ApiRequest, ApiError> parse_api_request(Endpoint e, std::string_view body, uint64_t random_seed);

}  // namespace ferry::serve
