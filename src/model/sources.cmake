ferry_module(model DEPS format tensor image base SOURCES
  model/model_spec.cc
  model/weights.cc
  model/sublayer.cc
  model/forward.cc
  model/synth.cc
  model/synth_vocab.cc
  model/synth_route_skew.cc
  model/vision/vision_model.cc
  model/vision/vision_input.cc
  model/vision/vision_forward.cc
  model/vision/synth_mmproj.cc
)
