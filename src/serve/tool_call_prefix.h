// Forced tool calls (`tool_choice` "required" or a named function): the reply is one call (or, with
// parallel_tool_calls, several) in the chat template's call format, each call's JSON one that names an
// allowed tool and gives it arguments its `parameters` schema accepts. ToolCallPrefix is the byte automaton
// TokenConstraint draws against: the format's opening marker, the call's JSON (JsonPrefix over the call
// schema), its closing marker, and then either the end or, when several are allowed, the next call.
// Formats: hermes (<tool_call>{"name", "arguments"}</tool_call>; the markers may be special tokens, whose
// text the constraint then sees: ChatFormatter::tool_marker_tokens) and llama3 (a bare {"name", "parameters"}
// object, one call). Not the Mistral formats (a JSON array of calls with ids; a name, then [ARGS]).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "base/status.h"
#include "serve/json_prefix.h"
#include "serve/tool_calls.h"

namespace ferry::serve {

struct ToolCallShape {
  std::string open, close;                 // around each call ("" for llama3)
  std::shared_ptr<const JsonSchema> call;  // one call: anyOf the allowed tools' {name, arguments}
  bool several = false;                    // more calls may follow the first
};

// The shape of a forced call in `format` among `tools` (the request's OpenAI tools array); `only`: the one
// tool the call must name ("" any). A tool whose parameters use a JSON Schema keyword ferry cannot keep
// gets any object as its arguments. Errors: a format without text markers, an unknown `only`.
Expected<std::shared_ptr<const ToolCallShape>> forced_tool_call(ToolFormat format, const nlohmann::json& tools,
                                                                const std::string& only, bool several);

class ToolCallPrefix {
 public:
  static constexpr int kMaxWhitespaceRun = 20;

  explicit ToolCallPrefix(std::shared_ptr<const ToolCallShape> shape);
  bool feed(uint8_t c);
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // At least one call is whole and none is open.
  bool can_end() const;
  // The reply's last call is whole (one call, or the calls of a format without markers).
  bool complete() const { return part_ == Part::kDone; }

 private:
  enum class Part : uint8_t { kOpen, kCall, kClose, kDone };
  void start_call();

  std::shared_ptr<const ToolCallShape> shape_;
  Part part_ = Part::kOpen;
  size_t pos_ = 0;  // kOpen / kClose: bytes of the marker matched
  int ws_run_ = 0;  // whitespace before a marker
  int calls_ = 0;   // calls completed
  JsonPrefix call_;
};

}  // namespace ferry::serve
