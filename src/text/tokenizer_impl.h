// Internal: constructors of the two Tokenizer implementations (bpe.cc, spm.cc), used by make_tokenizer.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace ferry::text {

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(std::unique_ptr<Vocab> vocab,
                                                        std::vector<std::string> merges, PreInfo pre);
std::unique_ptr<Tokenizer> make_spm_tokenizer(std::unique_ptr<Vocab> vocab);

// The byte of a byte token "<0xXX>" (llama.cpp reads the two hex digits at offset 3), as a 1-byte string.
inline std::string byte_piece(const std::string& text) {
  if (text.size() < 5) return {};
  return std::string(1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
}

}  // namespace ferry::text
