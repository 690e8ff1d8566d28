# test_kernels: RefOps against hand-computed values (model helper) and CpuOps against RefOps
# (CPU-kernel helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES ref_ops_test.cc)
list(APPEND FERRY_TEST_DEPS kernels_ref tensor base)
# CPU kernels (CPU-kernel helper): CpuOps at every dispatch level vs RefOps / quant references.
list(APPEND FERRY_TEST_SOURCES test_cpu_matmul.cc test_cpu_ops.cc test_cpu_thread_pool.cc)
list(APPEND FERRY_TEST_DEPS kernels_cpu)
include(${CMAKE_SOURCE_DIR}/bench/micro/micro.cmake OPTIONAL)
list(APPEND FERRY_TEST_SOURCES test_cpu_q4k_decode.cc)  # Q4_K AVX-512 decode kernel, long rows (h6)
