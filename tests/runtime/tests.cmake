# test_runtime: runtime::open (the library entry point) on the CPU and the emulated GPU: the process
# budget's split (the planner gets budget - context - reserve), the minimum-budget errors, device
# resolution, the modelled process memory. Runs in CI.
set(FERRY_TEST_SOURCES test_runtime.cc)
set(FERRY_TEST_DEPS runtime)

# examples/generate.cc, a program over the public headers only: the bundled SmolLM2 on the CPU and on
# the emulated GPU under a 1 GiB budget must both run and print the same greedy text.
add_test(NAME example_generate
         COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:example_generate>
                 -DMODEL=${CMAKE_SOURCE_DIR}/models/smollm2-135m-instruct-q4_1.gguf
                 -DPROFILE=${CMAKE_SOURCE_DIR}/tests/data/profiles/h200-host-measured.json
                 -P ${CMAKE_SOURCE_DIR}/tests/runtime/example_generate.cmake)
set_tests_properties(example_generate PROPERTIES LABELS unit TIMEOUT 300)
