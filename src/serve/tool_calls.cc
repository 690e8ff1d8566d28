// Tool-call formats and their parser (tool_calls.h). One table row per format says how to recognise its
// templates and where its calls start and end; the parser is one state machine over those rows: text mode
// looks for the row's start marker (holding back a tail that may be its beginning), call mode holds the
// call until its end marker or, for formats without one, until its JSON value closes (a small scanner that
// counts brackets outside strings), then parses it with nlohmann::ordered_json (keeping the model's key
// order in the arguments).
#include "serve/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <nlohmann/json.hpp>

namespace ferry::serve {

namespace {

using ojson = nlohmann::ordered_json;

// What follows a call's start marker.
enum class Body : uint8_t {
  kObject,     // one JSON object {"name", "arguments" | "parameters"}
  kArray,      // a JSON array of such objects
  kNamedArgs,  // name[ARGS]{arguments}
};

struct FormatRow {
  ToolFormat format;
  const char* name;
  // Detection: the template's source holds every `must` and no `must_not` string.
  std::initializer_list<const char*> must, must_not;
  const char* start;     // the call's start marker
  const char* end;       // its end marker; "" = the call ends where its JSON value closes
  Body body;
  bool bare_json_start;  // a '{' before any text starts a call too (no marker)
  const char* between;   // what may separate calls besides whitespace (dropped)
};

// Markers of other formats that share <tool_call> (Qwen3-Coder / Nemotron's <function=...>, GLM's
// <arg_key>, MiniMax's <invoke>) keep those templates out of the hermes row.
const FormatRow kFormats[] = {
    {ToolFormat::kMistralArgs, "mistral-args", {"[TOOL_CALLS]", "[ARGS]"}, {}, "[TOOL_CALLS]", "", Body::kNamedArgs,
     false, ""},
    {ToolFormat::kMistralNemo, "mistral-nemo", {"[TOOL_CALLS]"}, {"[ARGS]"}, "[TOOL_CALLS]", "", Body::kArray, false,
     ""},
    {ToolFormat::kHermes, "hermes", {"<tool_call>", "\"name\""}, {"<function=", "<arg_key>", "<invoke", "<parameter="},
     "<tool_call>", "</tool_call>", Body::kObject, false, ""},
    {ToolFormat::kLlama3, "llama3", {"<|start_header_id|>", "ipython"}, {"<function=", "<tool_call>"},
     "<|python_tag|>", "", Body::kObject, true, ";"},
};

const FormatRow* row_of(ToolFormat f) {
  for (const FormatRow& r : kFormats)
    if (r.format == f) return &r;
  return nullptr;
}

}  // namespace

std::vector<std::string> tool_call_markers(ToolFormat f) {
  const FormatRow* r = row_of(f);
  if (r == nullptr) return {};
  std::vector<std::string> out{r->start};
  if (*r->end != '\0') out.emplace_back(r->end);
  if (r->body == Body::kNamedArgs) out.emplace_back("[ARGS]");
  return out;
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

// Arguments as JSON text: an object as the model wrote it (compact), a string as given.
bool arguments_text(const ojson& a, std::string* out) {
  if (a.is_object()) {
    *out = a.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return true;
  }
  if (a.is_string()) {
    *out = a.get<std::string>();
    return true;
  }
  return false;
}

// {"name": "...", "arguments" | "parameters": {...} (absent: {}), "id"?: "..."} -> a call.
bool call_of(const ojson& j, ParsedToolCall* call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  call->name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) call->arguments = "{}";
  else if (!arguments_text(*args, &call->arguments)) return false;
  auto id = j.find("id");
  if (id != j.end() && id->is_string()) call->id = id->get<std::string>();
  return true;
}

// A call's body (between its markers) -> its calls; false when it is not a well-formed call.
bool parse_body(Body kind, std::string_view body, std::vector<ParsedToolCall>* calls) {
  if (kind == Body::kNamedArgs) {
    const size_t args = body.find("[ARGS]");
    if (args == std::string_view::npos) return false;
    ParsedToolCall call;
    call.name = std::string(trim(body.substr(0, args)));
    if (!valid_name(call.name)) return false;
    const ojson j = ojson::parse(trim(body.substr(args + 6)), nullptr, false);
    if (j.is_discarded() || !arguments_text(j, &call.arguments)) return false;
    calls->push_back(std::move(call));
    return true;
  }
  const ojson j = ojson::parse(trim(body), nullptr, false);
  if (j.is_discarded()) return false;
  if (kind == Body::kArray) {
    if (!j.is_array() || j.empty()) return false;
    for (const ojson& e : j) {
      ParsedToolCall call;
      if (!call_of(e, &call)) return false;
      calls->push_back(std::move(call));
    }
    return true;
  }
  ParsedToolCall call;
  if (!call_of(j, &call)) return false;
  calls->push_back(std::move(call));
  return true;
}

// The longest tail of `s` that is a proper prefix of `marker`.
size_t marker_prefix_tail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(marker.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  const FormatRow* r = row_of(f);
  return r ? r->name : "none";
}

ToolFormat detect_tool_format(std::string_view src) {
  for (const FormatRow& r : kFormats) {
    const bool has_all = std::all_of(r.must.begin(), r.must.end(),
                                     [&](const char* m) { return src.find(m) != std::string_view::npos; });
    const bool has_none = std::none_of(r.must_not.begin(), r.must_not.end(),
                                       [&](const char* m) { return src.find(m) != std::string_view::npos; });
    if (has_all && has_none) return r.format;
  }
  return ToolFormat::kNone;
}

bool template_reads_tools(std::string_view src) { return src.find("tools") != std::string_view::npos; }

ToolCallParser::ToolCallParser(ToolFormat format) : format_(format) {}

void ToolCallParser::emit_text(std::string_view t, std::vector<ToolSegment>* out) {
  if (after_call_) {
    const FormatRow* row = row_of(format_);
    const std::string_view between = row ? row->between : "";
    while (!t.empty() && (is_space(t.front()) || between.find(t.front()) != std::string_view::npos))
      t.remove_prefix(1);
    if (t.empty()) return;
    after_call_ = false;
  }
  size_t last = t.size();
  while (last > 0 && is_space(t[last - 1])) --last;
  if (last == 0) {
    ws_.append(t);
    return;
  }
  std::string text = ws_;
  text.append(t.substr(0, last));
  ws_.assign(t.substr(last));
  only_calls_ = false;
  if (!out->empty() && !out->back().is_call) out->back().text += text;
  else out->push_back(ToolSegment{false, std::move(text), {}});
}

void ToolCallParser::emit_call(ParsedToolCall call, std::vector<ToolSegment>* out) {
  ws_.clear();
  after_call_ = true;
  out->push_back(ToolSegment{true, {}, std::move(call)});
}

bool ToolCallParser::scan_text(std::vector<ToolSegment>* out) {
  const FormatRow* row = row_of(format_);
  if (!row) {
    emit_text(buf_, out);
    buf_.clear();
    return false;
  }
  const std::string_view marker = row->start;
  size_t at = buf_.find(marker);
  size_t body = at == std::string::npos ? 0 : at + marker.size();
  if (row->bare_json_start && only_calls_ && ws_.find_first_not_of(" \t\r\n") == std::string::npos) {
    // Before any text: the first character that is neither whitespace nor a separator decides.
    const std::string skip = std::string(" \t\r\n") + (after_call_ ? row->between : "");
    const size_t first = buf_.find_first_not_of(skip);
    if (first != std::string::npos && buf_[first] == '{' && first < at) at = body = first;
  }
  if (at == std::string::npos) {
    const size_t keep = marker_prefix_tail(buf_, marker);
    emit_text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  emit_text(std::string_view(buf_).substr(0, at), out);
  buf_.erase(0, at);
  body -= at;
  in_call_ = true;
  body_begin_ = body;
  scanned_ = body;
  depth_ = 0;
  in_string_ = escape_ = started_ = false;
  return true;
}

void ToolCallParser::call_as_text(size_t body_end, std::vector<ToolSegment>* out) {
  emit_text(std::string_view(buf_).substr(0, body_end), out);
  buf_.erase(0, body_end);
  in_call_ = false;
}

bool ToolCallParser::scan_call(bool at_end, std::vector<ToolSegment>* out) {
  const FormatRow& row = *row_of(format_);
  const std::string_view end_marker = row.end;
  size_t body_end = std::string::npos, call_end = std::string::npos;
  bool failed = false;
  if (!end_marker.empty()) {
    const size_t e = buf_.find(end_marker, body_begin_);
    if (e != std::string::npos) body_end = e, call_end = e + end_marker.size();
    else if (at_end) body_end = call_end = buf_.size();  // the reply ended inside the call: parse what is there
  } else {
    size_t json_from = body_begin_;
    if (row.body == Body::kNamedArgs) {
      const size_t args = buf_.find("[ARGS]", body_begin_);
      // The name so far (less a tail that may begin [ARGS]) must be a name: an odd one is text, not a
      // call held until the reply ends.
      const std::string_view rest = std::string_view(buf_).substr(body_begin_);
      const size_t name_len = args != std::string::npos ? args - body_begin_
                                                        : rest.size() - marker_prefix_tail(rest, "[ARGS]");
      const std::string_view name = trim(rest.substr(0, name_len));
      if (!name.empty() && !valid_name(name)) failed = true;
      else if (args == std::string::npos && !at_end) return false;  // wait for [ARGS]
      else if (args == std::string::npos) failed = true;
      json_from = args == std::string::npos ? buf_.size() : args + 6;
      if (failed) scanned_ = buf_.size();
    }
    scanned_ = std::max(scanned_, json_from);
    const char open = row.body == Body::kArray ? '[' : '{';
    for (; !failed && scanned_ < buf_.size(); ++scanned_) {
      const char c = buf_[scanned_];
      if (!started_) {
        if (is_space(c)) continue;
        if (c != open) {
          failed = true;
          break;
        }
        started_ = true;
      }
      if (in_string_) {
        if (escape_) escape_ = false;
        else if (c == '\\') escape_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (c == '"') in_string_ = true;
      else if (c == '{' || c == '[') ++depth_;
      else if ((c == '}' || c == ']') && --depth_ == 0) {
        body_end = call_end = scanned_ + 1;
        break;
      }
    }
    // A failed call is text up to the character that broke it (which text mode reads again: it may start
    // a call, and releasing it alone could split a UTF-8 character).
    if (failed) body_end = std::min(scanned_, buf_.size());
    else if (body_end == std::string::npos && at_end) failed = true, body_end = buf_.size();
  }
  if (!failed && body_end == std::string::npos) return false;  // wait for more
  std::vector<ParsedToolCall> calls;
  if (failed || !parse_body(row.body, std::string_view(buf_).substr(body_begin_, body_end - body_begin_), &calls)) {
    call_as_text(failed ? body_end : call_end, out);
    return true;
  }
  for (ParsedToolCall& c : calls) emit_call(std::move(c), out);
  buf_.erase(0, call_end);
  in_call_ = false;
  return true;
}

std::vector<ToolSegment> ToolCallParser::push(std::string_view piece) {
  std::vector<ToolSegment> out;
  buf_.append(piece);
  for (;;) {
    if (in_call_ ? !scan_call(false, &out) : !scan_text(&out)) break;
  }
  return out;
}

std::vector<ToolSegment> ToolCallParser::flush() {
  std::vector<ToolSegment> out;
  for (;;) {
    if (in_call_) {
      scan_call(true, &out);
      continue;
    }
    if (!scan_text(&out)) break;
  }
  emit_text(buf_, &out);  // a held possible marker start: text after all
  buf_.clear();
  ws_.clear();
  return out;
}

std::string tool_call_id(ToolFormat format, const std::string& model_id, uint64_t random) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bool nemo = format == ToolFormat::kMistralNemo;
  if (nemo && model_id.size() == 9 &&
      std::all_of(model_id.begin(), model_id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    return model_id;
  std::string id = nemo ? "" : "call_";
  const int n = nemo ? 9 : 24;
  for (int i = 0; i < n; ++i) {  // splitmix64 steps from `random`
    random += 0x9E3779B97F4A7C15ull;
    uint64_t z = random;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id += kAlnum[(z ^ (z >> 31)) % 62];
  }
  return id;
}

ParsedReply parse_tool_reply(ToolFormat format, std::string_view reply) {
  ToolCallParser p(format);
  ParsedReply r;
  std::vector<ToolSegment> segs = p.push(reply);
  std::vector<ToolSegment> tail = p.flush();
  segs.insert(segs.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
  for (ToolSegment& s : segs) {
    if (s.is_call) r.calls.push_back(std::move(s.call));
    else r.content += s.text;
  }
  return r;
}

}  // namespace ferry::serve
