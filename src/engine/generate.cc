// The generation loop: prefill in n_batch chunks, then one token per step; see generate.h.
// The sampler sees the prompt tokens too (llama.cpp's CLI does the same), so the repetition penalty
// covers the prompt's tail as well as the generated text.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "format/gguf.h"
#include "model/model_spec.h"
#include "text/tokenizer.h"

namespace ferry::engine {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::vector<int32_t> tokenize_prompt(const Engine& engine, std::string_view text) {
  return engine.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true);
}

Expected<text::ChatTemplate> model_chat_template(const Engine& engine) {
  return text::chat_template_from_gguf(engine.file());
}

Expected<std::string> render_chat(const Engine& engine, const text::ChatTemplate& tmpl, text::ChatRequest request) {
  return text::render_for_tokenizer(tmpl, std::move(request), engine.tokenizer());
}

Expected<std::string> apply_chat_template(const Engine& engine, std::string_view user, std::string_view system,
                                          std::string* guess_note) {
  if (guess_note) guess_note->clear();
  auto tmpl = model_chat_template(engine);
  if (tmpl) {
    text::ChatRequest req;
    if (!system.empty()) req.messages.push_back({"system", std::string(system)});
    req.messages.push_back({"user", std::string(user)});
    req.add_generation_prompt = true;
    return render_chat(engine, *tmpl, std::move(req));
  }
  if (tmpl.status().code() != ErrorCode::kNotFound) return tmpl.status();
  // No template in the file: the architecture's known turn format, said in *guess_note.
  if (engine.spec().arch != model::Arch::kGemma3)
    return make_error(ErrorCode::kUnsupported,
                      "%s has no chat template (tokenizer.chat_template) and its architecture has no known "
                      "format; give the prompt without --chat",
                      engine.file().path().c_str());
  if (guess_note)
    *guess_note = engine.file().path() + " has no tokenizer.chat_template; using the Gemma turn format of its "
                  "architecture";
  // Gemma has no system role: its template puts the system text at the top of the first user turn.
  std::string out = "<start_of_turn>user\n";
  if (!system.empty()) {
    out += system;
    out += "\n\n";
  }
  out += user;
  out += "<end_of_turn>\n<start_of_turn>model\n";
  return out;
}

Expected<GenerateResult> generate(Engine& engine, const std::vector<int32_t>& prompt,
                                  const GenerateParams& params, const GenerateCallbacks& callbacks) {
  PromptRows rows;
  rows.tokens = prompt;
  return generate_rows(engine, rows, params, callbacks);
}

