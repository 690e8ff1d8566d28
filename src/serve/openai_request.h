// The OpenAI API's request bodies (POST /v1/chat/completions and /v1/completions), parsed and checked
// into what the scheduler runs. Every field is checked for its type and range; a field the endpoint does
// not know, or knows but ferry does not do (tool_choice "required", n > 1, echo, ...), is an error that names it, in
// OpenAI's error shape, so a client learns what is wrong instead of getting a silently different result.
//
// Defaults where the client says nothing are llama-server's: temperature 0.8, top_k 40, top_p 0.95,
// min_p 0.05, no token limit but the request's context (max_tokens beyond the room left is clamped to
// it, and the request then ends with finish_reason "length"), a random seed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
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
  // Endpoint::kChat: the conversation (content parts joined, roles checked), to be formatted. An image
  // part (image_url with a data: URL) becomes engine::kImageMarker in its message's text and its bytes
  // (the decoded base64, not yet checked as an image) go to `images`, in order.
  text::ChatRequest chat;
  std::vector<std::string> images;
  // Tools (chat): true when the client gave tools and tool_choice is "auto" (the default with tools); then
  // chat.tools_json holds its `tools` array as JSON text in the client's key order, and the reply is parsed
  // for calls. tool_choice "none" leaves the tools out of the prompt (OpenAI's behaviour); "required" and a
  // named function force a call (forced_tool: "*" any tool, else that function's name; the reply is then
  // constrained to a call in the template's format, serve/tool_call_prefix.h).
  bool tools = false;
  std::string forced_tool;
  bool parallel_tool_calls = true;  // false: the reply's first call only
  // Endpoint::kCompletions: the prompt as text, or as token ids when the client sent ids.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
};

// base64 (RFC 4648, standard alphabet; padding optional) -> bytes; nullopt for anything else.
std::optional<std::string> decode_base64(std::string_view text);

// Parses a request body for endpoint `e`; a request without "seed" gets `random_seed`.
std::variant<ApiRequest, ApiError> parse_api_request(Endpoint e, std::string_view body, uint64_t random_seed);

}  // namespace ferry::serve
