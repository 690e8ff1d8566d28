# test_model: ModelSpec / weight binding (model helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES model_spec_test.cc)
list(APPEND FERRY_TEST_DEPS model format tensor base)
list(APPEND FERRY_TEST_SOURCES test_synth.cc)
