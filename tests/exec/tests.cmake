# test_exec: devices (arena, emulated device) and the host checks of the CUDA quant decoders; runs in CI.
set(FERRY_TEST_SOURCES
  device_emulated_test.cc
  ../kernels/cuda/quant_units_test.cc
)
set(FERRY_TEST_DEPS exec tensor base)

# test_executor.cc: HybridRunner on the emulated device vs the all-CPU runner (tiny models, all archs).
list(APPEND FERRY_TEST_SOURCES test_executor.cc)
# test_executor_moe.cc: mixture-of-experts layers (router, expert groups) at every placement, vs the CPU path.
list(APPEND FERRY_TEST_SOURCES test_executor_moe.cc)
# test_expert_cache.cc: the hot-expert cache's table and geometry, and cached experts at run time vs the CPU path.
list(APPEND FERRY_TEST_SOURCES test_expert_cache.cc)
# test_executor_vision.cc: images through HybridRunner::encode_image and image steps, vs the CPU path.
list(APPEND FERRY_TEST_SOURCES test_executor_vision.cc)
list(APPEND FERRY_TEST_DEPS exec_hybrid engine plan model kernels_cpu format)
list(APPEND FERRY_TEST_SOURCES test_timeline.cc)

# GPU-only binaries (built with CUDA, run on the GPU host by bench/device/check_cuda.sh).
if(FERRY_HAVE_CUDA)
  add_executable(test_cuda_ops
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_ops_test.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_vision_test.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_moe_test.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_gptoss_test.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_moe_mma_test.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_test_util.cc
  )
  target_include_directories(test_cuda_ops PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_cuda_ops PRIVATE ferry_exec ferry_kernels_cuda ferry_kernels_ref ferry_tensor ferry_base
                        GTest::gtest GTest::gtest_main)
  set_target_properties(test_cuda_ops PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

  add_executable(bench_cuda_ops
    ${CMAKE_SOURCE_DIR}/bench/device/bench_cuda_ops.cc
    ${CMAKE_SOURCE_DIR}/tests/kernels/cuda/cuda_test_util.cc
  )
  target_include_directories(bench_cuda_ops PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(bench_cuda_ops PRIVATE ferry_exec ferry_kernels_cuda ferry_tensor ferry_base)
  set_target_properties(bench_cuda_ops PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

  # Issue 4's probe of where the Q4 decode matvecs lose bandwidth (bench/device/mv_probe.cu; not a test).
  add_executable(mv_probe ${CMAKE_SOURCE_DIR}/bench/device/mv_probe.cu)
  target_include_directories(mv_probe PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(mv_probe PRIVATE ferry_kernels_cuda ferry_tensor ferry_base)
  set_property(TARGET mv_probe PROPERTY CUDA_STANDARD 17)
  set_target_properties(mv_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
