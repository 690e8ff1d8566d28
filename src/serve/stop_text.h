// StopText: the text of one generation, cut at the first stop string. Pieces go in as the tokens
// produce them; what comes out is safe to show: text that cannot turn out to be the start of a stop
// string is released at once, a possible start is held back until it is decided. Once a stop string
// completes, everything from its first byte on is dropped (OpenAI's and llama-server's `stop`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::serve {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);

  // Adds generated text (valid UTF-8); returns the part now safe to show. After found(), returns "".
  std::string push(std::string_view piece);
  // The end of the generation: what was held back (no stop string completed).
  std::string flush();
  bool found() const { return found_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings
  std::string held_;                // not yet shown: a possible start of a stop string
  bool found_ = false;
};

}  // namespace ferry::serve
