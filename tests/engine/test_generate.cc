// generate() over a fake Engine whose "model" predicts (last token + 1) mod n_vocab: checks chunked
// prefill (positions, sequence, which rows ask for logits), the number and order of logits rows, the
// stop conditions (n_predict, end-of-generation token, full context), UTF-8 streaming of pieces split
// across tokens, and the chat-template wrapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/generate.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "text/tokenizer.h"

namespace ferry::engine {
namespace {

constexpr int32_t kVocab = 16;
constexpr int32_t kEos = 15;

// Token t renders as a letter, except 5 and 6: the two halves of "é" (0xC3 0xA9).
class FakeTokenizer final : public text::Tokenizer {
 public:
  std::vector<text::Token> encode(std::string_view text, bool add_special, bool) const override {
    std::vector<text::Token> ids;
    if (add_special) ids.push_back(1);
    for (char c : text) ids.push_back(static_cast<unsigned char>(c) % 10 + 2);
    return ids;
  }
  std::string token_to_piece(text::Token id, bool) const override {
    if (id == 5) return "\xC3";
    if (id == 6) return "\xA9";
    return std::string(1, static_cast<char>('a' + id));
  }
  int32_t vocab_size() const override { return kVocab; }
  const text::SpecialTokens& special() const override { return special_; }
  bool is_eog(text::Token id) const override { return id == kEos; }

  text::SpecialTokens special_;
};

class FakeEngine final : public Engine {
 public:
  FakeEngine(int32_t n_ctx, int32_t n_batch, std::unique_ptr<gguf::ModelFile> file, model::Arch arch)
      : file_(std::move(file)) {
    spec_.n_vocab = kVocab;
    spec_.arch = arch;
    options_.n_ctx = n_ctx;
    options_.n_batch = n_batch;
  }
  const model::ModelSpec& spec() const override { return spec_; }
  const text::Tokenizer& tokenizer() const override { return tok_; }
  const gguf::ModelFile& file() const override { return *file_; }
  const EngineOptions& options() const override { return options_; }
  int32_t n_ctx() const override { return options_.n_ctx; }
  int32_t seq_next_pos(int32_t) const override { return next_pos_; }
  void seq_rm(int32_t, int32_t, int32_t) override {
    next_pos_ = 0;
    ++clears_;
  }
  Status step(const Batch& b, std::vector<float>* logits) override {
    batches_.push_back(b);
    for (int32_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b.pos[i], next_pos_) << "positions must be consecutive";
      ++next_pos_;
      if (!b.logits[i]) continue;
      for (int32_t v = 0; v < kVocab; ++v) logits->push_back(v == (b.tokens[i] + 1) % kVocab ? 5.0f : 0.0f);
    }
    return Status::ok();
  }

  void set_n_embd(int32_t d) { spec_.n_embd = d; }
  FakeTokenizer& fake_tokenizer() { return tok_; }

  std::vector<Batch> batches_;
  int clears_ = 0;

