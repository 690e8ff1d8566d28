ferry_module(base SOURCES
  base/status.cc
  base/mmap_file.cc
  base/cpu_info.cc
  base/host_memory.cc
  base/thread_pool.cc
  base/env_options.cc
)
