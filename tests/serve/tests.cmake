# test_serve: the continuous-batching scheduler on tiny models (greedy tokens alone = batched, limits,
# cancel, queue), stop strings, JSON mode, GBNF grammars, and the OpenAI request parsing / response building.
set(FERRY_TEST_SOURCES test_scheduler.cc test_stop_text.cc test_openai_request.cc test_tool_calls.cc
  test_json_mode.cc test_grammar.cc)
set(FERRY_TEST_DEPS serve)
