# Google Benchmark microbenchmarks of the CPU kernels (bench_cpu_kernels). Included from
# tests/kernels/tests.cmake (the top-level CMakeLists has no bench/ hook yet); built only on request:
#   ninja -C build bench_cpu_kernels && build/bench_cpu_kernels --benchmark_filter=matvec
find_package(benchmark QUIET)
if(benchmark_FOUND AND TARGET ferry_kernels_cpu)
  add_executable(bench_cpu_kernels EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/micro/bench_cpu_kernels.cc)
  target_compile_options(bench_cpu_kernels PRIVATE ${FERRY_WARN})
  target_link_libraries(bench_cpu_kernels PRIVATE ferry_kernels_cpu ferry_tensor ferry_base benchmark::benchmark)
  set_target_properties(bench_cpu_kernels PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
