// The generation endpoints: parse and check the body, format the chat and tokenize, submit to the
// scheduler, then answer with one JSON body or stream server-sent events as the text becomes final (with
// tools, the reply goes through the template format's ToolCallParser into text and tool calls).
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>

#include "engine/generate.h"
#include "engine/multimodal.h"
#include "image/image.h"
#include "serve/http_internal.h"
#include "serve/openai_response.h"
#include "serve/tool_call_prefix.h"
#include "serve/tool_calls.h"
#include "text/tokenizer.h"

namespace ferry::serve::http {

namespace {

using json = nlohmann::json;

// How often a streaming request with nothing new checks that its client is still there.
constexpr auto kPollInterval = std::chrono::milliseconds(100);

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

bool send_event(httplib::DataSink& sink, const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  return sink.write(event.data(), event.size());
}

// A request's tool calls: the reply's parser, and the ids of the calls it finds.
struct ToolState {
  ToolFormat format = ToolFormat::kNone;
  bool parallel = true;  // false: calls after the first are dropped
  uint64_t random = 0;   // for the calls' ids
  int n_calls = 0;

  // Keeps the calls the request allows, each with its id.
  bool take(ParsedToolCall* call) {
    if (!parallel && n_calls > 0) return false;
    call->id = tool_call_id(format, call->id, random + static_cast<uint64_t>(n_calls) * 0x100000001B3ull);
    ++n_calls;
    return true;
  }
};

// A streamed request's state, shared by httplib's content provider and its releaser.
struct Stream {
  std::shared_ptr<Request> req;
  ResponseContext ctx;
  bool include_usage = false;
  bool first = true;
  std::optional<ToolCallParser> parser;  // a chat request with tools
  ToolState tools;
};

// A streamed chat reply with tools: its new segments as chunks (text as content deltas, each call as an
// opening chunk and an arguments chunk); the new tokens' logprobs ride on the first chunk.
bool send_segments(Stream& s, httplib::DataSink& sink, std::vector<ToolSegment> segs, std::vector<TokenLogprob> lps) {
  for (ToolSegment& seg : segs) {
    if (seg.is_call) {
      if (!s.tools.take(&seg.call)) continue;
      const int index = s.tools.n_calls - 1;
      if (!send_event(sink, dump(tool_call_chunk_json(s.ctx, index, seg.call, true))) ||
          !send_event(sink, dump(tool_call_chunk_json(s.ctx, index, seg.call, false))))
        return false;
    } else if (!seg.text.empty()) {
      if (!send_event(sink, dump(chunk_json(s.ctx, seg.text, lps, false, nullptr)))) return false;
      lps.clear();
    }
  }
  return lps.empty() || send_event(sink, dump(chunk_json(s.ctx, "", lps, false, nullptr)));
}


// One call of the content provider: waits briefly for news and writes it as events. Returns false to
// drop the connection (the client is gone; the releaser cancels the request).
bool stream_step(Stream& s, httplib::DataSink& sink) {
  if (s.first) {
    s.first = false;
    if (s.ctx.endpoint == Endpoint::kChat && !send_event(sink, dump(chunk_json(s.ctx, "", {}, true, nullptr))))
      return false;
  }
  RequestUpdate u;
  if (!s.req->wait(&u, kPollInterval)) return sink.is_writable();
  if (s.parser) {
    std::vector<ToolSegment> segs = s.parser->push(u.text);
    if (u.finished) {
      std::vector<ToolSegment> tail = s.parser->flush();
      segs.insert(segs.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
    }
    if (!send_segments(s, sink, std::move(segs), std::move(u.logprobs))) return false;
  } else if ((!u.text.empty() || !u.logprobs.empty()) &&
             !send_event(sink, dump(chunk_json(s.ctx, u.text, u.logprobs, false, nullptr)))) {
    return false;
  }
  if (!u.finished) return true;
  if (u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled) {
    const std::string why = u.error.is_ok() ? "the request was cancelled" : u.error.message();
    if (!send_event(sink, dump(error_json(api_error(500, why, "server_error"))))) return false;
  } else {
    const char* reason = s.tools.n_calls > 0 ? "tool_calls" : api_finish_reason(u.reason);
    if (!send_event(sink, dump(chunk_json(s.ctx, "", {}, false, reason)))) return false;
    if (s.include_usage &&
        !send_event(sink, dump(usage_chunk_json(s.ctx, u.prompt_tokens, u.completion_tokens))))
      return false;
  }
  if (!send_event(sink, "[DONE]")) return false;
  sink.done();
  return true;
}

}  // namespace

void handle_generate(State& st, Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  if (!require_ready(st, res)) return;
  auto parsed = parse_api_request(endpoint, req.body, st.random_seed());
  if (auto* err = std::get_if<ApiError>(&parsed)) return send_error(res, *err);
  ApiRequest& a = std::get<ApiRequest>(parsed);
  const engine::Engine& engine = *st.model.engine;
  Scheduler& sched = *st.model.scheduler;

  ToolState tools;
  if (a.tools) {
    const std::string refusal = st.model.chat->tools_refusal(st.model.id);
    if (!refusal.empty()) {
      ApiError e = api_error(400, refusal, "invalid_request_error", "unsupported");
      e.param = "tools";
      return send_error(res, e);
    }
    tools.format = st.model.chat->tool_format();
    tools.parallel = a.parallel_tool_calls;
    a.gen.shown_special = st.model.chat->tool_marker_tokens();
    tools.random = st.random_seed();
    if (!a.forced_tool.empty()) {  // tool_choice "required" or a named function: the reply is a call
      if (a.gen.grammar != nullptr || a.gen.json_schema != nullptr) {
        ApiError e = api_error(400, "a forced tool call cannot be combined with grammar or a JSON response_format",
                               "invalid_request_error");
        e.param = "tool_choice";
        return send_error(res, e);
      }
      auto shape = forced_tool_call(tools.format, nlohmann::json::parse(a.chat.tools_json),
                                    a.forced_tool == "*" ? std::string() : a.forced_tool, a.parallel_tool_calls);
      if (!shape) {
        const bool unsupported = shape.status().code() == ErrorCode::kUnsupported;
        ApiError e = api_error(400, shape.status().message(), "invalid_request_error", unsupported ? "unsupported" : "");
        e.param = "tool_choice";
        return send_error(res, e);
      }
      a.gen.tool_call = std::move(shape).value();
    }
  }
  if (endpoint == Endpoint::kChat && !st.model.test_forced_reply.empty()) {
    a.gen.forced_tokens = st.model.test_forced_reply;
    a.gen.max_tokens = static_cast<int32_t>(a.gen.forced_tokens.size());
  }

  PromptInput prompt;
  if (endpoint == Endpoint::kChat) {
    auto text = st.model.chat->format(std::move(a.chat));
    if (!text) {
      const bool unsupported = text.status().code() == ErrorCode::kUnsupported;
      ApiError e = api_error(400, text.status().message(), "invalid_request_error", unsupported ? "unsupported" : "");
      e.param = "messages";
      return send_error(res, e);
    }
    if (a.images.empty()) {
      prompt.tokens = engine::tokenize_prompt(engine, *text);
    } else {  // each image part left a marker in the text: decode, encode, and place them
      ApiError bad = api_error(400, "", "invalid_request_error");
      bad.param = "messages";
      if (!st.model.encode_image) {
        bad.message = "this server has no vision tower: images need a vision-language model served with --mmproj";
        bad.code = "unsupported";
        return send_error(res, bad);
      }
      std::vector<engine::EncodedImage> images;
      for (size_t i = 0; i < a.images.size(); ++i) {
        auto rgb = image::decode(reinterpret_cast<const uint8_t*>(a.images[i].data()), a.images[i].size(),
                                 "image " + std::to_string(i + 1));
        if (!rgb) {
          bad.message = rgb.status().message();
          return send_error(res, bad);
        }
        auto enc = st.model.encode_image(*rgb);
        if (!enc) return send_error(res, api_error(500, enc.status().message(), "server_error"));
        images.push_back(std::move(*enc));
      }
      auto rows = engine::multimodal_prompt(engine, *text, images);
      if (!rows) {
        bad.message = rows.status().message();
        return send_error(res, bad);
      }
      prompt = prompt_input(*rows, engine.spec().n_embd);
    }
  } else if (a.prompt_is_tokens) {
    prompt.tokens = std::move(a.prompt_tokens);
  } else {
    prompt.tokens = engine::tokenize_prompt(engine, a.prompt);
  }
  const int32_t limit = sched.ctx_per_request();
  if (static_cast<int32_t>(prompt.tokens.size()) >= limit) {
    ApiError e = api_error(400,
                           "this server's context is " + std::to_string(limit) + " tokens per request (prompt and " +
                               "reply), but the prompt has " + std::to_string(prompt.tokens.size()) +
                               " tokens" + (prompt.embd.empty() ? "" : " (images included)") + ": shorten it",
                           "invalid_request_error", "context_length_exceeded");
    e.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
    return send_error(res, e);
  }

  auto submitted = sched.submit_prompt(std::move(prompt), a.gen);
  if (!submitted) {
    const Status& s = submitted.status();
    if (s.code() == ErrorCode::kBusy)
      return send_error(res, api_error(429, "the server is busy: " + s.message() + "; retry later", "server_busy",
                                       "queue_full"));
    ApiError e = api_error(400, s.message(), "invalid_request_error");
    e.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
    return send_error(res, e);
  }

  ResponseContext ctx;
  ctx.endpoint = endpoint;
  ctx.id = std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(st.next_id++);
  ctx.created = static_cast<int64_t>(std::time(nullptr));
  ctx.model = st.model.id;
  ctx.logprobs = a.logprobs;
  ctx.tokenizer = &engine.tokenizer();

  if (!a.stream) {
    // cpp-httplib 0.11 does not tell a handler that its client left, so a non-streamed request runs to
    // its end (max_tokens or the request's context) even then.
    const RequestUpdate all = (*submitted)->wait_all();
    if (all.reason == FinishReason::kError || all.reason == FinishReason::kCancelled)
      return send_error(res, api_error(all.reason == FinishReason::kError ? 500 : 503,
                                       all.error.is_ok() ? "the request was cancelled" : all.error.message(),
                                       "server_error"));
    if (!a.tools) return res.set_content(dump(completion_json(ctx, all)), "application/json");
    ParsedReply reply = parse_tool_reply(tools.format, all.text);
    std::vector<ParsedToolCall> kept;
    for (ParsedToolCall& c : reply.calls)
      if (tools.take(&c)) kept.push_back(std::move(c));
    reply.calls = std::move(kept);
    res.set_content(dump(completion_json(ctx, all, &reply)), "application/json");
    return;
  }
  auto stream = std::make_shared<Stream>();
  stream->req = *submitted;
  stream->ctx = ctx;
  stream->include_usage = a.include_usage;
  if (a.tools) stream->parser.emplace(tools.format);
  stream->tools = tools;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream_step(*stream, sink); },
      [stream](bool success) {
        if (!success) stream->req->cancel();  // the client left or stopped reading
      });
}

}  // namespace ferry::serve::http
