ferry_module(model DEPS format tensor base SOURCES
  model/model_spec.cc
  model/weights.cc
  model/sublayer.cc
  model/forward.cc
  model/synth.cc
  model/synth_route_skew.cc
)