 private:
  model::ModelSpec spec_;
  EngineOptions options_;
  FakeTokenizer tok_;
  std::unique_ptr<gguf::ModelFile> file_;
  int32_t next_pos_ = 0;
};

// A GGUF with no tensors and an optional chat template.
std::unique_ptr<gguf::ModelFile> make_file(const std::string& chat_template) {
  static int counter = 0;
  auto path = std::filesystem::temp_directory_path() /
              ("ferry_test_generate_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".gguf");
  auto w = gguf::Writer::create(path.string());
  EXPECT_TRUE(w.has_value());
  (*w)->add_string("general.architecture", "llama");
  if (!chat_template.empty()) (*w)->add_string("tokenizer.chat_template", chat_template);
  EXPECT_TRUE((*w)->begin_data().is_ok());
  EXPECT_TRUE((*w)->finish().is_ok());
  auto f = gguf::ModelFile::open(path.string());
  EXPECT_TRUE(f.has_value()) << f.status().message();
  std::filesystem::remove(path);  // the mmap keeps the data alive
  return std::move(*f);
}

GenerateParams greedy(int32_t n) {
  GenerateParams p;
  p.n_predict = n;
  p.sampling.temp = 0.0f;
  return p;
}

TEST(Generate, ChunkedPrefillThenDecode) {
  FakeEngine e(64, 4, make_file(""), model::Arch::kLlama);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // chunks 4, 4, 2
  int rows = 0;
  GenerateCallbacks cb;
  cb.on_logits = [&](const float*, int32_t n) {
    EXPECT_EQ(n, kVocab);
    ++rows;
  };
  auto r = generate(e, prompt, greedy(3), cb);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(rows, 3);  // without all_logits: one row per sampled token
  ASSERT_EQ(e.batches_.size(), 3u + 2u);  // 3 prefill chunks + 2 decode steps (the last token is not fed)
  EXPECT_EQ(e.batches_[0].size(), 4);
  EXPECT_EQ(e.batches_[1].size(), 4);
  EXPECT_EQ(e.batches_[2].size(), 2);
  EXPECT_EQ(e.batches_[2].logits, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(e.batches_[0].logits, (std::vector<uint8_t>{0, 0, 0, 0}));
  EXPECT_EQ(e.batches_[3].tokens, (std::vector<int32_t>{11}));
  EXPECT_EQ(e.batches_[3].pos, (std::vector<int32_t>{10}));
  EXPECT_EQ(e.clears_, 1);
  EXPECT_EQ(r->stats.n_prompt, 10);
  EXPECT_EQ(r->stats.n_generated, 3);
  EXPECT_FALSE(r->stats.hit_eog);
  EXPECT_GE(r->stats.ttft_ms, r->stats.prefill_ms);
}

TEST(Generate, AllLogitsGivesPromptPlusGeneratedMinusOneRows) {
  FakeEngine e(64, 3, make_file(""), model::Arch::kLlama);
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<int32_t> argmax_of_rows;
  GenerateParams p = greedy(4);
  p.all_logits = true;
  GenerateCallbacks cb;
  cb.on_logits = [&](const float* l, int32_t n) {
    argmax_of_rows.push_back(static_cast<int32_t>(std::max_element(l, l + n) - l));
  };
  auto r = generate(e, prompt, p, cb);
  ASSERT_TRUE(r.has_value());
  // Row r predicts position r + 1: prompt rows 4 2 5 2 6, then rows after feeding 6 7 8.
  EXPECT_EQ(argmax_of_rows, (std::vector<int32_t>{4, 2, 5, 2, 6, 7, 8, 9}));
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{6, 7, 8, 9}));
}

TEST(Generate, StopsAtEndOfGeneration) {
  FakeEngine e(64, 8, make_file(""), model::Arch::kLlama);
  auto r = generate(e, {12}, greedy(10));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{13, 14, 15}));
  EXPECT_TRUE(r->stats.hit_eog);
  EXPECT_EQ(r->text, "no");  // EOG is not rendered

  GenerateParams p = greedy(5);
  p.stop_at_eog = false;
  auto r2 = generate(e, {12}, p);
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->tokens, (std::vector<int32_t>{13, 14, 15, 0, 1}));
}

TEST(Generate, StopsWhenContextIsFull) {
  FakeEngine e(6, 8, make_file(""), model::Arch::kLlama);
  auto r = generate(e, {0, 1, 2, 3}, greedy(100));
  ASSERT_TRUE(r.has_value());
  // positions 4 and 5 are fed; a token is sampled from each, plus the prompt's
  EXPECT_EQ(r->tokens.size(), 3u);
  EXPECT_TRUE(r->stats.hit_ctx);
}

TEST(Generate, StreamsValidUtf8AcrossTokens) {
  FakeEngine e(64, 8, make_file(""), model::Arch::kLlama);
  std::vector<std::string> pieces;
  GenerateCallbacks cb;
  cb.on_token = [&](int32_t, std::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  };
  auto r = generate(e, {3}, greedy(4), cb);  // tokens 4 5 6 7: "e", 0xC3, 0xA9, "h"
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->text, "e\xC3\xA9h");
  EXPECT_EQ(pieces, (std::vector<std::string>{"e", "", "\xC3\xA9", "h"}));
}

