# exec: devices (arena, streams, events, copies); the executor joins later.
set(FERRY_EXEC_DEPS tensor base)
if(FERRY_HAVE_CUDA)
  list(APPEND FERRY_EXEC_DEPS kernels_cuda)
endif()
ferry_module(exec DEPS ${FERRY_EXEC_DEPS} SOURCES
  exec/device.cc
  exec/device_arena.cc
  exec/device_emulated.cc
  exec/process_memory.cc
CUDA_SOURCES
  exec/device_cuda.cc
)

# exec_hybrid: the pipelined-sharding executor (HybridRunner, WeightRing) over the devices above.
ferry_module(exec_hybrid DEPS exec plan model kernels_cpu tensor base SOURCES
  exec/weight_ring.cc
  exec/hybrid_runner.cc
  exec/hybrid_weights.cc
  exec/hybrid_schedule.cc
  exec/hybrid_graphs.cc
  exec/hybrid_slices.cc
  exec/hybrid_moe.cc
  exec/hybrid_expert_cache.cc
  exec/expert_cache.cc
  exec/hybrid_stats.cc
  exec/hybrid_vision.cc
  exec/timeline.cc
)

# exec_probe: the CUDA GpuProber `ferry profile` measures the GPU with (plain C++ over Device and
# CudaOpsBundle; in a build without CUDA its factory reports "no usable CUDA GPU").
ferry_module(exec_probe DEPS exec plan tensor base SOURCES
  exec/gpu_prober_cuda.cc
)
