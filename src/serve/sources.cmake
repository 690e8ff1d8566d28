# serve: continuous batching over an Engine (the scheduler, its requests, stop strings, token choice),
# the OpenAI API's requests and responses as JSON, chat formatting and the server's metrics. The HTTP
# server itself (cpp-httplib) is ferry_serve_http, which only the ferry-serve binary links, so the
# ferry binary keeps no dependency beyond libc (docs/ARCHITECTURE.md §7).
ferry_module(serve DEPS engine model text format tensor base SOURCES
  serve/request.cc
  serve/stop_text.cc
  serve/token_choice.cc
  serve/scheduler.cc
)
