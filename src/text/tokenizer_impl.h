// Internal: constructors of the two Tokenizer implementations (bpe.cc, spm.cc), used by make_tokenizer.
#pragma once

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

}  // namespace ferry::text
