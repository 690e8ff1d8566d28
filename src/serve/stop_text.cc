// StopText (stop_text.h). The held-back tail is never longer than the longest stop string, so each push
// costs O(stops x longest stop) beyond the piece itself.
#include "serve/stop_text.h"

#include <algorithm>

namespace ferry::serve {

StopText::StopText(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopText::push(std::string_view piece) {
  if (found_) return {};
  held_.append(piece);
  // A stop string that completed: the earliest one wins.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    found_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string. A stop string is valid UTF-8,
  // so such a tail starts on a character boundary and the released part stays valid UTF-8.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopText::flush() {
  std::string out;
  out.swap(held_);
  return found_ ? std::string() : out;
}

}  // namespace ferry::serve
