// libFuzzer target for the chat-template interpreter: the input up to its first NUL byte is a template, the
// rest (if any) the messages JSON; a template that parses is rendered with that conversation (or a fixed one
// with a tool call). Any crash, leak, hang or UB report is a failure: hostile templates and messages must end
// in an error. Built only with -DFERRY_FUZZ=ON; run it like fuzz_gguf (scripts/fuzz_smoke.sh), with
// tests/fuzz/jinja.dict.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  auto tmpl = ferry::text::ChatTemplate::parse(input.substr(0, nul));
  if (!tmpl) return 0;
  ferry::text::ChatRequest req;
  req.bos_token = "<s>";
  if (nul != std::string_view::npos) {
    req.messages_json = std::string(input.substr(nul + 1));
  } else {
    req.messages_json =
        R"([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}, {"role": "assistant",)"
        R"( "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f",)"
        R"( "arguments": "{\"x\": [1, 2.5, null]}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}])";
    req.tools_json = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  }
  (void)tmpl->render(req);
  return 0;
}
