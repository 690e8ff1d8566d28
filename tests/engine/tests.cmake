# test_engine: sampler (generate helper) + engine tests (engine helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES test_sampler.cc test_generate.cc)
list(APPEND FERRY_TEST_DEPS engine)
list(APPEND FERRY_TEST_SOURCES engine_test.cc)
list(APPEND FERRY_TEST_SOURCES test_step_alloc.cc)
