// parse_api_request: what a valid body becomes (defaults, fields, messages), and that bad bodies are one
// error naming the field; the response shapes the official clients read.
#include <gtest/gtest.h>

#include <string>

#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace ferry::serve {
namespace {

ApiRequest ok(Endpoint e, const std::string& body) {
  auto r = parse_api_request(e, body, 77);
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << err->message;
  return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r) : ApiRequest{};
}

ApiError bad(Endpoint e, const std::string& body) {
  auto r = parse_api_request(e, body, 77);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiRequest, ChatDefaultsAreLlamaServers) {
  const ApiRequest r = ok(Endpoint::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r.model, "m");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.gen.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.gen.sampling.temp, 0.8f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.95f);
  EXPECT_EQ(r.gen.sampling.seed, 77u);  // the random seed handed in
  EXPECT_EQ(r.gen.top_logprobs, -1);
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].role, "user");
  EXPECT_EQ(*r.chat.messages[0].content, "hi");
  EXPECT_TRUE(r.chat.add_generation_prompt);
}

TEST(OpenAiRequest, ChatFields) {
  const ApiRequest r = ok(Endpoint::kChat, R"({
    "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                 {"role": "user", "content": "q"},
                 {"role": "assistant", "content": null, "refusal": null,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                 {"role": "tool", "content": "42", "tool_call_id": "c1"}],
    "max_completion_tokens": 9, "temperature": 0, "top_p": 0.5, "seed": 5, "stop": ["x", "y"], "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2, "presence_penalty": 0.5,
    "chat_template_kwargs": {"enable_thinking": false}, "user": "u", "n": 1, "tool_choice": "none"})");
  EXPECT_EQ(r.gen.max_tokens, 9);
  EXPECT_EQ(r.gen.sampling.temp, 0.f);
  EXPECT_EQ(r.gen.sampling.seed, 5u);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_FLOAT_EQ(r.gen.presence_penalty, 0.5f);
  EXPECT_EQ(r.chat.extra_json, R"({"enable_thinking":false})");
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(*r.chat.messages[0].content, "a\nb");
  EXPECT_FALSE(r.chat.messages[2].content.has_value());
  ASSERT_EQ(r.chat.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.chat.messages[2].tool_calls[0].name, "f");
  EXPECT_EQ(r.chat.messages[3].tool_call_id, "c1");
  EXPECT_EQ(r.gen.json_schema, nullptr);
}

TEST(OpenAiRequest, ResponseFormat) {
  const std::string m = R"("messages": [{"role": "user", "content": "a"}])";
  EXPECT_NE(ok(Endpoint::kChat, "{" + m + R"(, "response_format": {"type": "json_object"}})").gen.json_schema, nullptr);
  EXPECT_EQ(ok(Endpoint::kChat, "{" + m + R"(, "response_format": {"type": "text"}})").gen.json_schema, nullptr);
  const ApiRequest s = ok(Endpoint::kChat, "{" + m + R"(, "response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
       "required": ["a"], "additionalProperties": false}}}})");
  ASSERT_NE(s.gen.json_schema, nullptr);
  EXPECT_EQ(s.gen.json_schema->root()->keys, std::vector<std::string>{"\"a\""});
  // A keyword ferry cannot keep is refused, naming it.
  const ApiError e = bad(Endpoint::kChat, "{" + m + R"(, "response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}}})");
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_EQ(e.code, "unsupported");
  EXPECT_NE(e.message.find("properties.a: 'pattern' is not supported"), std::string::npos) << e.message;
}

