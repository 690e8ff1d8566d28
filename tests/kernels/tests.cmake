# test_kernels: RefOps against hand-computed values (model helper) and CpuOps against RefOps
# (CPU-kernel helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES ref_ops_test.cc)
list(APPEND FERRY_TEST_DEPS kernels_ref tensor base)
