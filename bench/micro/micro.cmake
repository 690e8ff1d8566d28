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
# OpenBLAS comparison (bench_openblas): only when the Debian package is installed (apt libopenblas-dev).
find_library(FERRY_OPENBLAS NAMES openblas)
find_path(FERRY_CBLAS_INCLUDE cblas.h PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread)
if(benchmark_FOUND AND TARGET ferry_kernels_cpu AND FERRY_OPENBLAS AND FERRY_CBLAS_INCLUDE)
  add_executable(bench_openblas EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/micro/bench_openblas.cc)
  target_include_directories(bench_openblas PRIVATE ${FERRY_CBLAS_INCLUDE})
  target_link_libraries(bench_openblas PRIVATE ferry_kernels_cpu ferry_tensor ferry_base ${FERRY_OPENBLAS}
                        benchmark::benchmark)
  set_target_properties(bench_openblas PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
