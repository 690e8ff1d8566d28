# exec: devices (arena, streams, events, copies); the executor joins later.
set(FERRY_EXEC_DEPS tensor base)
if(FERRY_HAVE_CUDA)
  list(APPEND FERRY_EXEC_DEPS kernels_cuda)
endif()
ferry_module(exec DEPS ${FERRY_EXEC_DEPS} SOURCES
  exec/device.cc
  exec/device_arena.cc
  exec/device_emulated.cc
CUDA_SOURCES
  exec/device_cuda.cc
)
