ferry_module(base SOURCES
  base/status.cc
)
