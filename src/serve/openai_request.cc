// parse_api_request (openai_request.h): the body as JSON (nlohmann checks the syntax and that every
// string is UTF-8), then each field the endpoint knows, by name, type and range.
#include "serve/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace ferry::serve {

namespace {

using json = nlohmann::json;

// Fields each endpoint accepts (OpenAI's, and llama-server's extensions top_k, min_p, repeat_penalty,
// ignore_eos, grammar, json_schema, chat_template_kwargs).
const std::set<std::string> kCommon = {"model",        "stream",           "stream_options", "max_tokens",
                                       "temperature",  "top_p",            "top_k",          "min_p",
                                       "seed",         "stop",             "presence_penalty", "frequency_penalty",
                                       "repeat_penalty", "n",              "user",           "ignore_eos",
                                       "logit_bias",   "logprobs",         "grammar",        "json_schema"};
const std::set<std::string> kChatOnly = {"messages",   "max_completion_tokens", "top_logprobs",         "response_format",
                                         "chat_template_kwargs", "tools",       "tool_choice",          "functions",
                                         "function_call", "parallel_tool_calls"};
const std::set<std::string> kCompletionsOnly = {"prompt", "echo", "best_of", "suffix"};
// Keys a chat message may carry (what OpenAI's clients send back with an earlier assistant turn too).
const std::set<std::string> kMessageKeys = {"role",   "content", "name",          "tool_calls",       "tool_call_id",
                                            "refusal", "audio",   "function_call", "reasoning_content", "annotations"};

constexpr size_t kMaxStops = 16;
constexpr int32_t kMaxTopLogprobs = 20;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "something else";
  }
}

// Reads fields into an ApiRequest; the first problem found is kept and ends the parse.
class Reader {
 public:
  explicit Reader(const json& body) : body_(body) {}

  bool failed() const { return error_.has_value(); }
  ApiError take_error() { return *error_; }

  void fail(const std::string& param, const std::string& message, const std::string& code = "") {
    if (error_) return;
    ApiError e;
    e.message = message;
    e.param = param;
    e.code = code;
    error_ = e;
  }

  // The field, or null when absent or JSON null.
  const json* get(const char* name) const {
    auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<bool> boolean(const char* name) {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong(name, "a boolean", *v), std::nullopt;
    return v->get<bool>();
  }

  std::optional<double> number(const char* name, double lo, double hi) {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong(name, "a number", *v), std::nullopt;
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) {
      fail(name, std::string(name) + " must be between " + fmt(lo) + " and " + fmt(hi) + ", got " + v->dump());
      return std::nullopt;
    }
    return x;
  }

  // An integer >= lo; values above `hi` become hi when clamp, else are errors.
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi, bool clamp = false) {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) {
        if (clamp) return hi;
        fail(name, std::string(name) + " must be at most " + std::to_string(hi) + ", got " + v->dump());
        return std::nullopt;
      }
      return static_cast<int64_t>(u);
    }
    if (!v->is_number_integer()) return wrong(name, "an integer", *v), std::nullopt;
    const int64_t x = v->get<int64_t>();
    if (x < lo) {
      fail(name, std::string(name) + " must be at least " + std::to_string(lo) + ", got " + v->dump());
      return std::nullopt;
    }
    if (x > hi) {
      if (clamp) return hi;
      fail(name, std::string(name) + " must be at most " + std::to_string(hi) + ", got " + v->dump());
      return std::nullopt;
    }
    return x;
  }

  std::optional<std::string> string(const char* name) {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) return wrong(name, "a string", *v), std::nullopt;
    return v->get<std::string>();
  }

  void wrong(const std::string& name, const char* want, const json& got) {
    fail(name, name + " must be " + want + ", got " + type_name(got));
  }

  void unsupported(const std::string& name, const std::string& what) {
    fail(name, what + " is not supported by ferry serve", "unsupported");
  }

 private:
  static std::string fmt(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return buf;
  }

  const json& body_;
  std::optional<ApiError> error_;
};

// The marker an image part leaves in its message's text (engine/multimodal.h kImageMarker).
constexpr const char* kImageMarkerText = "<__media__>";

