// The OpenAI-compatible HTTP server (cpp-httplib): POST /v1/chat/completions and /v1/completions
// (server-sent events with "stream": true), GET /v1/models, /health and /metrics, optional Bearer-key
// authentication. It binds first and answers /health with 503 while the model loads; set_model() makes
// it serve. Bad requests get a 4xx JSON error in OpenAI's shape, a full queue 429; the server keeps
// serving. A streaming client that goes away cancels its request (its sequence is freed at the
// scheduler's next step); a client that stops reading is dropped after the write timeout.
//
// Built as ferry_serve_http, linked only into the ferry-serve binary: cpp-httplib from Debian is a
// shared library (with OpenSSL and zlib), which the travelling ferry binary must not need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/multimodal.h"
#include "image/image.h"
#include "serve/chat_format.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace ferry::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port (port() says which)
  std::string api_key;        // non-empty: every endpoint but /health needs "Authorization: Bearer <key>"
  int32_t threads = 16;       // connections served at once (each waiting request holds one)
  size_t max_body_bytes = 16u << 20;
};

// What the server serves once the model is loaded. Everything must outlive the server's run().
struct ServedModel {
  engine::Engine* engine = nullptr;
  Scheduler* scheduler = nullptr;
  const ChatFormatter* chat = nullptr;
  std::string id;                          // the model's name in /v1/models and responses
  std::function<MemoryFigures()> memory;   // for /metrics
  // Images in chat requests (a vision-language model served with --mmproj; empty: they get a 400).
  std::function<Expected<engine::EncodedImage>(const image::RgbImage&)> encode_image;
  // For tests (ferry serve --test-forced-reply): every chat reply is these tokens, then ends ("length").
  std::vector<int32_t> test_forced_reply;
};

class HttpServer {
 public:
  // Binds the address. Errors: kIo (address in use, not bindable).
  static Expected<std::unique_ptr<HttpServer>> bind(const HttpOptions& options);
  virtual ~HttpServer() = default;

  virtual int port() const = 0;
  // Serves until stop() (blocking); returns false when listening failed.
  virtual bool run() = 0;
  // From now on the endpoints serve `model` (before: 503 "loading").
  virtual void set_model(ServedModel model) = 0;
  // Stops run() (any thread).
  virtual void stop() = 0;
};

}  // namespace ferry::serve
