// Tokenizer::from_gguf and make_tokenizer: read the vocabulary, pick BPE or SentencePiece.
#include "text/tokenizer.h"

#include "format/gguf.h"
#include "text/tokenizer_impl.h"

namespace ferry::text {

Expected<std::unique_ptr<Tokenizer>> make_tokenizer(VocabData data) {
  if (data.model == "gpt2") {
    const std::optional<PreInfo> pre = pre_info_from_name(data.pre);
    if (!pre)
      return make_error(ErrorCode::kUnsupported,
                        "unsupported pre-tokenizer '%s' (tokenizer.ggml.pre); supported: default, "
                        "llama3/llama-bpe, qwen2, smollm, gpt-2 and their llama.cpp aliases",
                        data.pre.c_str());
    if (data.merges.empty())
      return make_error(ErrorCode::kCorrupt, "BPE vocabulary without tokenizer.ggml.merges");
    if (!data.add_bos) data.add_bos = pre->add_bos;
    std::vector<std::string> merges = std::move(data.merges);
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> vocab, Vocab::build(std::move(data), Vocab::Model::kBpe));
    return make_bpe_tokenizer(std::move(vocab), std::move(merges), *pre);
  }
  if (data.model == "llama") {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> vocab, Vocab::build(std::move(data), Vocab::Model::kSpm));
    return make_spm_tokenizer(std::move(vocab));
  }
  return make_error(ErrorCode::kUnsupported,
                    "unsupported tokenizer model '%s' (tokenizer.ggml.model); supported: gpt2 (byte-level "
                    "BPE), llama (SentencePiece)",
                    data.model.c_str());
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::ModelFile& file) {
  FERRY_ASSIGN_OR_RETURN(VocabData data, read_vocab_data(file));
  return make_tokenizer(std::move(data));
}

}  // namespace ferry::text
