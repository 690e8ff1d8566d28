# test_model: ModelSpec / weight binding (model helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES model_spec_test.cc)
list(APPEND FERRY_TEST_DEPS model format tensor base)
list(APPEND FERRY_TEST_SOURCES test_synth.cc)
# Vision tower (vision helper): spec, input order, encoder on CpuOps vs RefOps.
list(APPEND FERRY_TEST_SOURCES test_vision.cc)
list(APPEND FERRY_TEST_DEPS kernels_ref kernels_cpu image)
