// The generation loop over an Engine, for one sequence: prefill the prompt in chunks of n_batch, then
// decode token by token until n_predict tokens, an end-of-generation token or a full context. Text is
// streamed as valid UTF-8 (text::Utf8Streamer); timings follow llama.cpp's definitions closely enough
// to compare: TTFT from the start of prefill to the first sampled token, prefill and decode tokens/s.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "text/chat_template.h"

namespace ferry::engine {

struct GenerateParams {
  int32_t n_predict = 128;      // most tokens to generate; < 0: until EOG or a full context
  SamplerParams sampling;
  int32_t seq = 0;              // sequence id to use; its cache is cleared first
  bool stop_at_eog = true;      // stop after sampling an end-of-generation token (kept in tokens, not text)
  bool all_logits = false;      // also hand every prompt position's logits to on_logits
};

struct GenerateStats {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  double prefill_ms = 0;        // start of prefill -> logits of the last prompt chunk
  double ttft_ms = 0;           // start of prefill -> first token sampled
  double decode_ms = 0;         // first token sampled -> last token sampled ((n_generated - 1) steps)
  double prefill_tok_s = 0;     // n_prompt / prefill time
  double decode_tok_s = 0;      // (n_generated - 1) / decode time; 0 when fewer than 2 tokens
  bool hit_eog = false;         // stopped on an end-of-generation token
  bool hit_ctx = false;         // stopped because the context was full
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, in order (a final EOG token included)
  std::string text;             // their text (EOG and control tokens not rendered), valid UTF-8
  GenerateStats stats;
};

struct GenerateCallbacks {
  // After each generated token: its id and the text that became complete (possibly empty). Once at the
  // end with token = -1 if held-back bytes of an incomplete UTF-8 sequence were flushed. Returning
  // false stops the generation after this token.
  std::function<bool(int32_t token, std::string_view piece)> on_token;
  // Every logits row [n_vocab] in sequence order: the prompt positions when all_logits is set (else only
  // the last), then the row of each decode step. Row r predicts the token at position r + 1, so a run
  // gives n_prompt + n_generated - 1 rows with all_logits, n_generated without.
  std::function<void(const float* logits, int32_t n_vocab)> on_logits;
  // Picks each generated token from its logits row instead of sampler.sample (a constrained draw, e.g. JSON
  // mode); it may draw from `sampler` but must not accept() (generate does). A negative id ends the
  // generation with an error (nothing could be chosen).
  std::function<int32_t(const float* logits, int32_t n_vocab, Sampler& sampler)> choose;
};

// Text -> prompt ids as llama.cpp's CLI tokenizes a prompt: BOS (and EOS) as the vocabulary's
// add_*_token flags say; special-token text such as "<|im_start|>" becomes the special token.
std::vector<int32_t> tokenize_prompt(const Engine& engine, std::string_view text);

// The model's chat template (tokenizer.chat_template), parsed. kNotFound when the file has none;
// kCorrupt naming the line when it does not parse.
Expected<text::ChatTemplate> model_chat_template(const Engine& engine);

// Renders `request` with `tmpl` for this model, ready for tokenize_prompt: bos_token / eos_token are set
// to the text of the vocabulary's BOS / EOS tokens when the request leaves them empty, and a leading BOS
// text is removed from the result when tokenize_prompt adds BOS itself (as llama.cpp does), so the prompt
// holds one BOS. Errors as ChatTemplate::render.
Expected<std::string> render_chat(const Engine& engine, const text::ChatTemplate& tmpl, text::ChatRequest request);

// One user turn (and optional system message) with the assistant turn opened, ready for tokenize_prompt:
// the model's own template (render_chat). A file without a template gets its architecture's known format
// (Gemma's turns for gemma3) and *guess_note (if given) says so; else it is cleared. kUnsupported for a
// file without a template whose architecture has no known format.
Expected<std::string> apply_chat_template(const Engine& engine, std::string_view user,
                                          std::string_view system = {}, std::string* guess_note = nullptr);

// Runs prompt -> generation. Errors: empty prompt, a token id outside the vocabulary, a prompt longer
// than the context (kInvalidArgument), or an engine step error.
Expected<GenerateResult> generate(Engine& engine, const std::vector<int32_t>& prompt,
                                  const GenerateParams& params, const GenerateCallbacks& callbacks = {});

// A prompt whose rows are token ids or embeddings (an image's tokens from a vision encoder,
// engine/multimodal.h), with M-RoPE positions for qwen2vl, for generate_rows(). Row r sits at sequence
// position r either way.
struct PromptRows {
  std::vector<int32_t> tokens;  // [n] ids; rows inside a span are -1
  struct Span {
    int32_t begin = 0, end = 0;    // rows [begin, end)
    const float* embd = nullptr;   // [n_embd, end - begin] F32: the rows' input embeddings (caller-owned)
  };
  std::vector<Span> spans;          // ascending, disjoint
  std::vector<int32_t> mrope_pos;   // [4 * n] RoPE positions, section-major; empty: RoPE at the row index
  int32_t next_rope_pos = 0;        // with mrope_pos: the RoPE position of the first generated token

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};
// generate() over such a prompt: prefill chunks never mix token and embedding rows; with mrope_pos the
// generated tokens get every stream at next_rope_pos, next_rope_pos + 1, ... The sampler sees the token
// rows only. GenerateStats::n_prompt counts every row.
Expected<GenerateResult> generate_rows(Engine& engine, const PromptRows& prompt, const GenerateParams& params,
                                       const GenerateCallbacks& callbacks = {});

}  // namespace ferry::engine
