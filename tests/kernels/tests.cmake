# test_kernels: RefOps against hand-computed values (model helper) and CpuOps against RefOps
# (CPU-kernel helper). Append, keep the others' lines.
list(APPEND FERRY_TEST_SOURCES ref_ops_test.cc)
list(APPEND FERRY_TEST_DEPS kernels_ref tensor base)
# CPU kernels (CPU-kernel helper): CpuOps at every dispatch level vs RefOps / quant references.
list(APPEND FERRY_TEST_SOURCES test_cpu_matmul.cc test_cpu_ops.cc test_cpu_thread_pool.cc test_moe_ops.cc test_cpu_isa.cc)
list(APPEND FERRY_TEST_SOURCES test_cpu_token_groups.cc)  # batch-invariant numerics (serve helper)
list(APPEND FERRY_TEST_DEPS kernels_cpu)
include(${CMAKE_SOURCE_DIR}/bench/micro/micro.cmake OPTIONAL)
list(APPEND FERRY_TEST_SOURCES test_vision_ops.cc)  # rope_multi, attention_segments (vision-language models)
list(APPEND FERRY_TEST_SOURCES test_cpu_kquant_decode.cc)  # chunked Q4_K / Q5_K decode kernels, long rows
# AMX panel kernels (h-amx): against AVX-512 on real tiles where usable, and everywhere on emulated
# tiles (amx_emulated.cc recompiles kernels_amx.cc with the AVX-512 flags and software tiles).
if(FERRY_KCPU_ISA_SOURCES)
  list(APPEND FERRY_TEST_SOURCES test_cpu_amx.cc amx_emulated.cc)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/tests/kernels/amx_emulated.cc
    PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AVX512}")
endif()
if(FERRY_KCPU_ISA_SOURCES)
  # AMX vs AVX-512 prefill matmuls on llama3-8b shapes (bench/cpu/amx_check.sh runs it); on request only.
  add_executable(bench_amx_prefill EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/cpu/amx_prefill.cc)
  target_compile_options(bench_amx_prefill PRIVATE ${FERRY_WARN})
  target_link_libraries(bench_amx_prefill PRIVATE ferry_kernels_cpu ferry_tensor ferry_base)
  set_target_properties(bench_amx_prefill PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
