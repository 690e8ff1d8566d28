// Chat formatting with a model's own Jinja chat template (the GGUF key tokenizer.chat_template), rendered
// the way Hugging Face transformers renders it: Jinja with trim_blocks and lstrip_blocks, the globals
// raise_exception(msg) and strftime_now(fmt), `tojson` as Python's json.dumps (ensure_ascii=False, indent,
// separators and sort_keys as keyword arguments), and jinja2's default Undefined (a missing variable or key
// renders as "" and is falsy; an attribute of it is an error). The interpreter is in text/jinja/.
//
// Contract (stable; `ferry run --chat`, `ferry template`, `ferry serve` and `ferry chat` call it):
//   auto tmpl = ChatTemplate::parse(source);           // once per model; kCorrupt on a syntax error
//   ChatRequest req;                                   // messages, tools, add_generation_prompt, tokens, vars
//   Expected<std::string> text = tmpl->render(req);    // the prompt text, BOS text included if the template
//                                                      // writes it (see engine::render_chat for stripping it)
// - Errors are one line. parse(): kCorrupt, "chat template line N: syntax error: <what>". render():
//   kInvalidArgument (the conversation is what the template cannot take), "chat template line N: <what>" for an
//   error while rendering (undefined attribute chain, wrong types, ...), "chat template: <message>" when the
//   template calls raise_exception (it refuses the conversation, e.g. roles that do not alternate); a bad
//   messages_json / tools_json / extra_json is "messages: <what>" (resp. tools:, extra:).
// - A parsed ChatTemplate is immutable: render() is const, keeps no state between calls, and may run on
//   several threads at once. Copies share the parsed template.
// - JSON objects keep the key order they were written in (tojson of tools prints them in that order), so
//   pass the client's JSON text as it came (or parse it with nlohmann::ordered_json before dumping it).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::text {

class Tokenizer;

namespace jinja {
class Template;
}

// One tool call of an assistant turn, OpenAI style. In the template it is
// {"id": id, "type": "function", "function": {"name": name, "arguments": ARGS}} (id left out when empty),
// where ARGS is `arguments` parsed into an object when it is the JSON text of an object (templates expect a
// mapping: Hugging Face's convention), else the string as given.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of the arguments, e.g. {"city": "Paris"}
};

// One message. In the template: {"role": role, "content": content (null when unset)}, then "tool_calls"
// when there are any, and "tool_call_id", "name", "reasoning_content" when non-empty, in that order.
struct ChatMessage {
  std::string role;                    // "system", "user", "assistant", "tool", ...
  std::optional<std::string> content;  // nullopt: null (e.g. an assistant turn with only tool calls)
  std::vector<ChatToolCall> tool_calls;
  std::string tool_call_id;       // a tool result: the call it answers
  std::string name;               // a tool result: the tool's name (some templates print it)
  std::string reasoning_content;  // an assistant turn's thinking, for templates that render it
};

struct ChatRequest {
  // The conversation: `messages`, or, when messages_json is not empty, that JSON array of message objects
  // as OpenAI's chat API takes them (content a string, null or a list of parts; tool_calls with
  // function.arguments a JSON string or an object; any other field the template reads). String arguments of
  // tool calls in messages_json are parsed into objects as for ChatToolCall, unless parse_tool_arguments is
  // false (then the template gets them as the client sent them).
  std::vector<ChatMessage> messages;
  std::string messages_json;
  bool parse_tool_arguments = true;
  // JSON array of tools (OpenAI function tools: {"type": "function", "function": {...}}); empty: the
  // template sees `tools` undefined, as llama.cpp leaves it without tools (Hugging Face passes None; templates
  // treat both as "no tools").
  std::string tools_json;
  bool add_generation_prompt = true;  // open the assistant's turn at the end
  std::string bos_token, eos_token;   // the text of the model's BOS / EOS tokens ("" when it has none)
  // JSON object of more template variables, e.g. {"enable_thinking": false, "date_string": "26 Jul 2024"};
  // they may override the ones above.
  std::string extra_json;
  // The time strftime_now() formats; nullopt: the local time when render() runs.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Parses a template. kCorrupt naming the line on a syntax error.
  static Expected<ChatTemplate> parse(std::string_view source);

  // The prompt text for `request` (see the contract at the top).
  Expected<std::string> render(const ChatRequest& request) const;

  const std::string& source() const { return *source_; }

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const jinja::Template> template_;
};

// The file's tokenizer.chat_template, parsed. kNotFound when the file has none.
Expected<ChatTemplate> chat_template_from_gguf(const gguf::ModelFile& file);

// Renders for a model's tokenizer: bos_token / eos_token are the text of its BOS / EOS tokens when the
// request leaves them empty; a leading BOS text is removed when the tokenizer adds BOS itself, and a
// trailing EOS text when it adds EOS, so the tokenized prompt holds one of each (llama.cpp does the same).
Expected<std::string> render_for_tokenizer(const ChatTemplate& tmpl, ChatRequest request, const Tokenizer& tok);

}  // namespace ferry::text