Expected<GenerateResult> generate_rows(Engine& engine, const PromptRows& prompt, const GenerateParams& params,
                                       const GenerateCallbacks& callbacks) {
  const int32_t n_vocab = engine.spec().n_vocab;
  const int32_t n_embd = engine.spec().n_embd;
  const int32_t n_ctx = engine.n_ctx();
  const int32_t n_batch = std::max<int32_t>(1, engine.options().n_batch);
  const int32_t n_prompt = prompt.size();
  const text::Tokenizer& tok = engine.tokenizer();
  const bool mrope = !prompt.mrope_pos.empty();

  if (n_prompt == 0) return make_error(ErrorCode::kInvalidArgument, "empty prompt (no tokens)");
  if (mrope && prompt.mrope_pos.size() != 4 * static_cast<size_t>(n_prompt))
    return make_error(ErrorCode::kInvalidArgument, "prompt M-RoPE positions: %zu values for %d rows",
                      prompt.mrope_pos.size(), n_prompt);
  // span_of[r]: the span holding row r, or -1 for a token row.
  std::vector<int32_t> span_of(static_cast<size_t>(n_prompt), -1);
  for (size_t s = 0; s < prompt.spans.size(); ++s) {
    const PromptRows::Span& sp = prompt.spans[s];
    if (sp.begin < 0 || sp.end > n_prompt || sp.begin >= sp.end || sp.embd == nullptr ||
        (s > 0 && sp.begin < prompt.spans[s - 1].end))
      return make_error(ErrorCode::kInvalidArgument, "prompt embedding span %zu [%d, %d) is malformed", s, sp.begin,
                        sp.end);
    for (int32_t r = sp.begin; r < sp.end; ++r) span_of[static_cast<size_t>(r)] = static_cast<int32_t>(s);
  }
  for (int32_t r = 0; r < n_prompt; ++r) {
    const int32_t t = prompt.tokens[static_cast<size_t>(r)];
    if (span_of[static_cast<size_t>(r)] < 0 && (t < 0 || t >= n_vocab))
      return make_error(ErrorCode::kInvalidArgument, "prompt token %d outside the vocabulary [0, %d)", t, n_vocab);
  }
  if (n_prompt > n_ctx)
    return make_error(ErrorCode::kInvalidArgument, "prompt of %d tokens does not fit a context of %d",
                      n_prompt, n_ctx);

  GenerateResult result;
  GenerateStats& st = result.stats;
  st.n_prompt = n_prompt;
  engine.seq_rm(params.seq);

  Sampler sampler(params.sampling);
  for (int32_t r = 0; r < n_prompt; ++r)
    if (span_of[static_cast<size_t>(r)] < 0) sampler.accept(prompt.tokens[static_cast<size_t>(r)]);

  // Prefill: chunks of up to n_batch rows, cut where token rows and a span's rows meet; logits for every
  // row when asked, else for the last one only.
  Batch batch;
  std::vector<float> logits;
  const Clock::time_point t_start = Clock::now();
  for (int32_t i0 = 0; i0 < n_prompt;) {
    const int32_t span = span_of[static_cast<size_t>(i0)];
    int32_t i1 = std::min(n_prompt, i0 + n_batch);
    for (int32_t r = i0 + 1; r < i1; ++r)
      if (span_of[static_cast<size_t>(r)] != span) i1 = r;
    batch.clear();
    for (int32_t i = i0; i < i1; ++i)
      batch.add(prompt.tokens[static_cast<size_t>(i)], i, params.seq, params.all_logits || i == n_prompt - 1);
    if (span >= 0) {
      const PromptRows::Span& sp = prompt.spans[static_cast<size_t>(span)];
      const float* first = sp.embd + static_cast<size_t>(i0 - sp.begin) * static_cast<size_t>(n_embd);
      batch.embd.assign(first, first + static_cast<size_t>(i1 - i0) * static_cast<size_t>(n_embd));
    }
    if (mrope)
      for (int s = 0; s < 4; ++s)
        batch.mrope_pos.insert(batch.mrope_pos.end(), prompt.mrope_pos.begin() + s * n_prompt + i0,
                               prompt.mrope_pos.begin() + s * n_prompt + i1);
    logits.clear();
    FERRY_RETURN_IF_ERROR(engine.step(batch, &logits));
    const size_t rows = logits.size() / static_cast<size_t>(n_vocab);
    FERRY_ASSERT(logits.size() % static_cast<size_t>(n_vocab) == 0);
    if (callbacks.on_logits)
      for (size_t r = 0; r < rows; ++r) callbacks.on_logits(logits.data() + r * n_vocab, n_vocab);
    i0 = i1;
  }
  const Clock::time_point t_prefill = Clock::now();
  FERRY_ASSERT(logits.size() >= static_cast<size_t>(n_vocab));
  std::vector<float> last(logits.end() - n_vocab, logits.end());  // [n_vocab] of the last prompt token

  text::Utf8Streamer streamer;
  Clock::time_point t_first = t_prefill;
  int32_t pos = n_prompt;
  while (params.n_predict < 0 || st.n_generated < params.n_predict) {
    const int32_t token =
        callbacks.choose ? callbacks.choose(last.data(), n_vocab, sampler) : sampler.sample(last.data(), n_vocab);
    if (token < 0 || token >= n_vocab)
      return make_error(ErrorCode::kInvalidArgument, "no token could be chosen at generated position %d", st.n_generated);
    sampler.accept(token);
    if (st.n_generated == 0) t_first = Clock::now();
    ++st.n_generated;
    result.tokens.push_back(token);

    const bool eog = tok.is_eog(token);
    std::string piece = eog ? std::string() : streamer.push(tok.token_to_piece(token, false));
    result.text += piece;
    bool go_on = true;
    if (callbacks.on_token) go_on = callbacks.on_token(token, piece);
    if (eog && params.stop_at_eog) {
      st.hit_eog = true;
      break;
    }
    if (!go_on) break;
    if (params.n_predict >= 0 && st.n_generated >= params.n_predict) break;
    if (pos >= n_ctx) {
      st.hit_ctx = true;
      break;
    }

    batch.clear();
    batch.add(token, pos, params.seq, true);
    if (mrope) batch.mrope_pos.assign(4, prompt.next_rope_pos + (pos - n_prompt));
    logits.clear();
    FERRY_RETURN_IF_ERROR(engine.step(batch, &logits));
    FERRY_ASSERT(logits.size() == static_cast<size_t>(n_vocab));
    ++pos;
    if (callbacks.on_logits) callbacks.on_logits(logits.data(), n_vocab);
    last.swap(logits);
  }
  const Clock::time_point t_end = Clock::now();

  std::string tail = streamer.flush();
  if (!tail.empty()) {
    result.text += tail;
    if (callbacks.on_token) callbacks.on_token(-1, tail);
  }

  st.prefill_ms = ms_between(t_start, t_prefill);
  st.ttft_ms = st.n_generated > 0 ? ms_between(t_start, t_first) : 0;
  st.decode_ms = st.n_generated > 0 ? ms_between(t_first, t_end) : 0;
  st.prefill_tok_s = st.prefill_ms > 0 ? n_prompt / (st.prefill_ms / 1e3) : 0;
  st.decode_tok_s = st.n_generated > 1 && st.decode_ms > 0 ? (st.n_generated - 1) / (st.decode_ms / 1e3) : 0;
  return result;
}

}  // namespace ferry::engine
