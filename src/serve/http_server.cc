// HttpServer (http_server.h): cpp-httplib's server with the routes, the API-key check, JSON errors for
// anything httplib answers itself (404, 413, ...), and the small endpoints (/health, /v1/models, /metrics).
#include "serve/http_server.h"

#include <sys/socket.h>

#include <ctime>

#include "serve/http_internal.h"
#include "serve/openai_response.h"

namespace ferry::serve {

namespace http {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

bool require_ready(State& st, httplib::Response& res) {
  if (st.ready.load(std::memory_order_acquire)) return true;
  ApiError e;
  e.status = 503;
  e.message = "the model is loading";
  e.type = "unavailable_error";
  send_error(res, e);
  return false;
}

}  // namespace http

namespace {

using http::State;

// Compares without an early exit, so the time taken does not tell how much of the key matched.
bool same_key(const std::string& given, const std::string& key) {
  if (given.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  return diff == 0;
}

// The endpoint a path counts under in /metrics: the known routes, everything else "other".
std::string endpoint_label(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == p || path == std::string(p).substr(3)) return p;
  return "other";
}

class HttpServerImpl final : public HttpServer {
 public:
  explicit HttpServerImpl(const HttpOptions& o) { st_.options = o; }

  Status init() {
    st_.started = static_cast<int64_t>(std::time(nullptr));
    const int threads = st_.options.threads;
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr_.set_payload_max_length(st_.options.max_body_bytes);
    svr_.set_keep_alive_max_count(100);
    routes();
    // cpp-httplib listens with its build's backlog (5 in Debian's library): when more clients connect at
    // once than that while the accept thread is busy, the kernel drops their SYNs and each retries after
    // a second or more. The socket httplib binds is recorded here (the callback runs on every socket it
    // tries, the bound one last) and listens again below with the system's largest backlog (Linux updates
    // the backlog of a listening socket).
    svr_.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_socket_ = sock;
    });
    port_ = st_.options.port == 0 ? svr_.bind_to_any_port(st_.options.host)
                                  : (svr_.bind_to_port(st_.options.host, st_.options.port) ? st_.options.port : -1);
    if (port_ <= 0)
      return make_error(ErrorCode::kIo, "cannot listen on %s:%d (address in use, or not an address of this machine)",
                        st_.options.host.c_str(), st_.options.port);
    if (listen_socket_ >= 0 && ::listen(listen_socket_, SOMAXCONN) != 0)
      return make_error(ErrorCode::kIo, "cannot listen on %s:%d with a backlog of %d", st_.options.host.c_str(), port_,
                        SOMAXCONN);
    return Status::ok();
  }

  int port() const override { return port_; }
  bool run() override { return svr_.listen_after_bind(); }
  void stop() override { svr_.stop(); }
  void set_model(ServedModel model) override {
    st_.model = std::move(model);
    st_.ready.store(true, std::memory_order_release);
  }

 private:
  void routes();

  State st_;
  httplib::Server svr_;
  int port_ = -1;
  int listen_socket_ = -1;  // the socket httplib bound (set by its socket-options callback)
};

void HttpServerImpl::routes() {
  State& st = st_;
  svr_.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) {
    if (st.options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.compare(0, prefix.size(), prefix) == 0 && same_key(auth.substr(prefix.size()), st.options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = 401;
    e.message = auth.empty() ? "missing API key: send \"Authorization: Bearer <key>\"" : "invalid API key";
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    http::send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Whatever httplib answers by itself (no route: 404; body too large: 413; ...) gets a JSON body too.
  svr_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    e.type = res.status == 404 ? "not_found_error" : "invalid_request_error";
    e.message = res.status == 404 ? "no endpoint " + req.method + " " + req.path
                : res.status == 413 ? "the request body is too large"
                                    : "bad request (HTTP " + std::to_string(res.status) + ")";
    http::send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what += std::string(": ") + ex.what();
    } catch (...) {
    }
    ApiError e;
    e.status = 500;
    e.message = what;
    e.type = "server_error";
    http::send_error(res, e);
  });
  svr_.set_logger([&st](const httplib::Request& req, const httplib::Response& res) {
    st.counters.count(endpoint_label(req.path), res.status);
  });

  auto health = [&st](const httplib::Request&, httplib::Response& res) {
    if (!http::require_ready(st, res)) return;
    res.set_content("{\"status\":\"ok\"}", "application/json");
  };
  auto models = [&st](const httplib::Request&, httplib::Response& res) {
    if (!http::require_ready(st, res)) return;
    res.set_content(dump(models_json(st.model.id, st.started, st.model.scheduler->ctx_per_request())),
                    "application/json");
  };
  auto metrics = [&st](const httplib::Request&, httplib::Response& res) {
    if (!http::require_ready(st, res)) return;
    const MemoryFigures mem = st.model.memory ? st.model.memory() : MemoryFigures{resident_bytes(), 0, 0};
    const Scheduler& s = *st.model.scheduler;
    res.set_content(prometheus_text(s.stats(), st.counters.snapshot(), mem, s.n_parallel(), s.ctx_per_request()),
                    "text/plain; version=0.0.4");
  };
  auto chat = [&st](const httplib::Request& req, httplib::Response& res) {
    http::handle_generate(st, Endpoint::kChat, req, res);
  };
  auto completions = [&st](const httplib::Request& req, httplib::Response& res) {
    http::handle_generate(st, Endpoint::kCompletions, req, res);
  };
  svr_.Get("/health", health);
  svr_.Get("/metrics", metrics);
  // The OpenAI paths, and the same without /v1 (as llama-server accepts them).
  for (const std::string prefix : {"/v1", ""}) {
    svr_.Get(prefix + "/models", models);
    svr_.Post(prefix + "/chat/completions", chat);
    svr_.Post(prefix + "/completions", completions);
  }
}

}  // namespace

Expected<std::unique_ptr<HttpServer>> HttpServer::bind(const HttpOptions& options) {
  if (options.threads < 1) return make_error(ErrorCode::kInvalidArgument, "the server needs at least one thread");
  auto s = std::make_unique<HttpServerImpl>(options);
  FERRY_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<HttpServer>(std::move(s));
}

}  // namespace ferry::serve
