# kernels_cuda: CudaOps (src/kernels/cuda). Built only when CUDA is enabled (FERRY_HAVE_CUDA); the
# quant_units.h decoders are header-only and also tested on the host (tests/kernels/cuda).
ferry_module(kernels_cuda DEPS tensor base CUDA_SOURCES
  kernels/cuda/cuda_ops.cc
  kernels/cuda/cuda_ops_vision.cc
  kernels/cuda/matvec.cu
  kernels/cuda/convert.cu
  kernels/cuda/elementwise.cu
  kernels/cuda/attention.cu
  kernels/cuda/vision.cu
  kernels/cuda/moe.cu
  kernels/cuda/moe_matvec.cu
  kernels/cuda/moe_mma.cu
  kernels/cuda/cuda_ops_moe.cc
)
if(TARGET ferry_kernels_cuda)
  # CMake 3.25 has no nvcc flag for CUDA20 (CMAKE_CUDA_STANDARD 20 fails to configure); the .cu files need
  # only C++17.
  set_property(TARGET ferry_kernels_cuda PROPERTY CUDA_STANDARD 17)
endif()