TEST(Generate, CallbackCanStop) {
  FakeEngine e(64, 8, make_file(""), model::Arch::kLlama);
  GenerateCallbacks cb;
  cb.on_token = [](int32_t tok, std::string_view) { return tok != 3; };
  auto r = generate(e, {0}, greedy(10), cb);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST(Generate, RejectsBadPrompts) {
  FakeEngine e(4, 8, make_file(""), model::Arch::kLlama);
  EXPECT_EQ(generate(e, {}, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(generate(e, {1, kVocab}, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(generate(e, {1, -1}, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(generate(e, {1, 2, 3, 4, 5}, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(e.batches_.empty());
}

TEST(Generate, ZeroTokens) {
  FakeEngine e(16, 8, make_file(""), model::Arch::kLlama);
  auto r = generate(e, {1, 2}, greedy(0));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->tokens.empty());
  EXPECT_EQ(r->stats.decode_tok_s, 0.0);
}

TEST(ChatTemplate, ChatMLWithDefaultSystem) {
  const std::string tmpl =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  FakeEngine e(16, 8, make_file(tmpl), model::Arch::kLlama);
  auto s = apply_chat_template(e, "Hi");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto s2 = apply_chat_template(e, "Hi", "Be brief.");
  ASSERT_TRUE(s2.has_value());
  EXPECT_EQ(*s2, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatMLWithoutDefaultSystem) {
  const std::string tmpl =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}";
  FakeEngine e(16, 8, make_file(tmpl), model::Arch::kQwen2);
  auto s = apply_chat_template(e, "Hi");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, "<|im_start|>user\nHi<|im_end|>\n");  // the template opens no assistant turn: none is added
}

TEST(ChatTemplate, GemmaTurns) {
  FakeEngine e(16, 8, make_file(""), model::Arch::kGemma3);  // no template in the file: the arch decides
  std::string note = "stale";
  auto s = apply_chat_template(e, "Hi", "Be brief.", &note);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_NE(note.find("no tokenizer.chat_template"), std::string::npos) << note;  // the guess is said
  EXPECT_NE(note.find("Gemma"), std::string::npos) << note;
}

TEST(ChatTemplate, TemplateInFileIsNoGuess) {
  FakeEngine e(16, 8, make_file("{{ '<start_of_turn>user\n' }}"), model::Arch::kGemma3);
  std::string note = "stale";
  ASSERT_TRUE(apply_chat_template(e, "Hi", {}, &note).has_value());
  EXPECT_EQ(note, "");
}

TEST(ChatTemplate, NoTemplateNoKnownFormatIsUnsupported) {
  FakeEngine e(16, 8, make_file(""), model::Arch::kLlama);
  auto s = apply_chat_template(e, "Hi");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.status().message().find("without --chat"), std::string::npos) << s.status().message();
}

// BOS / EOS text comes from the vocabulary; the template's leading BOS text is dropped when tokenize_prompt
// adds BOS itself, so the prompt holds one.
TEST(ChatTemplate, RenderChatUsesTheVocabularysBosAndDropsADoubleOne) {
  FakeEngine e(16, 8, make_file("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"), model::Arch::kLlama);
  e.fake_tokenizer().special_.bos = 1;     // renders as "b"
  e.fake_tokenizer().special_.eos = kEos;  // "p"
  auto tmpl = model_chat_template(e);
  ASSERT_TRUE(tmpl.has_value());
  text::ChatRequest req;
  req.messages = {{"user", "X"}};
  EXPECT_EQ(*render_chat(e, *tmpl, req), "bXp");
  e.fake_tokenizer().special_.add_bos = true;
  EXPECT_EQ(*render_chat(e, *tmpl, req), "Xp");
  e.fake_tokenizer().special_.add_eos = true;
  EXPECT_EQ(*render_chat(e, *tmpl, req), "X");
  FakeEngine none(16, 8, make_file(""), model::Arch::kLlama);
  EXPECT_EQ(model_chat_template(none).status().code(), ErrorCode::kNotFound);
}

// Any template renders now (the interpreter, not a family match); a broken one is an error naming its line.
TEST(ChatTemplate, AnyTemplateRendersAndBrokenOnesSayWhere) {
  FakeEngine e(16, 8, make_file("[INST] {{ messages[-1]['content'] }} [/INST]"), model::Arch::kLlama);
  auto s = apply_chat_template(e, "Hi");
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ(*s, "[INST] Hi [/INST]");
  FakeEngine bad(16, 8, make_file("ok\n{% for m in messages %}"), model::Arch::kLlama);
  auto b = apply_chat_template(bad, "Hi");
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.status().message().find("chat template line 2"), std::string::npos) << b.status().message();
}

// A multimodal prompt: chunks never mix token and embedding rows, embedding rows and M-RoPE positions are
// sliced per chunk, generated tokens get every stream at next_rope_pos + k, the sampler sees text only.
TEST(GenerateRows, EmbeddingSpansAndMropePositions) {
  FakeEngine e(64, 4, make_file(""), model::Arch::kQwen2VL);
  e.set_n_embd(2);
  PromptRows rows;
  rows.tokens = {3, 4, -1, -1, -1, -1, -1, 7};
  std::vector<float> embd;
  for (int r = 0; r < 5; ++r) embd.insert(embd.end(), {r * 10.f, r * 10.f + 1});
  rows.spans.push_back({2, 7, embd.data()});
  for (int s = 0; s < 4; ++s)
    for (int r = 0; r < 8; ++r) rows.mrope_pos.push_back(100 * s + r);
  rows.next_rope_pos = 20;
  auto res = generate_rows(e, rows, greedy(3));
  ASSERT_TRUE(res.has_value()) << res.status().message();
  ASSERT_EQ(e.batches_.size(), 4u + 2u);  // [3 4] [e e e e] [e] [7], then 2 decode steps
  const std::vector<int32_t> sizes = {2, 4, 1, 1, 1, 1};
  for (size_t b = 0; b < sizes.size(); ++b) EXPECT_EQ(e.batches_[b].size(), sizes[b]) << b;
  EXPECT_TRUE(e.batches_[0].embd.empty());
  EXPECT_EQ(e.batches_[1].embd, std::vector<float>(embd.begin(), embd.begin() + 8));
  EXPECT_EQ(e.batches_[2].embd, std::vector<float>(embd.begin() + 8, embd.end()));
  EXPECT_TRUE(e.batches_[3].embd.empty());
  // Section-major slices: the chunk of rows 2..5 holds streams 0..3 of those rows.
  EXPECT_EQ(e.batches_[1].mrope_pos, (std::vector<int32_t>{2, 3, 4, 5, 102, 103, 104, 105, 202, 203, 204, 205, 302,
                                                            303, 304, 305}));
  EXPECT_EQ(e.batches_[4].mrope_pos, (std::vector<int32_t>{20, 20, 20, 20}));
  EXPECT_EQ(e.batches_[5].mrope_pos, (std::vector<int32_t>{21, 21, 21, 21}));
  EXPECT_EQ(e.batches_[4].pos[0], 8);  // sequence positions stay the row index
  EXPECT_EQ(res->stats.n_prompt, 8);
  EXPECT_EQ(res->tokens, (std::vector<int32_t>{8, 9, 10}));

  PromptRows bad = rows;
  bad.spans[0].end = 9;  // past the prompt
  EXPECT_EQ(generate_rows(e, bad, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
  bad = rows;
  bad.tokens[2] = -1;
  bad.spans.clear();  // an image row without embeddings is a token outside the vocabulary
  EXPECT_EQ(generate_rows(e, bad, greedy(1)).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::engine
