// forced_tool_call and ToolCallPrefix (tool_call_prefix.h).
#include "serve/tool_call_prefix.h"

#include <nlohmann/json.hpp>

namespace ferry::serve {

using json = nlohmann::json;

Expected<std::shared_ptr<const ToolCallShape>> forced_tool_call(ToolFormat format, const json& tools,
                                                                const std::string& only, bool several) {
  auto shape = std::make_shared<ToolCallShape>();
  std::string args_key;
  switch (format) {
    case ToolFormat::kHermes:
      shape->open = "<tool_call>";
      shape->close = "</tool_call>";
      shape->several = several;
      args_key = "arguments";
      break;
    case ToolFormat::kLlama3:
      args_key = "parameters";
      break;
    default:
      return make_error(ErrorCode::kUnsupported,
                        "a forced tool call (tool_choice \"required\" or a named function) in the %s format is not "
                        "supported (only in the hermes and llama3 formats); use \"auto\"",
                        tool_format_name(format));
  }
  json alts = json::array();
  for (const json& t : tools) {
    const json& f = t.at("function");
    const std::string name = f.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    json params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json{{"type", "object"}};
    if (!JsonSchema::compile(params)) params = json{{"type", "object"}};  // a keyword ferry cannot keep
    alts.push_back({{"type", "object"},
                    {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                    {"required", {"name", args_key}},
                    {"additionalProperties", false}});
  }
  if (alts.empty())
    return make_error(ErrorCode::kInvalidArgument, "tool_choice names the function '%s', which is not among the tools",
                      only.c_str());
  FERRY_ASSIGN_OR_RETURN(shape->call, JsonSchema::compile(alts.size() == 1 ? alts[0] : json{{"anyOf", alts}}));
  return std::shared_ptr<const ToolCallShape>(std::move(shape));
}

ToolCallPrefix::ToolCallPrefix(std::shared_ptr<const ToolCallShape> shape) : shape_(std::move(shape)) {
  if (shape_->open.empty()) start_call();
}

void ToolCallPrefix::start_call() {
  part_ = Part::kCall;
  call_ = JsonPrefix(shape_->call);
}

bool ToolCallPrefix::feed(uint8_t c) {
  const bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r';
  switch (part_) {
    case Part::kOpen:
    case Part::kClose: {
      const std::string& marker = part_ == Part::kOpen ? shape_->open : shape_->close;
      if (pos_ == 0 && ws) return ++ws_run_ <= kMaxWhitespaceRun;
      if (c != static_cast<uint8_t>(marker[pos_])) return false;
      if (++pos_ < marker.size()) return true;
      pos_ = 0;
      ws_run_ = 0;
      if (part_ == Part::kOpen) {
        start_call();
      } else {
        ++calls_;
        part_ = shape_->several ? Part::kOpen : Part::kDone;
      }
      return true;
    }
    case Part::kCall:
      if (!call_.feed(c)) return false;
      if (call_.complete()) {
        if (shape_->close.empty()) {
          ++calls_;
          part_ = Part::kDone;
        } else {
          part_ = Part::kClose;
        }
      }
      return true;
    case Part::kDone:
      return false;
  }
  return false;
}

bool ToolCallPrefix::can_end() const { return part_ == Part::kDone || (part_ == Part::kOpen && pos_ == 0 && calls_ > 0); }

}  // namespace ferry::serve
