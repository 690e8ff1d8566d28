ferry_module(tensor DEPS base SOURCES
  tensor/dtype.cc
  tensor/tensor_view.cc
  tensor/quant.cc
  tensor/quant_kquants.cc
  tensor/repack.cc
)
# The reference quantizers must reproduce ggml's float results bit for bit: no FMA contraction
# (clang contracts a*b+c by default; GCC does too in GNU modes or with -march flags).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/tensor/quant.cc ${CMAKE_SOURCE_DIR}/src/tensor/quant_kquants.cc
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