// An image_url part's image: {"url": "data:<type>;base64,<data>"} (or the URL as a string) -> its bytes.
std::optional<std::string> image_part(Reader& r, const json& part, const std::string& pw) {
  if (!part.contains("image_url")) {
    r.fail(pw + ".image_url", pw + ".image_url is required for a part of type image_url");
    return std::nullopt;
  }
  const json& iu = part["image_url"];
  const json* url = iu.is_string() ? &iu : iu.is_object() && iu.contains("url") ? &iu["url"] : nullptr;
  if (url == nullptr || !url->is_string()) {
    r.fail(pw + ".image_url.url", pw + ".image_url must be {\"url\": \"data:image/...;base64,...\"}");
    return std::nullopt;
  }
  const std::string u = url->get<std::string>();
  if (u.rfind("data:", 0) != 0) {
    r.unsupported(pw + ".image_url.url", "an image URL that is not a data: URL (the server fetches nothing)");
    return std::nullopt;
  }
  const size_t comma = u.find(',');
  if (comma == std::string::npos || comma < 12 || u.compare(comma - 7, 7, ";base64") != 0) {
    r.fail(pw + ".image_url.url", pw + ".image_url.url must be a base64 data: URL (data:image/png;base64,...)");
    return std::nullopt;
  }
  std::optional<std::string> bytes = decode_base64(std::string_view(u).substr(comma + 1));
  if (!bytes || bytes->empty()) {
    r.fail(pw + ".image_url.url", pw + ".image_url.url holds no valid base64 data");
    return std::nullopt;
  }
  return bytes;
}

// One message's content: a string, null, or a list of text parts (joined with newlines) and image parts
// (their marker in the text, their bytes into *images).
std::optional<std::string> message_content(Reader& r, const json& c, const std::string& where,
                                           std::vector<std::string>* images) {
  if (c.is_null()) return std::nullopt;
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    r.wrong(where, "a string, null or an array of content parts", c);
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      r.fail(pw, pw + " must be an object with a string \"type\"");
      return std::nullopt;
    }
    const std::string type = part["type"].get<std::string>();
    if (type == "image_url") {
      std::optional<std::string> bytes = image_part(r, part, pw);
      if (!bytes) return std::nullopt;
      images->push_back(std::move(*bytes));
      if (i > 0) text += "\n";
      text += kImageMarkerText;
      continue;
    }
    if (type != "text") {
      r.unsupported(pw, "content of type '" + type + "'");
      return std::nullopt;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      r.fail(pw, pw + ".text must be a string");
      return std::nullopt;
    }
    if (i > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

void read_tool_calls(Reader& r, const json& calls, const std::string& where, text::ChatMessage* m) {
  if (!calls.is_array()) return r.wrong(where, "an array", calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string cw = where + "[" + std::to_string(i) + "]";
    const json* fn = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return r.fail(cw, cw + " must be {\"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": ...}}");
    text::ChatToolCall call;
    if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
    call.name = (*fn)["name"].get<std::string>();
    if (fn->contains("arguments")) {
      const json& a = (*fn)["arguments"];
      call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
    }
    m->tool_calls.push_back(std::move(call));
  }
}

void read_messages(Reader& r, ApiRequest* out) {
  const json* msgs = r.get("messages");
  if (!msgs) return r.fail("messages", "messages is required: a non-empty array of {role, content}");
  if (!msgs->is_array()) return r.wrong("messages", "an array", *msgs);
  if (msgs->empty()) return r.fail("messages", "messages must not be empty");
  for (size_t i = 0; i < msgs->size() && !r.failed(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return r.wrong(where, "an object", m);
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!kMessageKeys.count(it.key())) return r.fail(where + "." + it.key(), where + " has an unknown field '" + it.key() + "'");
    if (!m.contains("role") || !m["role"].is_string()) return r.fail(where + ".role", where + ".role must be a string");
    text::ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for the system role
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      return r.fail(where + ".role", where + ".role must be system, developer, user, assistant or tool, got '" +
                                         cm.role + "'");
    if (m.contains("content")) cm.content = message_content(r, m["content"], where + ".content", &out->images);
    if (r.failed()) return;
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) read_tool_calls(r, m["tool_calls"], where + ".tool_calls", &cm);
    if (!cm.content && cm.tool_calls.empty() && cm.role != "assistant")
      return r.fail(where + ".content", where + ".content is required for role " + cm.role);
    for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
      if (!m.contains(key) || m[key].is_null()) continue;
      if (!m[key].is_string()) return r.wrong(where + "." + key, "a string", m[key]);
      std::string v = m[key].get<std::string>();
      if (key == std::string("name")) cm.name = std::move(v);
      else if (key == std::string("tool_call_id")) cm.tool_call_id = std::move(v);
      else cm.reasoning_content = std::move(v);
    }
    out->chat.messages.push_back(std::move(cm));
  }
  out->chat.add_generation_prompt = true;
}

