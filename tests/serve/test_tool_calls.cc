// Tool calls in a reply (serve/tool_calls.h): each format's calls, several per reply, text around them,
// malformed calls kept as text, the same result however the reply is split into pieces, and the format
// detected from real templates ($FERRY_CHAT_TEMPLATES_DIR, e.g. llama.cpp's models/templates/).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/chat_format.h"
#include "serve/scheduler.h"
#include "serve/tiny_engine.h"
#include "serve/tool_call_prefix.h"
#include "serve/tool_calls.h"

namespace ferry::serve {
namespace {

struct Expect {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

std::string show(const ParsedReply& r) {
  std::string s = "content=[" + r.content + "]";
  for (const ParsedToolCall& c : r.calls) s += " call(" + c.name + ", " + c.arguments + ", id=" + c.id + ")";
  return s;
}

ParsedReply join(std::vector<ToolSegment> segs, ParsedReply r = {}) {
  for (ToolSegment& s : segs) {
    if (s.is_call) r.calls.push_back(s.call);
    else r.content += s.text;
  }
  return r;
}

// The reply whole, split at every byte into two pieces, and byte by byte: all give `want`.
void check(ToolFormat f, const std::string& reply, const Expect& want) {
  std::string wanted = "content=[" + want.content + "]";
  for (const auto& [n, a] : want.calls) wanted += " call(" + n + ", " + a + ", id=";
  auto matches = [&](const ParsedReply& r) {
    if (r.content != want.content || r.calls.size() != want.calls.size()) return false;
    for (size_t i = 0; i < r.calls.size(); ++i)
      if (r.calls[i].name != want.calls[i].first || r.calls[i].arguments != want.calls[i].second) return false;
    return true;
  };
  const ParsedReply whole = parse_tool_reply(f, reply);
  EXPECT_TRUE(matches(whole)) << tool_format_name(f) << " whole: " << show(whole) << "\nwant " << wanted;
  for (size_t cut = 0; cut <= reply.size(); ++cut) {
    ToolCallParser p(f);
    ParsedReply r = join(p.push(reply.substr(0, cut)));
    r = join(p.push(reply.substr(cut)), r);
    r = join(p.flush(), r);
    ASSERT_TRUE(matches(r)) << tool_format_name(f) << " cut at " << cut << ": " << show(r) << "\nwant " << wanted;
  }
  ToolCallParser p(f);
  ParsedReply r;
  for (char c : reply) r = join(p.push(std::string(1, c)), r);
  r = join(p.flush(), r);
  EXPECT_TRUE(matches(r)) << tool_format_name(f) << " bytewise: " << show(r);
}

TEST(ToolCalls, HermesOneCallKeepsTheArgumentsKeyOrder) {
  check(ToolFormat::kHermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": \"Paris\"}}\n</tool_call>",
        {"", {{"get_weather", R"({"unit":"c","city":"Paris"})"}}});
}

TEST(ToolCalls, HermesSeveralCallsAndTextAround) {
  const std::string call_a = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  const std::string call_b = "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  check(ToolFormat::kHermes, "Let me check. " + call_a + "\n" + call_b + "\nDone <b>.\n",
        {"Let me check.Done <b>.", {{"a", R"({"x":1})"}, {"b", "{}"}}});
  check(ToolFormat::kHermes, "I will not call anything.\n\n", {"I will not call anything.", {}});
  check(ToolFormat::kHermes, "   ", {"", {}});
  // A string of arguments (JSON text) is kept as given; a call without arguments gets {}.
  check(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 2}\"}</tool_call>",
        {"", {{"f", R"({"q": 2})"}}});
  check(ToolFormat::kHermes, "<tool_call>{\"name\": \"now\"}</tool_call>", {"", {{"now", "{}"}}});
  // The reply ended before </tool_call> but the call is whole.
  check(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"}\"}}\n",
        {"", {{"f", R"({"s":"}"})"}}});
}

