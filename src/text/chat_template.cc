// ChatTemplate: the request as template variables (messages, tools, add_generation_prompt, bos_token,
// eos_token, extra variables), rendered by the Jinja interpreter in text/jinja/; errors become one line.
#include "text/chat_template.h"

#include <new>

#include "format/gguf.h"
#include "text/jinja/eval.h"
#include "text/jinja/json.h"
#include "text/jinja/lexer.h"
#include "text/jinja/template.h"
#include "text/tokenizer.h"

namespace ferry::text {

namespace {

using jinja::Value;

// {"arguments": "{...}"} -> the parsed object, when the text is a JSON object.
Value arguments_value(const std::string& text) {
  try {
    Value v = jinja::from_json(text);
    if (v.is_dict()) return v;
  } catch (const jinja::RenderError&) {
  }
  return Value(text);
}

void parse_call_arguments(Value& call) {
  if (!call.is_dict()) return;
  auto fix = [](jinja::DictObj& d) {
    const Value* args = d.find(std::string_view("arguments"));
    if (args && args->is_string()) d.set(Value("arguments"), arguments_value(args->str()));
  };
  fix(call.dict_ref());
  if (const Value* fn = call.dict_ref().find(std::string_view("function")); fn && fn->is_dict()) fix(fn->dict_ref());
}

Value message_value(const ChatMessage& m) {
  Value d = Value::dict();
  auto& o = d.dict_ref();
  o.set(Value("role"), Value(m.role));
  o.set(Value("content"), m.content ? Value(*m.content) : Value::none());
  if (!m.tool_calls.empty()) {
    std::vector<Value> calls;
    for (const ChatToolCall& c : m.tool_calls) {
      Value call = Value::dict();
      if (!c.id.empty()) call.dict_ref().set(Value("id"), Value(c.id));
      call.dict_ref().set(Value("type"), Value("function"));
      Value fn = Value::dict();
      fn.dict_ref().set(Value("name"), Value(c.name));
      fn.dict_ref().set(Value("arguments"), arguments_value(c.arguments));
      call.dict_ref().set(Value("function"), fn);
      calls.push_back(call);
    }
    o.set(Value("tool_calls"), Value::list(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) o.set(Value("tool_call_id"), Value(m.tool_call_id));
  if (!m.name.empty()) o.set(Value("name"), Value(m.name));
  if (!m.reasoning_content.empty()) o.set(Value("reasoning_content"), Value(m.reasoning_content));
  return d;
}

Value parse_json_field(const std::string& text, const char* field) {
  try {
    return jinja::from_json(text);
  } catch (const jinja::RenderError& e) {
    throw jinja::RenderError(std::string(field) + ": " + e.what());
  }
}

Status invalid(const std::string& msg) { return Status(ErrorCode::kInvalidArgument, msg); }

}  // namespace

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  try {
    t.source_ = std::make_shared<const std::string>(source);
    t.template_ = std::make_shared<const jinja::Template>(jinja::Template::parse(*t.source_));
  } catch (const jinja::SyntaxError& e) {
    return Status(ErrorCode::kCorrupt,
                  "chat template line " + std::to_string(e.line()) + ": syntax error: " + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "chat template: out of memory while parsing");
  }
  return t;
}

Expected<std::string> ChatTemplate::render(const ChatRequest& req) const {
  if (!template_) return Status(ErrorCode::kInternal, "chat template: render() on an empty ChatTemplate");
  jinja::ContainerArena arena;  // frees the render's containers even when the template made a cycle
  std::unordered_map<std::string, Value> vars;
  try {
    Value messages;
    if (!req.messages_json.empty()) {
      messages = parse_json_field(req.messages_json, "messages");
      if (!messages.is_list()) return invalid("messages: expected a JSON array of message objects");
      for (Value& m : messages.list_ref().items) {
        if (!m.is_dict()) return invalid("messages: every message must be a JSON object");
        const Value* calls = m.dict_ref().find(std::string_view("tool_calls"));
        if (req.parse_tool_arguments && calls && calls->is_list())
          for (Value& c : calls->list_ref().items) parse_call_arguments(c);
      }
    } else {
      std::vector<Value> items;
      for (const ChatMessage& m : req.messages) items.push_back(message_value(m));
      messages = Value::list(std::move(items));
    }
    vars["messages"] = messages;
    if (!req.tools_json.empty()) {
      Value tools = parse_json_field(req.tools_json, "tools");
      if (!tools.is_list()) return invalid("tools: expected a JSON array of tools");
      vars["tools"] = tools;
    }
    vars["add_generation_prompt"] = Value(req.add_generation_prompt);
    vars["bos_token"] = Value(req.bos_token);
    vars["eos_token"] = Value(req.eos_token);
    if (!req.extra_json.empty()) {
      Value extra = parse_json_field(req.extra_json, "extra");
      if (!extra.is_dict()) return invalid("extra: expected a JSON object of template variables");
      for (const auto& [k, v] : extra.dict_ref().items) vars[k.str()] = v;
    }
  } catch (const jinja::RenderError& e) {
    return invalid(e.what());
  }
  std::tm now{};
  if (req.now) {
    now = *req.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  try {
    return template_->render(std::move(vars), now);
  } catch (const jinja::LocatedError& e) {
    return invalid("chat template line " + std::to_string(e.line()) + ": " + e.what());
  } catch (const jinja::TemplateRaised& e) {
    return invalid(std::string("chat template: ") + e.what());
  } catch (const jinja::RenderError& e) {
    return invalid(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "chat template: out of memory while rendering");
  }
}

Expected<ChatTemplate> chat_template_from_gguf(const gguf::ModelFile& file) {
  std::string source = file.get_string_or("tokenizer.chat_template", "");
  if (source.empty())
    return make_error(ErrorCode::kNotFound, "%s has no chat template (tokenizer.chat_template)", file.path().c_str());
  return ChatTemplate::parse(source);
}

Expected<std::string> render_for_tokenizer(const ChatTemplate& tmpl, ChatRequest request, const Tokenizer& tok) {
  const SpecialTokens& sp = tok.special();
  auto text_of = [&](Token id) {
    return id >= 0 && id < tok.vocab_size() ? tok.token_to_piece(id, true) : std::string();
  };
  if (request.bos_token.empty()) request.bos_token = text_of(sp.bos);
  if (request.eos_token.empty()) request.eos_token = text_of(sp.eos);
  FERRY_ASSIGN_OR_RETURN(std::string out, tmpl.render(request));
  const std::string& bos = request.bos_token;
  const std::string& eos = request.eos_token;
  if (sp.add_bos && !bos.empty() && out.compare(0, bos.size(), bos) == 0) out.erase(0, bos.size());
  if (sp.add_eos && !eos.empty() && out.size() >= eos.size() &&
      out.compare(out.size() - eos.size(), eos.size(), eos) == 0)
    out.resize(out.size() - eos.size());
  return out;
}

}  // namespace ferry::text
