ferry_module(engine DEPS model kernels_ref text format tensor base SOURCES
  engine/sampler.cc
  engine/generate.cc
)