TEST(OpenAiRequest, Grammar) {
  const std::string m = R"("messages": [{"role": "user", "content": "a"}])";
  EXPECT_NE(ok(Endpoint::kChat, "{" + m + R"(, "grammar": "root ::= \"yes\" | \"no\""})").gen.grammar, nullptr);
  EXPECT_NE(ok(Endpoint::kCompletions, R"({"prompt": "a", "grammar": "root ::= [0-9]+"})").gen.grammar, nullptr);
  EXPECT_EQ(ok(Endpoint::kChat, "{" + m + R"(, "grammar": ""})").gen.grammar, nullptr);
  EXPECT_EQ(ok(Endpoint::kChat, "{" + m + R"(, "grammar": null})").gen.grammar, nullptr);
  ApiError e = bad(Endpoint::kChat, "{" + m + R"(, "grammar": "root ::= item\nitem ::= item \"x\""})");
  EXPECT_EQ(e.param, "grammar");
  EXPECT_NE(e.message.find("rule 'item' is left recursive"), std::string::npos) << e.message;
  e = bad(Endpoint::kChat, "{" + m + R"(, "grammar": 3})");
  EXPECT_EQ(e.param, "grammar");
  // llama-server's top-level json_schema, on both endpoints.
  EXPECT_NE(ok(Endpoint::kCompletions, R"({"prompt": "a", "json_schema": {"type": "object"}})").gen.json_schema, nullptr);
  EXPECT_NE(ok(Endpoint::kChat, "{" + m + R"(, "json_schema": {"type": "object", "properties": {"a": {}}}})").gen.json_schema, nullptr);
  EXPECT_EQ(bad(Endpoint::kChat, "{" + m + R"(, "json_schema": {"type": "object"}, "response_format": {"type": "json_object"}})").param,
            "json_schema");
  EXPECT_EQ(bad(Endpoint::kCompletions, R"({"prompt": "a", "json_schema": {"type": "string"}})").param, "json_schema");
  e = bad(Endpoint::kChat, "{" + m + R"(, "grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})");
  EXPECT_EQ(e.param, "grammar");
}

TEST(OpenAiRequest, ToolsKeepTheClientsKeyOrderAndToolChoiceNoneLeavesThemOut) {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
      R"("properties": {"zeta": {"type": "string"}, "alpha": {"type": "number"}}}}}])";
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"}])";
  const ApiRequest r = ok(Endpoint::kChat, "{" + msgs + R"(, "tools": )" + tools + "}");
  EXPECT_TRUE(r.tools);
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_NE(r.chat.tools_json.find(R"("zeta":{"type":"string"},"alpha")"), std::string::npos) << r.chat.tools_json;
  const ApiRequest a = ok(Endpoint::kChat, "{" + msgs + R"(, "tool_choice": "auto", "parallel_tool_calls": false, "tools": )" + tools + "}");
  EXPECT_TRUE(a.tools);
  EXPECT_FALSE(a.parallel_tool_calls);
  const ApiRequest n = ok(Endpoint::kChat, "{" + msgs + R"(, "tool_choice": "none", "tools": )" + tools + "}");
  EXPECT_FALSE(n.tools);
  EXPECT_TRUE(n.chat.tools_json.empty());
  EXPECT_FALSE(ok(Endpoint::kChat, "{" + msgs + R"(, "tools": []})").tools);
  EXPECT_TRUE(a.forced_tool.empty());
  // "required" forces a call to any tool, a named function a call to that one.
  const ApiRequest req = ok(Endpoint::kChat, "{" + msgs + R"(, "tool_choice": "required", "tools": )" + tools + "}");
  EXPECT_TRUE(req.tools);
  EXPECT_EQ(req.forced_tool, "*");
  const ApiRequest named = ok(Endpoint::kChat, "{" + msgs + R"(, "tool_choice": {"type": "function", "function": )"
                                                  R"({"name": "get_weather"}}, "tools": )" + tools + "}");
  EXPECT_EQ(named.forced_tool, "get_weather");
}

TEST(OpenAiRequest, BadToolsNameTheField) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"}], )";
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tools": [{"function": {"name": "f"}}]})").param, "tools[0].type");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tools": [{"type": "function", "function": {"name": ""}}]})").param,
            "tools[0].function.name");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]})").param,
            "tools[0].function.parameters");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tools": [{"type": "function", "function": {"name": "f"}}], )"
                                             R"("tool_choice": {"type": "function", "function": {"name": "g"}}})").param,
            "tool_choice.function.name");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tool_choice": "required"})").param, "tool_choice");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("tools": [{"type": "function", "function": {"name": "f"}}], )"
                                             R"("tool_choice": {"function": {"name": "f"}}})").param,
            "tool_choice");
  EXPECT_EQ(bad(Endpoint::kChat, "{" + msgs + R"("functions": []})").param, "functions");
}

TEST(OpenAiRequest, CompletionsPrompts) {
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "abc"})").prompt, "abc");
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": ["abc"]})").prompt, "abc");
  const ApiRequest t = ok(Endpoint::kCompletions, R"({"prompt": [[1, 2, 3]], "logprobs": 2, "echo": false})");
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(t.gen.top_logprobs, 2);
  // max_tokens past the int range is clamped (the scheduler clamps it again to the context).
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": 100000000000000})").gen.max_tokens,
            2147483647);
}

