// The generation endpoints: parse and check the body, format the chat and tokenize, submit to the
// scheduler, then answer with one JSON body or stream server-sent events as the text becomes final.
#include <chrono>
#include <ctime>
#include <memory>

#include "engine/generate.h"
#include "serve/http_internal.h"
#include "serve/openai_response.h"
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

// A streamed request's state, shared by httplib's content provider and its releaser.
struct Stream {
  std::shared_ptr<Request> req;
  ResponseContext ctx;
  bool include_usage = false;
  bool first = true;
};

bool send_event(httplib::DataSink& sink, const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  return sink.write(event.data(), event.size());
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
  if ((!u.text.empty() || !u.logprobs.empty()) && !send_event(sink, dump(chunk_json(s.ctx, u.text, u.logprobs, false, nullptr))))
    return false;
  if (!u.finished) return true;
  if (u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled) {
    const std::string why = u.error.is_ok() ? "the request was cancelled" : u.error.message();
    if (!send_event(sink, dump(error_json(api_error(500, why, "server_error"))))) return false;
  } else {
    if (!send_event(sink, dump(chunk_json(s.ctx, "", {}, false, api_finish_reason(u.reason))))) return false;
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

  std::vector<int32_t> prompt;
  if (endpoint == Endpoint::kChat) {
    auto text = st.model.chat->format(std::move(a.chat));
    if (!text) {
      const bool unsupported = text.status().code() == ErrorCode::kUnsupported;
      ApiError e = api_error(400, text.status().message(), "invalid_request_error", unsupported ? "unsupported" : "");
      e.param = "messages";
      return send_error(res, e);
    }
    prompt = engine::tokenize_prompt(engine, *text);
  } else if (a.prompt_is_tokens) {
    prompt = std::move(a.prompt_tokens);
  } else {
    prompt = engine::tokenize_prompt(engine, a.prompt);
  }
  const int32_t limit = sched.ctx_per_request();
  if (static_cast<int32_t>(prompt.size()) >= limit) {
    ApiError e = api_error(400,
                           "this server's context is " + std::to_string(limit) + " tokens per request (prompt and " +
                               "reply), but the prompt has " + std::to_string(prompt.size()) +
                               " tokens: shorten it",
                           "invalid_request_error", "context_length_exceeded");
    e.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
    return send_error(res, e);
  }

  auto submitted = sched.submit(std::move(prompt), a.gen);
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
    res.set_content(dump(completion_json(ctx, all)), "application/json");
    return;
  }
  auto stream = std::make_shared<Stream>();
  stream->req = *submitted;
  stream->ctx = ctx;
  stream->include_usage = a.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream_step(*stream, sink); },
      [stream](bool success) {
        if (!success) stream->req->cancel();  // the client left or stopped reading
      });
}

}  // namespace ferry::serve::http
