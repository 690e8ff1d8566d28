# GGUF format tests (unit) and the gguf_dump helper used by tests/python/test_gguf_compat.py.
set(FERRY_TEST_SOURCES
  gguf_roundtrip_test.cc
  gguf_bad_input_test.cc
)
set(FERRY_TEST_DEPS format tensor base)

add_executable(gguf_dump ${CMAKE_CURRENT_LIST_DIR}/gguf_dump.cc)
target_compile_options(gguf_dump PRIVATE ${FERRY_WARN})
target_link_libraries(gguf_dump PRIVATE ferry_format nlohmann_json::nlohmann_json)
set_target_properties(gguf_dump PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
