ferry_module(kernels_ref DEPS tensor base SOURCES
  kernels/ref/ref_ops.cc
)
