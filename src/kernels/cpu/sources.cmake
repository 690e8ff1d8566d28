# kernels_cpu: CpuOps (SIMD + thread pool). The module is built for baseline x86-64; only the per-ISA
# kernel files get -m flags, and dispatch.cc picks among them at run time from cpuid. Never add
# -march=native here: the binary must run on any x86-64 machine.
set(FERRY_KCPU_ISA_SOURCES)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(FERRY_KCPU_ISA_SOURCES
    kernels/cpu/kernels_avx2.cc
    kernels/cpu/kernels_avx2_vnni.cc
    kernels/cpu/kernels_avx512.cc
    kernels/cpu/kernels_avx512_panel.cc
    kernels/cpu/kernels_avx512_kquants.cc
    kernels/cpu/kernels_avx512_legacy.cc
    kernels/cpu/kernels_amx.cc
  )
endif()
ferry_module(kernels_cpu DEPS tensor base SOURCES
  kernels/cpu/cpu_ops.cc
  kernels/cpu/matmul.cc
  kernels/cpu/matmul_id.cc
  kernels/cpu/attention.cc
  kernels/cpu/vision_ops.cc
  kernels/cpu/dispatch.cc
  kernels/cpu/membw.cc
  kernels/cpu/kernels_scalar.cc
  ${FERRY_KCPU_ISA_SOURCES}
)
# The activation quantizers must match ferry::quantize_row bit for bit: no contraction into FMAs.
target_compile_options(ferry_kernels_cpu PRIVATE -ffp-contract=off)
set(FERRY_KCPU_AVX2 -mavx2 -mfma -mf16c -mbmi2)
# -Wno-maybe-uninitialized: GCC 12 false positives inside avx512fintrin.h (_mm512_undefined_*).
set(FERRY_KCPU_AVX512 ${FERRY_KCPU_AVX2} -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
  -Wno-maybe-uninitialized)
# The VBMI kernels are installed only when cpuid reports AVX512_VBMI (fill_avx512_legacy checks).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx512_legacy.cc
  PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AVX512};-mavx512vbmi")
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx2.cc
  PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AVX2}")
# AVX-VNNI (VEX vpdpbusd): installed only when cpuid reports it (dispatch.cc, level avx2-vnni).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx2_vnni.cc
  PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AVX2};-mavxvnni")
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx512.cc
  ${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx512_panel.cc
  ${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_avx512_kquants.cc
  PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AVX512}")
# AMX-INT8 tile kernels: installed only when cpuid, XCR0 and the OS's permission allow (dispatch.cc).
set(FERRY_KCPU_AMX ${FERRY_KCPU_AVX512} -mamx-tile -mamx-int8 -mamx-bf16)
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cpu/kernels_amx.cc
  PROPERTIES COMPILE_OPTIONS "${FERRY_KCPU_AMX}")