void read_prompt(Reader& r, ApiRequest* out) {
  const json* p = r.get("prompt");
  if (!p) return r.fail("prompt", "prompt is required: a string or an array of token ids");
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
    if (p->size() != 1) return r.unsupported("prompt", "more than one prompt per request");
    one = &p->at(0);
  }
  if (one->is_string()) {
    out->prompt = one->get<std::string>();
    return;
  }
  if (!one->is_array()) return r.wrong("prompt", "a string or an array of token ids", *p);
  out->prompt_is_tokens = true;
  for (const json& t : *one) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return r.fail("prompt", "prompt token ids must be integers >= 0");
    out->prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (out->prompt_tokens.empty()) r.fail("prompt", "prompt must not be empty");
}

// A tool's function name: what OpenAI allows (letters, digits, '_' and '-', at most 64).
bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}];
// tool_choice: "none" / "auto" / "required" (a call to any tool) / {"type": "function", "function": {"name"}}
// (a call to that one);
// parallel_tool_calls: a boolean.
void read_tools(Reader& r, ApiRequest* out) {
  if (auto p = r.boolean("parallel_tool_calls")) out->parallel_tool_calls = *p;
  const json* tools = r.get("tools");
  if (tools && !tools->is_array()) return r.wrong("tools", "an array of {\"type\": \"function\", \"function\": {...}}", *tools);
  const bool have_tools = tools && !tools->empty();
  for (size_t i = 0; have_tools && i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string w = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return r.wrong(w, "an object", t);
    if (!t.contains("type") || !t["type"].is_string())
      return r.fail(w + ".type", w + ".type must be \"function\"");
    if (t["type"].get<std::string>() != "function")
      return r.unsupported(w + ".type", "a tool of type '" + t["type"].get<std::string>() + "' (only \"function\")");
    if (!t.contains("function") || !t["function"].is_object())
      return r.fail(w + ".function", w + ".function must be an object {\"name\", \"description\", \"parameters\"}");
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return r.fail(w + ".function.name", w + ".function.name must be a string");
    if (!valid_tool_name(f["name"].get<std::string>()))
      return r.fail(w + ".function.name", w + ".function.name must be 1 to 64 letters, digits, '_' or '-', got '" +
                                               f["name"].get<std::string>() + "'");
    if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
      return r.wrong(w + ".function.description", "a string", f["description"]);
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      return r.wrong(w + ".function.parameters", "an object (a JSON Schema)", f["parameters"]);
    if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean())
      return r.wrong(w + ".function.strict", "a boolean", f["strict"]);
  }
  std::string choice = have_tools ? "auto" : "none";
  if (const json* c = r.get("tool_choice")) {
    if (c->is_object()) {
      const json* f = c->contains("function") ? &(*c)["function"] : nullptr;
      if (!c->contains("type") || (*c)["type"] != "function" || f == nullptr || !f->is_object() ||
          !f->contains("name") || !(*f)["name"].is_string())
        return r.fail("tool_choice", "tool_choice as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      const std::string name = (*f)["name"].get<std::string>();
      const bool known = have_tools && std::any_of(tools->begin(), tools->end(), [&](const json& t) {
        return t["function"]["name"] == name;
      });
      if (!known) return r.fail("tool_choice.function.name", "tool_choice names the function '" + name + "', which is not among the tools");
      out->tools = true;
      out->forced_tool = name;
      return;
    }
    if (!c->is_string()) return r.wrong("tool_choice", "\"none\", \"auto\", \"required\" or an object", *c);
    choice = c->get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required")
      return r.fail("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or an object, got '" + choice + "'");
    if (choice != "none" && !have_tools) return r.fail("tool_choice", "tool_choice \"" + choice + "\" needs tools");
  }
  out->tools = have_tools && choice != "none";
  if (choice == "required") out->forced_tool = "*";
}

void read_stop(Reader& r, GenerationParams* g) {
  const json* s = r.get("stop");
  if (!s) return;
  if (s->is_string()) {
    g->stop.push_back(s->get<std::string>());
    return;
  }
  if (!s->is_array()) return r.wrong("stop", "a string or an array of strings", *s);
  if (s->size() > kMaxStops) return r.fail("stop", "stop may hold at most " + std::to_string(kMaxStops) + " strings");
  for (const json& x : *s) {
    if (!x.is_string()) return r.wrong("stop", "an array of strings; an element is", x);
    g->stop.push_back(x.get<std::string>());
  }
}