TEST(ToolCalls, MalformedCallsAreText) {
  check(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> ok",
        {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> ok", {}});
  check(ToolFormat::kHermes, "x <tool_call>{\"arguments\": {}}</tool_call>", {"x <tool_call>{\"arguments\": {}}</tool_call>", {}});
  check(ToolFormat::kHermes, "a <tool_call>{\"name\": 3}", {"a <tool_call>{\"name\": 3}", {}});
  check(ToolFormat::kHermes, "almost <tool_ca", {"almost <tool_ca", {}});
  check(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        {"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", {}});
  // A malformed call, then a good one.
  check(ToolFormat::kHermes,
        "<tool_call>oops</tool_call> <tool_call>{\"name\": \"g\", \"arguments\": {\"k\": \"v\"}}</tool_call>",
        {"<tool_call>oops</tool_call>", {{"g", R"({"k":"v"})"}}});
  check(ToolFormat::kMistralNemo, "[TOOL_CALLS] not json", {"[TOOL_CALLS] not json", {}});
  check(ToolFormat::kMistralNemo, "[TOOL_CALLS][{\"name\": \"f\"", {"[TOOL_CALLS][{\"name\": \"f\"", {}});
  check(ToolFormat::kMistralArgs, "[TOOL_CALLS]bad name[ARGS]{}", {"[TOOL_CALLS]bad name[ARGS]{}", {}});
  check(ToolFormat::kLlama3, "{\"answer\": 42}", {"{\"answer\": 42}", {}});
  // The character that breaks a call is text mode's again: it may start the next call.
  check(ToolFormat::kMistralNemo, "[TOOL_CALLS]\u00e9t\u00e9", {"[TOOL_CALLS]\u00e9t\u00e9", {}});
  check(ToolFormat::kMistralNemo, "[TOOL_CALLS]x[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
        {"[TOOL_CALLS]x", {{"f", "{}"}}});
}

TEST(ToolCalls, Llama3BareJsonAndPythonTag) {
  check(ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        {"", {{"get_weather", R"({"city":"Paris"})"}}});
  check(ToolFormat::kLlama3, "\n <|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}",
        {"", {{"f", "{}"}}});
  check(ToolFormat::kLlama3,
        "{\"name\": \"a\", \"parameters\": {\"n\": [1, {\"m\": \"}\"}]}}; {\"name\": \"b\", \"parameters\": {}}",
        {"", {{"a", R"({"n":[1,{"m":"}"}]})"}, {"b", "{}"}}});
  // A '{' after text is text: the bare form is only the whole reply.
  check(ToolFormat::kLlama3, "Sure: {\"name\": \"f\", \"parameters\": {}}", {"Sure: {\"name\": \"f\", \"parameters\": {}}", {}});
  check(ToolFormat::kLlama3, "Plain answer.", {"Plain answer.", {}});
}

TEST(ToolCalls, MistralNemoArrayWithIds) {
  const std::string reply =
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"[1]\"}, \"id\": \"abcDEF123\"}, "
      "{\"name\": \"b\", \"arguments\": {}, \"id\": \"zyx987WVU\"}]";
  check(ToolFormat::kMistralNemo, reply, {"", {{"a", R"({"x":"[1]"})"}, {"b", "{}"}}});
  const ParsedReply r = parse_tool_reply(ToolFormat::kMistralNemo, reply);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].id, "abcDEF123");
  EXPECT_EQ(r.calls[1].id, "zyx987WVU");
}

TEST(ToolCalls, MistralArgsRepeated) {
  check(ToolFormat::kMistralArgs, "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}",
        {"Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"now", "{}"}}});
}

TEST(ToolCalls, NoFormatPassesTextThrough) {
  check(ToolFormat::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>", {"<tool_call>{\"name\": \"f\"}</tool_call>", {}});
}

TEST(ToolCalls, DetectsFormatsFromTemplateText) {
  EXPECT_EQ(detect_tool_format("{{ '<tool_call>\\n{\"name\": \"' }}"), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format("<tool_call>\\n<function=x>"), ToolFormat::kNone);
  EXPECT_EQ(detect_tool_format("<|start_header_id|>ipython<|end_header_id|>"), ToolFormat::kLlama3);
  EXPECT_EQ(detect_tool_format("[TOOL_CALLS]"), ToolFormat::kMistralNemo);
  EXPECT_EQ(detect_tool_format("[TOOL_CALLS] [ARGS]"), ToolFormat::kMistralArgs);
  EXPECT_EQ(detect_tool_format("{{'<|im_start|>' + message['role']}}"), ToolFormat::kNone);
  EXPECT_FALSE(template_reads_tools("{{'<|im_start|>' + message['role']}}"));
  EXPECT_TRUE(template_reads_tools("{% if tools %}"));
}

TEST(ToolCalls, DetectsFormatsOfRealTemplates) {
  const char* dir = std::getenv("FERRY_CHAT_TEMPLATES_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "set FERRY_CHAT_TEMPLATES_DIR to llama.cpp's models/templates/";
  const std::vector<std::pair<std::string, ToolFormat>> expected = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolFormat::kHermes},
      {"Qwen-QwQ-32B", ToolFormat::kHermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ToolFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::kMistralNemo},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::kMistralArgs},
      {"unsloth-mistral-Devstral-Small-2507", ToolFormat::kMistralArgs},
      // Other formats (XML arguments, GLM's arg_key, functionary) are not taken for these.
      {"Qwen3-Coder", ToolFormat::kNone},
      {"GLM-4.6", ToolFormat::kNone},
      {"meetkai-functionary-medium-v3.1", ToolFormat::kNone},
      {"microsoft-Phi-3.5-mini-instruct", ToolFormat::kNone},
  };
  for (const auto& [name, format] : expected) {
    const std::filesystem::path path = std::filesystem::path(dir) / (name + ".jinja");
    if (!std::filesystem::exists(path)) continue;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(tool_format_name(detect_tool_format(ss.str())), std::string(tool_format_name(format))) << name;
  }
}

