ferry_module(tensor DEPS base SOURCES
  tensor/dtype.cc
  tensor/tensor_view.cc
)