// response_format: "text"; "json_object" (JSON mode); "json_schema" (structured outputs: {"type":
// "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}).
void read_response_format(Reader& r, const json& f, GenerationParams* g) {
  const std::string type = f["type"].get<std::string>();
  for (auto it = f.begin(); it != f.end(); ++it)
    if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema"))
      return r.fail("response_format." + it.key(), "unknown field 'response_format." + it.key() + "'");
  if (type == "text") return;
  if (type == "json_object") {
    g->json_schema = JsonSchema::any_object();
    return;
  }
  if (type != "json_schema")
    return r.fail("response_format", "response_format '" + type + "' is not one of 'text', 'json_object', 'json_schema'");
  const auto js = f.find("json_schema");
  if (js == f.end() || !js->is_object())
    return r.fail("response_format.json_schema", "response_format.json_schema must be an object with the schema");
  for (auto it = js->begin(); it != js->end(); ++it)
    if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" && it.key() != "description")
      return r.fail("response_format.json_schema." + it.key(), "unknown field 'response_format.json_schema." + it.key() + "'");
  const auto schema = js->find("schema");
  if (schema == js->end()) return r.fail("response_format.json_schema.schema", "response_format.json_schema has no schema");
  auto compiled = JsonSchema::compile(*schema);
  if (!compiled) return r.fail("response_format.json_schema.schema", compiled.status().message(), "unsupported");
  g->json_schema = std::move(compiled).value();
}

// json_schema (llama-server's, both endpoints): the schema itself, as response_format's json_schema.schema;
// null: none.
void read_json_schema(Reader& r, GenerationParams* g) {
  const json* v = r.get("json_schema");
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) return r.wrong("json_schema", "an object (a JSON Schema)", *v);
  if (g->json_schema != nullptr) return r.fail("json_schema", "json_schema and response_format cannot both constrain the reply");
  auto compiled = JsonSchema::compile(*v);
  if (!compiled) return r.fail("json_schema", compiled.status().message(), "unsupported");
  g->json_schema = std::move(compiled).value();
}

// grammar (llama-server's): a GBNF grammar the reply follows (serve/gbnf.h); "" or null: none.
void read_grammar(Reader& r, GenerationParams* g) {
  const json* v = r.get("grammar");
  if (v == nullptr || v->is_null()) return;
  if (!v->is_string()) return r.wrong("grammar", "a string (a GBNF grammar)", *v);
  const std::string text = v->get<std::string>();
  if (text.empty()) return;
  if (g->json_schema != nullptr) return r.fail("grammar", "grammar and a JSON response_format cannot be combined");
  auto compiled = Grammar::parse(text);
  if (!compiled) return r.fail("grammar", compiled.status().message());
  g->grammar = std::move(compiled).value();
}

// Fields ferry knows but does not do: an error unless they ask for the default (or, for response_format,
// what ferry does: JSON mode and structured outputs).
void read_unsupported(Reader& r, Endpoint e, GenerationParams* g) {
  if (auto n = r.integer("n", 1, 1 << 20); n && *n != 1) r.unsupported("n", "n other than 1");
  if (const json* lb = r.get("logit_bias"); lb && !(lb->is_object() && lb->empty()))
    r.unsupported("logit_bias", "logit_bias");
  if (e == Endpoint::kChat) {
    if (const json* t = r.get("functions"); t) r.unsupported("functions", "function calling");
    if (const json* t = r.get("function_call"); t) r.unsupported("function_call", "function calling");
    if (const json* f = r.get("response_format")) {
      if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
        r.fail("response_format", "response_format must be {\"type\": ...}");
      else
        read_response_format(r, *f, g);
    }
  } else {
    if (auto echo = r.boolean("echo"); echo && *echo) r.unsupported("echo", "echo");
    if (auto b = r.integer("best_of", 1, 1 << 20); b && *b != 1) r.unsupported("best_of", "best_of other than 1");
    if (auto s = r.string("suffix"); s && !s->empty()) r.unsupported("suffix", "suffix");
  }
}

}  // namespace

json error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

