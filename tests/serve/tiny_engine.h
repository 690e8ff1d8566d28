// The tiny test model (tests/model/tiny_model.h: a byte-level vocabulary of 300 tokens, random weights)
// written into a temporary folder and opened on the CPU, for the tests of constrained replies.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model_spec.h"
#include "model/tiny_model.h"

namespace ferry::serve {

inline Expected<std::unique_ptr<engine::Engine>> open_tiny_engine(const ferry::testing::TempDir& dir,
                                                                 const ferry::testing::TinyModel& m = {}) {
  const std::string path = dir.file("tiny.gguf");
  FERRY_RETURN_IF_ERROR(write_tiny_model(m, path));
  engine::EngineOptions eo;
  eo.model_path = path;
  eo.n_ctx = 512;
  eo.n_threads = 2;
  return engine::Engine::load(eo);
}

}  // namespace ferry::serve
