ferry_module(format DEPS tensor base SOURCES
  format/gguf_value.cc
  format/gguf_reader.cc
  format/gguf_writer.cc
)