std::optional<std::string> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::variant<ApiRequest, ApiError> parse_api_request(Endpoint e, std::string_view body, uint64_t random_seed) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& ex) {
    ApiError err;
    err.message = std::string("the body is not valid JSON (UTF-8): ") + ex.what();
    return err;
  }
  if (!j.is_object()) {
    ApiError err;
    err.message = "the body must be a JSON object, got " + type_name(j);
    return err;
  }
  Reader r(j);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const bool known = kCommon.count(k) || (e == Endpoint::kChat ? kChatOnly.count(k) : kCompletionsOnly.count(k));
    if (!known) {
      r.fail(k, "unknown field '" + k + "'");
      return r.take_error();
    }
  }

  ApiRequest out;
  out.endpoint = e;
  GenerationParams& g = out.gen;
  if (auto m = r.string("model")) out.model = *m;
  r.string("user");
  if (auto s = r.boolean("stream")) out.stream = *s;
  if (const json* so = r.get("stream_options")) {
    if (!so->is_object()) {
      r.wrong("stream_options", "an object", *so);
    } else if (!out.stream) {
      r.fail("stream_options", "stream_options is only allowed with stream: true");
    } else {
      for (auto it = so->begin(); it != so->end(); ++it) {
        if (it.key() != "include_usage") r.fail("stream_options." + it.key(), "unknown field 'stream_options." + it.key() + "'");
        else if (!it->is_boolean()) r.wrong("stream_options.include_usage", "a boolean", *it);
        else out.include_usage = it->get<bool>();
      }
    }
  }
  // max_tokens: an integer >= 0; beyond the int range it is clamped, and the scheduler clamps it again
  // to the room the request's context leaves.
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens = r.integer("max_tokens", 0, kMaxInt, true);
  if (e == Endpoint::kChat)
    if (auto mct = r.integer("max_completion_tokens", 0, kMaxInt, true)) max_tokens = mct;
  g.max_tokens = max_tokens ? static_cast<int32_t>(*max_tokens) : -1;
  if (auto t = r.number("temperature", 0, 2)) g.sampling.temp = static_cast<float>(*t);
  if (auto p = r.number("top_p", 0, 1)) g.sampling.top_p = static_cast<float>(*p);
  if (auto k = r.integer("top_k", 0, kMaxInt)) g.sampling.top_k = static_cast<int32_t>(*k);
  if (auto m = r.number("min_p", 0, 1)) g.sampling.min_p = static_cast<float>(*m);
  if (auto p = r.number("presence_penalty", -2, 2)) g.presence_penalty = static_cast<float>(*p);
  if (auto f = r.number("frequency_penalty", -2, 2)) g.frequency_penalty = static_cast<float>(*f);
  if (auto rp = r.number("repeat_penalty", 0, 10)) {
    if (*rp == 0) r.fail("repeat_penalty", "repeat_penalty must be > 0 (1: off)");
    g.sampling.repeat_penalty = static_cast<float>(*rp);
  }
  if (auto ig = r.boolean("ignore_eos")) g.ignore_eos = *ig;
  g.sampling.seed = random_seed;
  if (const json* s = r.get("seed")) {
    if (s->is_number_unsigned()) g.sampling.seed = s->get<uint64_t>();
    else if (s->is_number_integer()) g.sampling.seed = static_cast<uint64_t>(s->get<int64_t>());
    else r.wrong("seed", "an integer", *s);
  }
  read_stop(r, &g);
  if (e == Endpoint::kChat) {
    if (auto lp = r.boolean("logprobs")) out.logprobs = *lp;
    if (auto top = r.integer("top_logprobs", 0, kMaxTopLogprobs)) {
      if (!out.logprobs) r.fail("top_logprobs", "top_logprobs needs logprobs: true");
      g.top_logprobs = static_cast<int32_t>(*top);
    }
    if (out.logprobs && g.top_logprobs < 0) g.top_logprobs = 0;
    if (const json* kw = r.get("chat_template_kwargs")) {
      if (!kw->is_object()) r.wrong("chat_template_kwargs", "an object", *kw);
      else out.chat.extra_json = kw->dump();
    }
    read_messages(r, &out);
    read_tools(r, &out);
  } else {
    if (auto lp = r.integer("logprobs", 0, kMaxTopLogprobs)) {
      out.logprobs = true;
      g.top_logprobs = static_cast<int32_t>(*lp);
    }
    read_prompt(r, &out);
  }
  read_unsupported(r, e, &g);
  read_json_schema(r, &g);
  read_grammar(r, &g);
  if (r.failed()) return r.take_error();
  // The template prints the tools with tojson: in the client's key order (nlohmann::json sorts keys).
  if (out.tools) out.chat.tools_json = nlohmann::ordered_json::parse(body.begin(), body.end())["tools"].dump();
  return out;
}

}  // namespace ferry::serve
