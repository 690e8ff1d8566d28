// Session: a model opened for serving, what `ferry serve` and `ferry chat` start from and what a library
// user would: runtime::open with one engine sequence per parallel request, the continuous-batching
// Scheduler over its engine, and the model's ChatFormatter.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/multimodal.h"
#include "image/image.h"
#include "runtime/runtime.h"
#include "serve/chat_format.h"
#include "serve/scheduler.h"

namespace ferry::serve {

struct SessionOptions {
  runtime::OpenOptions open;  // n_seq_max is set to scheduler.n_parallel
  SchedulerOptions scheduler;
  std::string chat_template;  // a Jinja chat template to use instead of the model's ("" = the model's)
};

class Session {
 public:
  // Errors: those of runtime::open, Scheduler::start and ChatFormatter::for_engine.
  static Expected<std::unique_ptr<Session>> open(SessionOptions options);
  ~Session();

  runtime::Runtime& runtime() { return *runtime_; }
  engine::Engine& engine() { return runtime_->engine(); }
  Scheduler& scheduler() { return *scheduler_; }
  const ChatFormatter& chat() const { return chat_; }

  // A conversation's prompt tokens (formatted by chat(), tokenized as tokenize_prompt does).
  Expected<std::vector<int32_t>> chat_prompt(text::ChatRequest request) const;

  // Images (vision-language models): the model's projector (an mmproj GGUF), on the runtime's device
  // under its budget (runtime::Runtime::open_vision). Errors: a file that is not this model's projector.
  Status open_vision(const std::string& mmproj_path);
  bool has_vision() const { return vision_ != nullptr; }
  // An image through the vision tower, between two of the scheduler's steps (the tower may use the
  // device the language model runs on). kInvalidArgument without open_vision.
  Expected<engine::EncodedImage> encode_image(const image::RgbImage& img);
  // A conversation with images: each engine::kImageMarker in its messages' text takes the next image, in
  // order (engine::multimodal_prompt), as the scheduler's PromptInput.
  Expected<PromptInput> chat_prompt(text::ChatRequest request, const std::vector<engine::EncodedImage>& images) const;

 private:
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<engine::VisionEncoder> vision_;  // destroyed after the scheduler, before the runtime
  std::unique_ptr<Scheduler> scheduler_;  // stopped before the runtime goes
  ChatFormatter chat_;
};

}  // namespace ferry::serve
