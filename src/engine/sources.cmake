ferry_module(engine DEPS model kernels_ref kernels_cpu text image format tensor base SOURCES
  engine/sampler.cc
  engine/generate.cc
  engine/engine.cc
  engine/kv_cells.cc
  engine/step_runner.cc
  engine/huge_weights.cc
  engine/multimodal.cc
)
