// Shared by the HTTP server's files (http_server.cc: setup, routes, auth, the small endpoints;
// http_generate.cc: the two generation endpoints). Private to ferry_serve_http.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "serve/http_server.h"
#include "serve/openai_request.h"

namespace ferry::serve::http {

struct State {
  HttpOptions options;
  std::atomic<bool> ready{false};  // set after `model` is
  ServedModel model;
  HttpCounters counters;
  std::atomic<int64_t> next_id{1};
  int64_t started = 0;             // Unix seconds

  std::mutex seed_mu;
  std::mt19937_64 seed_rng{std::random_device{}()};
  uint64_t random_seed() {
    std::lock_guard<std::mutex> lock(seed_mu);
    return seed_rng();
  }
};

// Writes an API error as the response (status and OpenAI's error JSON).
void send_error(httplib::Response& res, const ApiError& e);
// 503 while the model loads; false when the request was answered so.
bool require_ready(State& st, httplib::Response& res);

// POST /v1/chat/completions and /v1/completions.
void handle_generate(State& st, Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

}  // namespace ferry::serve::http
