ferry_module(base SOURCES
  base/status.cc
  base/mmap_file.cc
)
