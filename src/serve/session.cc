// Session (session.h).
#include "serve/session.h"

#include "engine/generate.h"

namespace ferry::serve {

Expected<std::unique_ptr<Session>> Session::open(SessionOptions options) {
  options.open.n_seq_max = options.scheduler.n_parallel;
  auto s = std::unique_ptr<Session>(new Session());
  FERRY_ASSIGN_OR_RETURN(s->runtime_, runtime::open(options.open));
  FERRY_ASSIGN_OR_RETURN(s->chat_, ChatFormatter::for_engine(s->runtime_->engine(), options.chat_template));
  FERRY_ASSIGN_OR_RETURN(s->scheduler_, Scheduler::start(s->runtime_->engine(), options.scheduler));
  return s;
}

Session::~Session() {
  scheduler_.reset();
  vision_.reset();
}

Expected<std::vector<int32_t>> Session::chat_prompt(text::ChatRequest request) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, chat_.format(std::move(request)));
  return engine::tokenize_prompt(runtime_->engine(), text);
}

Status Session::open_vision(const std::string& mmproj_path) {
  FERRY_ASSIGN_OR_RETURN(vision_, runtime_->open_vision(mmproj_path));
  return Status::ok();
}

Expected<engine::EncodedImage> Session::encode_image(const image::RgbImage& img) {
  if (!vision_) return make_error(ErrorCode::kInvalidArgument, "images need a vision tower: give the model's --mmproj");
  Expected<engine::EncodedImage> out = make_error(ErrorCode::kInternal, "the image was not encoded");
  FERRY_RETURN_IF_ERROR(scheduler_->run_between_steps([&] {
    out = vision_->encode(img);
    return Status::ok();
  }));
  return out;
}

Expected<PromptInput> Session::chat_prompt(text::ChatRequest request,
                                           const std::vector<engine::EncodedImage>& images) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, chat_.format(std::move(request)));
  size_t markers = 0;
  for (size_t at = 0; (at = text.find(engine::kImageMarker, at)) != std::string::npos; at += engine::kImageMarker.size())
    ++markers;
  if (markers != images.size())  // multimodal_prompt would put unmarked images in front of the template's text
    return make_error(ErrorCode::kInvalidArgument, "the conversation has %zu image markers (%s) for %zu images",
                      markers, std::string(engine::kImageMarker).c_str(), images.size());
  FERRY_ASSIGN_OR_RETURN(engine::PromptRows rows, engine::multimodal_prompt(runtime_->engine(), text, images));
  return prompt_input(rows, runtime_->engine().spec().n_embd);
}

}  // namespace ferry::serve
