// ChatFormatter: a conversation -> the prompt text of one model, for the server and `ferry chat`. The
// model's own Jinja template (tokenizer.chat_template, rendered by text::ChatTemplate with the BOS/EOS
// handling of engine::render_chat); a file without one gets its architecture's known turn format (Gemma's
// turns for gemma3), and any other file cannot chat (a clear error; plain completions still work).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "serve/tool_calls.h"
#include "text/chat_template.h"

namespace ferry::serve {

class ChatFormatter {
 public:
  // For `engine`'s model, with its own template or, when template_source is not empty, that one (llama-server's
  // --chat-template-file). Errors: a template that does not parse (kCorrupt, naming the line).
  static Expected<ChatFormatter> for_engine(const engine::Engine& engine, std::string_view template_source = {});

  // The prompt text (before tokenize_prompt) of request.messages with the assistant's turn opened when
  // request.add_generation_prompt. Errors: kUnsupported when the model has no chat format; the
  // template's own refusals (raise_exception, e.g. roles that do not alternate) as kInvalidArgument.
  Expected<std::string> format(text::ChatRequest request) const;

  // Where the format comes from: "the model's chat template", "Gemma turns (no template in the file)",
  // or "none: <why>".
  const std::string& origin() const { return origin_; }
  bool can_chat() const { return kind_ != Kind::kNone; }

  // The format the template's model writes tool calls in (tool_calls.h); kNone without a template.
  ToolFormat tool_format() const { return tool_format_; }
  // The special (control) tokens of the model whose text is one of that format's markers (Mistral's
  // [TOOL_CALLS], a hermes model's <tool_call> where its vocabulary marks it special): a reply with tools
  // shows their text, or its calls could not be found (llama-server's "preserved tokens").
  const std::vector<int32_t>& tool_marker_tokens() const { return tool_marker_tokens_; }
  // Why a request with tools cannot be served ("" when it can): no template, a template that does not
  // render tools, or one whose call format ferry does not parse. `model` names the model in the message.
  std::string tools_refusal(const std::string& model) const;

 private:
  enum class Kind { kTemplate, kGemma, kNone };
  const engine::Engine* engine_ = nullptr;
  Kind kind_ = Kind::kNone;
  std::optional<text::ChatTemplate> template_;
  std::string origin_;
  std::string none_reason_;  // kNone: why
  ToolFormat tool_format_ = ToolFormat::kNone;
  std::vector<int32_t> tool_marker_tokens_;
};

}  // namespace ferry::serve