// Forced calls: the automaton takes exactly a call (or calls) in the format's markers to an allowed tool
// whose arguments the tool's parameters accept.
const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
  {"type": "function", "function": {"name": "grep", "parameters": {"type": "object",
    "properties": {"re": {"type": "string", "pattern": "^x"}}}}}])";

bool takes(const std::shared_ptr<const ToolCallShape>& shape, const std::string& text, bool* complete = nullptr) {
  ToolCallPrefix p(shape);
  const bool ok = p.feed(text) && p.can_end();
  if (complete != nullptr) *complete = p.complete();
  return ok;
}

TEST(ForcedToolCall, HermesTakesCallsToAllowedToolsOnly) {
  const auto tools = nlohmann::json::parse(kTools);
  auto one = forced_tool_call(ToolFormat::kHermes, tools, "", false);
  ASSERT_TRUE(one.has_value()) << one.status().message();
  bool complete = false;
  EXPECT_TRUE(takes(*one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", &complete));
  EXPECT_TRUE(complete);
  EXPECT_TRUE(takes(*one, "\n<tool_call>{\"arguments\": {\"a\": 1, \"b\": 2.5}, \"name\": \"add\"}</tool_call>"));
  // grep's parameters use a keyword ferry cannot keep: any object.
  EXPECT_TRUE(takes(*one, "<tool_call>{\"name\": \"grep\", \"arguments\": {\"anything\": [1]}}</tool_call>"));
  EXPECT_FALSE(takes(*one, "Sure. <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>"));
  EXPECT_FALSE(takes(*one, "<tool_call>{\"name\": \"mul\", \"arguments\": {}}</tool_call>"));
  EXPECT_FALSE(takes(*one, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>"));
  EXPECT_FALSE(takes(*one, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"K\"}}</tool_call>"));
  EXPECT_FALSE(takes(*one, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));  // unclosed
  EXPECT_FALSE(takes(*one, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call><tool_call>"));

  auto several = forced_tool_call(ToolFormat::kHermes, tools, "", true);
  ASSERT_TRUE(several.has_value());
  const std::string call = "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>";
  EXPECT_TRUE(takes(*several, call, &complete));
  EXPECT_FALSE(complete);  // another call may follow
  EXPECT_TRUE(takes(*several, call + "\n" + call));
  EXPECT_FALSE(takes(*several, call + "\n<tool_"));

  auto named = forced_tool_call(ToolFormat::kHermes, tools, "add", false);
  ASSERT_TRUE(named.has_value());
  EXPECT_TRUE(takes(*named, call));
  EXPECT_FALSE(takes(*named, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"));
}

TEST(ForcedToolCall, Llama3IsOneBareObjectAndMistralIsRefused) {
  const auto tools = nlohmann::json::parse(kTools);
  auto l3 = forced_tool_call(ToolFormat::kLlama3, tools, "", true);
  ASSERT_TRUE(l3.has_value());
  bool complete = false;
  EXPECT_TRUE(takes(*l3, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", &complete));
  EXPECT_TRUE(complete);
  EXPECT_FALSE(takes(*l3, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
  auto nemo = forced_tool_call(ToolFormat::kMistralNemo, tools, "", true);
  ASSERT_FALSE(nemo.has_value());
  EXPECT_EQ(nemo.status().code(), ErrorCode::kUnsupported);
  auto unknown = forced_tool_call(ToolFormat::kHermes, tools, "mul", true);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.status().message().find("'mul'"), std::string::npos);
}

// A model whose vocabulary holds a format's marker as a special token (Mistral's [TOOL_CALLS] is one): the
// chat formatter finds it, and a reply shows its text only where the request asks (requests with tools do),
// so the calls after it can be parsed.
TEST(ToolMarkers, SpecialMarkerTokensAreShownInRepliesWithTools) {
  ferry::testing::TempDir dir;
  ferry::testing::TinyModel m;
  m.control_tokens = {"[TOOL_CALLS]", "[INST]"};
  auto e = open_tiny_engine(dir, m);
  ASSERT_TRUE(e.has_value()) << e.status().message();
  const std::string tmpl =
      "{% for m in messages %}[INST]{{ m.content }}{% endfor %}"
      "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]";
  auto chat = ChatFormatter::for_engine(**e, tmpl);
  ASSERT_TRUE(chat.has_value()) << chat.status().message();
  EXPECT_EQ(chat->tool_format(), ToolFormat::kMistralNemo);
  EXPECT_EQ(chat->tool_marker_tokens(), std::vector<int32_t>{257});

  SchedulerOptions so;
  so.n_parallel = 1;
  auto s = Scheduler::start(**e, so);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  for (bool with_tools : {false, true}) {
    GenerationParams g;
    g.forced_tokens = {'O', 'k', 257, '[', ']'};
    g.max_tokens = 5;
    if (with_tools) g.shown_special = chat->tool_marker_tokens();
    auto r = (*s)->submit({1, 2, 3}, g);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_EQ((*r)->wait_all().text, with_tools ? "Ok[TOOL_CALLS][]" : "Ok[]");
  }
}

}  // namespace
}  // namespace ferry::serve
