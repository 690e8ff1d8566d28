# serve: continuous batching over an Engine (the scheduler, its requests, stop strings, token choice),
# the OpenAI API's requests and responses as JSON, chat formatting and the server's metrics. The HTTP
# server itself (cpp-httplib) is ferry_serve_http, which only the ferry-serve binary links, so the
# ferry binary keeps no dependency beyond libc (docs/ARCHITECTURE.md §7).
ferry_module(serve DEPS runtime engine model image text format tensor base SOURCES
  serve/request.cc
  serve/stop_text.cc
  serve/tool_calls.cc
  serve/json_schema.cc
  serve/json_prefix.cc
  serve/gbnf.cc
  serve/grammar_prefix.cc
  serve/tool_call_prefix.cc
  serve/token_constraint.cc
  serve/token_choice.cc
  serve/scheduler.cc
  serve/chat_format.cc
  serve/openai_request.cc
  serve/openai_response.cc
  serve/metrics.cc
  serve/session.cc
)

# The HTTP server: cpp-httplib (Debian's libcpp-httplib-dev, a shared library with OpenSSL, zlib and
# brotli) through pkg-config. Not a ferry_module, so ferry_all (what the ferry binary links) leaves it out.
pkg_check_modules(CPPHTTPLIB IMPORTED_TARGET cpp-httplib)
if(CPPHTTPLIB_FOUND)
  add_library(ferry_serve_http STATIC ${CMAKE_SOURCE_DIR}/src/serve/http_server.cc
                                      ${CMAKE_SOURCE_DIR}/src/serve/http_generate.cc)
  target_include_directories(ferry_serve_http PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(ferry_serve_http PRIVATE ${FERRY_WARN})
  target_link_libraries(ferry_serve_http PUBLIC ferry_serve PkgConfig::CPPHTTPLIB)
else()
  message(STATUS "ferry: ferry-serve off (cpp-httplib not found: scripts/setup.sh installs libcpp-httplib-dev)")
endif()
