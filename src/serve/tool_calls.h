// Tool calls in a model's reply: which format a chat template's model writes its calls in (detected from
// marker text in the template's source), and a parser that splits the reply into the text outside the
// calls and the calls themselves, as the text streams in.
//
// Formats (one row each in tool_calls.cc's table):
//   hermes        <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number per reply, text around
//                 them (Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ, Granite 4, MiMo-VL).
//   llama3        the reply starts with {"name": ..., "parameters": {...}} (optionally after <|python_tag|>),
//                 several separated by ';' or whitespace (Llama 3.1 / 3.2 / 3.3 templates with ipython).
//   mistral-nemo  [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abcDEF123"}, ...] (Mistral Nemo).
//   mistral-args  [TOOL_CALLS]name[ARGS]{...}, repeated (Mistral Small 3.2, Devstral, Ministral 3).
//
// A call whose JSON does not parse, or that lacks a string name or an object of arguments, is plain text
// (marker included): the client sees what the model wrote rather than a made-up call. Whitespace around
// calls and at the end of the reply is dropped (a reply whose only text is whitespace has none).
// Splitting the reply into pieces anywhere (even inside a UTF-8 character) gives the same text and calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::serve {

enum class ToolFormat : uint8_t { kNone, kHermes, kLlama3, kMistralNemo, kMistralArgs };

// "none", "hermes", "llama3", "mistral-nemo", "mistral-args".
const char* tool_format_name(ToolFormat f);

// The format of calls a template's model writes, from its source; kNone when no known format's markers are
// there (the template ignores tools, or writes calls in a format ferry does not parse).
ToolFormat detect_tool_format(std::string_view template_source);

// The marker texts of a format's calls (start, end, and [ARGS] for mistral-args). A model's vocabulary may hold
// them as special tokens, whose text a reply shows only when asked (ChatFormatter::tool_marker_tokens).
std::vector<std::string> tool_call_markers(ToolFormat f);

// Whether the template reads the `tools` variable at all (a template that does not cannot tell the model
// about tools; a template that does but has no known format writes calls ferry cannot parse).
bool template_reads_tools(std::string_view template_source);

struct ParsedToolCall {
  std::string id;         // the model's own id when its format carries one (mistral-nemo), else ""
  std::string name;
  std::string arguments;  // JSON text of the arguments object (the model's key order), or the string it gave
};

// One piece of parsed reply, in order: text to show, or a whole call.
struct ToolSegment {
  bool is_call = false;
  std::string text;     // !is_call
  ParsedToolCall call;  // is_call
};

// The reply of one request through a format's parser. push() returns what became final: text that cannot be
// part of a call is released at once; text that might start a call marker, and a call until it completes,
// are held back.
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolFormat format);

  std::vector<ToolSegment> push(std::string_view piece);
  // The end of the reply: what was held (an unfinished call becomes text).
  std::vector<ToolSegment> flush();

 private:
  void emit_text(std::string_view text, std::vector<ToolSegment>* out);
  void emit_call(ParsedToolCall call, std::vector<ToolSegment>* out);
  // Text mode: finds a call's start in buf_ or releases what cannot start one.
  bool scan_text(std::vector<ToolSegment>* out);
  // Call mode: completes the call in buf_ when its end is there. at_end: the reply ended.
  bool scan_call(bool at_end, std::vector<ToolSegment>* out);
  // The call failed to parse: its marker and body become text.
  void call_as_text(size_t body_end, std::vector<ToolSegment>* out);

  ToolFormat format_;
  std::string buf_;            // held text (text mode) or the call's marker and body (call mode)
  std::string ws_;             // whitespace after the released text, released only when more text follows
  bool in_call_ = false;
  size_t body_begin_ = 0;      // call mode: where the body starts in buf_ (after the start marker)
  size_t scanned_ = 0;         // call mode: bytes of the body the JSON scanner has seen
  int depth_ = 0;              // JSON scanner: open brackets
  bool in_string_ = false, escape_ = false, started_ = false;
  bool only_calls_ = true;     // nothing but whitespace and calls so far (llama3's bare '{' may start a call)
  bool after_call_ = false;    // a call ended and no text followed yet (leading whitespace is dropped)
};

// An id for a call the reply made: "call_" and 24 random letters and digits (OpenAI's shape), except for
// mistral-nemo, whose template takes ids of exactly 9 letters and digits back: the model's own when it gave
// such an id, else 9 random ones.
std::string tool_call_id(ToolFormat format, const std::string& model_id, uint64_t random);

// Text and calls of a whole reply (push + flush), for a non-streamed response.
struct ParsedReply {
  std::string content;  // the text outside the calls
  std::vector<ParsedToolCall> calls;
};
ParsedReply parse_tool_reply(ToolFormat format, std::string_view reply);

}  // namespace ferry::serve
