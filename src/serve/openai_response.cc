// The OpenAI response shapes (openai_response.h), as the official clients parse them.
#include "serve/openai_response.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

std::string token_text(const ResponseContext& ctx, int32_t token) {
  return ctx.tokenizer ? ctx.tokenizer->token_to_piece(token, false) : std::string();
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json chat_logprobs(const ResponseContext& ctx, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    json top = json::array();
    for (const auto& [id, l] : lp.top) {
      const std::string t = token_text(ctx, id);
      top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes_json(t)}});
    }
    content.push_back({{"token", lp.bytes}, {"logprob", lp.logprob}, {"bytes", bytes_json(lp.bytes)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
json completion_logprobs(const ResponseContext& ctx, const std::vector<TokenLogprob>& lps, size_t offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = offset0;
  for (const TokenLogprob& lp : lps) {
    tokens.push_back(lp.bytes);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, l] : lp.top) top[token_text(ctx, id)] = l;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += lp.bytes.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json base(const ResponseContext& ctx, const char* object) {
  return json{{"id", ctx.id}, {"object", object}, {"created", ctx.created}, {"model", ctx.model},
              {"system_fingerprint", "ferry"}};
}

}  // namespace

const char* api_finish_reason(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

json usage_json(int32_t prompt_tokens, int32_t completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_json(const ResponseContext& ctx, const RequestUpdate& all, const ParsedReply* tools) {
  const bool chat = ctx.endpoint == Endpoint::kChat;
  json j = base(ctx, chat ? "chat.completion" : "text_completion");
  const bool calls = tools && !tools->calls.empty();
  json choice = {{"index", 0}, {"finish_reason", calls ? "tool_calls" : api_finish_reason(all.reason)}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", all.text}};
    if (tools) {
      choice["message"]["content"] = tools->content.empty() && calls ? json(nullptr) : json(tools->content);
      if (calls) {
        json list = json::array();
        for (const ParsedToolCall& c : tools->calls)
          list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        choice["message"]["tool_calls"] = list;
      }
    }
    choice["logprobs"] = ctx.logprobs ? chat_logprobs(ctx, all.logprobs) : json(nullptr);
  } else {
    choice["text"] = all.text;
    choice["logprobs"] = ctx.logprobs ? completion_logprobs(ctx, all.logprobs, 0) : json(nullptr);
  }
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(all.prompt_tokens, all.completion_tokens);
  return j;
}

json chunk_json(const ResponseContext& ctx, const std::string& text, const std::vector<TokenLogprob>& lps, bool first,
                const char* finish_reason) {
  const bool chat = ctx.endpoint == Endpoint::kChat;
  json j = base(ctx, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
    choice["logprobs"] = ctx.logprobs && !lps.empty() ? chat_logprobs(ctx, lps) : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] = ctx.logprobs && !lps.empty() ? completion_logprobs(ctx, lps, 0) : json(nullptr);
  }
  j["choices"] = json::array({choice});
  return j;
}

json tool_call_chunk_json(const ResponseContext& ctx, int index, const ParsedToolCall& call, bool opening) {
  json j = base(ctx, "chat.completion.chunk");
  json tc = {{"index", index}};
  if (opening) {
    tc["id"] = call.id;
    tc["type"] = "function";
    tc["function"] = {{"name", call.name}, {"arguments", ""}};
  } else {
    tc["function"] = {{"arguments", call.arguments}};
  }
  json choice = {{"index", 0}, {"delta", {{"tool_calls", json::array({tc})}}}, {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  j["choices"] = json::array({choice});
  return j;
}

json usage_chunk_json(const ResponseContext& ctx, int32_t prompt_tokens, int32_t completion_tokens) {
  json j = base(ctx, ctx.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

json models_json(const std::string& model_id, int64_t created, int32_t ctx_per_request) {
  json m = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "ferry"},
            {"meta", {{"n_ctx", ctx_per_request}}}};
  return json{{"object", "list"}, {"data", json::array({m})}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace ferry::serve
