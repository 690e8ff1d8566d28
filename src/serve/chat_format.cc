// ChatFormatter (chat_format.h).
#include "serve/chat_format.h"

#include <algorithm>

#include "engine/generate.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "text/tokenizer.h"

namespace ferry::serve {

namespace {

// Gemma's turns, for a gemma3 file without a template: no system role (its text opens the first user
// turn, as Gemma's own template does), "model" for the assistant. BOS is added by the tokenizer.
Expected<std::string> gemma_turns(const text::ChatRequest& r) {
  std::string out, system;
  for (const text::ChatMessage& m : r.messages) {
    const std::string content = m.content.value_or("");
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n\n") + content;
      continue;
    }
    if (m.role != "user" && m.role != "assistant")
      return make_error(ErrorCode::kInvalidArgument, "the Gemma turn format has no role '%s'", m.role.c_str());
    out += m.role == "user" ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
    if (m.role == "user" && !system.empty()) {
      out += system + "\n\n";
      system.clear();
    }
    out += content + "<end_of_turn>\n";
  }
  if (r.add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

Expected<ChatFormatter> ChatFormatter::for_engine(const engine::Engine& engine, std::string_view template_source) {
  ChatFormatter f;
  f.engine_ = &engine;
  const bool given = !template_source.empty();
  auto tmpl = given ? text::ChatTemplate::parse(template_source) : engine::model_chat_template(engine);
  if (tmpl) {
    f.kind_ = Kind::kTemplate;
    f.template_ = std::move(*tmpl);
    f.origin_ = given ? "the chat template given to the server" : "the model's chat template";
    f.tool_format_ = detect_tool_format(f.template_->source());
    const std::vector<std::string> markers = tool_call_markers(f.tool_format_);
    const text::Tokenizer& tok = engine.tokenizer();
    for (int32_t t = 0; !markers.empty() && t < tok.vocab_size(); ++t) {
      if (!tok.token_to_piece(t, false).empty()) continue;  // shown anyway
      const std::string special = tok.token_to_piece(t, true);
      if (std::find(markers.begin(), markers.end(), special) != markers.end()) f.tool_marker_tokens_.push_back(t);
    }
  } else if (given) {
    return tmpl.status();
  } else if (tmpl.status().code() != ErrorCode::kNotFound) {
    return tmpl.status();
  } else if (engine.spec().arch == model::Arch::kGemma3) {
    f.kind_ = Kind::kGemma;
    f.origin_ = "Gemma turns (the file has no chat template)";
  } else {
    f.none_reason_ = engine.file().path() + " has no chat template (tokenizer.chat_template)";
    f.origin_ = "none: " + f.none_reason_;
  }
  return f;
}

std::string ChatFormatter::tools_refusal(const std::string& model) const {
  if (kind_ == Kind::kTemplate && tool_format_ != ToolFormat::kNone) return "";
  std::string why;
  if (kind_ != Kind::kTemplate) why = "has no chat template to tell it about tools (" + origin_ + ")";
  else if (!template_reads_tools(template_->source())) why = "has a chat template (" + origin_ + ") that does not render tools";
  else
    why = "has a chat template (" + origin_ +
          ") whose tool-call format ferry does not parse (it parses hermes <tool_call>, llama3 JSON with ipython, "
          "mistral [TOOL_CALLS])";
  return "tools cannot be used with model '" + model + "': it " + why +
         "; send the request without tools, or serve it with a --chat-template-file that has a known tool format";
}

Expected<std::string> ChatFormatter::format(text::ChatRequest request) const {
  switch (kind_) {
    case Kind::kTemplate: return engine::render_chat(*engine_, *template_, std::move(request));
    case Kind::kGemma: return gemma_turns(request);
    case Kind::kNone: break;
  }
  return make_error(ErrorCode::kUnsupported, "the model cannot chat: %s; send plain text to /v1/completions",
                    none_reason_.c_str());
}

}  // namespace ferry::serve
