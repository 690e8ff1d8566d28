// Session (session.h).
#include "serve/session.h"

#include "engine/generate.h"

namespace ferry::serve {

Expected<std::unique_ptr<Session>> Session::open(SessionOptions options) {
  options.open.n_seq_max = options.scheduler.n_parallel;
  auto s = std::unique_ptr<Session>(new Session());
  FERRY_ASSIGN_OR_RETURN(s->runtime_, runtime::open(options.open));
  FERRY_ASSIGN_OR_RETURN(s->chat_, ChatFormatter::for_engine(s->runtime_->engine()));
  FERRY_ASSIGN_OR_RETURN(s->scheduler_, Scheduler::start(s->runtime_->engine(), options.scheduler));
  return s;
}

Session::~Session() { scheduler_.reset(); }

Expected<std::vector<int32_t>> Session::chat_prompt(text::ChatRequest request) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, chat_.format(std::move(request)));
  return engine::tokenize_prompt(runtime_->engine(), text);
}

}  // namespace ferry::serve