TEST(OpenAiRequest, BadBodiesNameTheField) {
  struct Case {
    Endpoint e;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {Endpoint::kChat, R"({"messages": [)", ""},
      {Endpoint::kChat, "\"text\"", ""},
      {Endpoint::kChat, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}", ""},
      {Endpoint::kChat, R"({})", "messages"},
      {Endpoint::kChat, R"({"messages": {}})", "messages"},
      {Endpoint::kChat, R"({"messages": []})", "messages"},
      {Endpoint::kChat, R"({"messages": [1]})", "messages[0]"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a", "x": 1}]})", "messages[0].x"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": -5})", "max_tokens"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "top_p": 1.5})", "top_p"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "stop": ["a", 1]})", "stop"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "stream_options": {}})", "stream_options"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_schema"}})",
       "response_format.json_schema"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "yaml"}})",
       "response_format"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "text", "x": 1}})",
       "response_format.x"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "response_format": "json"})", "response_format"},
      {Endpoint::kCompletions, R"({"prompt": "a", "response_format": {"type": "json_object"}})", "response_format"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "logit_bias": {"1": 5}})", "logit_bias"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "prompt": "x"})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": 5})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": [1, -2]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": []})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": "a", "best_of": 3})", "best_of"},
      {Endpoint::kCompletions, R"({"prompt": "a", "top_logprobs": 3})", "top_logprobs"},
  };
  for (const Case& c : cases) {
    const ApiError e = bad(c.e, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAiResponse, Shapes) {
  ResponseContext ctx;
  ctx.endpoint = Endpoint::kChat;
  ctx.id = "chatcmpl-1";
  ctx.model = "m";
  RequestUpdate all;
  all.text = "hello";
  all.finished = true;
  all.reason = FinishReason::kLength;
  all.prompt_tokens = 3;
  all.completion_tokens = 2;
  const nlohmann::json j = completion_json(ctx, all);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  const nlohmann::json first = chunk_json(ctx, "", {}, true, nullptr);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  // A token's partial UTF-8 bytes do not break the JSON text.
  TokenLogprob lp;
  lp.token = 5;
  lp.bytes = "\xe2\x82";
  ctx.logprobs = true;
  const std::string text = dump(chunk_json(ctx, "x", {lp}, false, "stop"));
  EXPECT_NE(text.find("\"bytes\":[226,130]"), std::string::npos) << text;
  ApiError e;
  e.message = "m";
  e.param = "p";
  const nlohmann::json ej = error_json(e);
  EXPECT_EQ(ej["error"]["param"], "p");
  EXPECT_TRUE(ej["error"]["code"].is_null());
}

TEST(OpenAiResponse, ToolCallShapes) {
  ResponseContext ctx;
  ctx.id = "chatcmpl-1";
  RequestUpdate all;
  all.text = "<tool_call>...</tool_call>";
  all.reason = FinishReason::kLength;
  ParsedReply reply;
  reply.calls.push_back({"call_x", "f", R"({"a":1})"});
  const nlohmann::json j = completion_json(ctx, all, &reply);
  const nlohmann::json& m = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["content"].is_null());  // no text outside the calls
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_x");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  // A reply with tools but no calls: its text, finish_reason as the generation ended.
  ParsedReply text;
  text.content = "hi";
  const nlohmann::json t = completion_json(ctx, all, &text);
  EXPECT_EQ(t["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(t["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(t["choices"][0]["finish_reason"], "length");
  const nlohmann::json open = tool_call_chunk_json(ctx, 1, reply.calls[0], true);
  const nlohmann::json& d = open["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(d["index"], 1);
  EXPECT_EQ(d["id"], "call_x");
  EXPECT_EQ(d["function"]["name"], "f");
  EXPECT_EQ(d["function"]["arguments"], "");
  const nlohmann::json args = tool_call_chunk_json(ctx, 1, reply.calls[0], false);
  EXPECT_FALSE(args["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  EXPECT_EQ(args["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
}

TEST(ToolCallIds, OpenAiShapeAndMistralNemosNine) {
  const std::string a = tool_call_id(ToolFormat::kHermes, "", 1), b = tool_call_id(ToolFormat::kHermes, "", 2);
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
  EXPECT_EQ(tool_call_id(ToolFormat::kMistralNemo, "abcDEF123", 1), "abcDEF123");
  const std::string n = tool_call_id(ToolFormat::kMistralNemo, "call_1", 1);
  EXPECT_EQ(n.size(), 9u);
  EXPECT_EQ(n.find('_'), std::string::npos);
}

}  // namespace
}  // namespace ferry::serve
