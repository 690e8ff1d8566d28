// VisionEncoder and multimodal_prompt (see multimodal.h).
#include "engine/multimodal.h"

#include <algorithm>
#include <chrono>

#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_spec.h"
#include "model/vision/vision_forward.h"
#include "model/vision/vision_input.h"
#include "text/tokenizer.h"

namespace ferry::engine {

VisionEncoder::~VisionEncoder() = default;

Expected<std::unique_ptr<VisionEncoder>> VisionEncoder::open(const std::string& mmproj_path,
                                                             const model::ModelSpec& lm, int32_t n_threads) {
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  FERRY_ASSIGN_OR_RETURN(e->file_, gguf::ModelFile::open(mmproj_path));
  FERRY_ASSIGN_OR_RETURN(e->spec_, model::VisionSpec::from_gguf(*e->file_));
  FERRY_RETURN_IF_ERROR(model::check_vision_pairing(e->spec_, lm));
  FERRY_ASSIGN_OR_RETURN(e->weights_, model::bind_vision_weights(e->spec_, *e->file_));
  e->ops_ = kernels::make_cpu_ops(n_threads);
  return e;
}

Status VisionEncoder::set_token_limits(int32_t min_tokens, int32_t max_tokens) {
  const int32_t lo = min_tokens > 0 ? min_tokens : spec_.min_tokens;
  const int32_t hi = max_tokens > 0 ? max_tokens : spec_.max_tokens;
  if (lo > hi || hi > (1 << 16))
    return make_error(ErrorCode::kInvalidArgument, "image token limits %d..%d are not a range (at most 65536)", lo, hi);
  spec_.min_tokens = lo;
  spec_.max_tokens = hi;
  return Status::ok();
}

Expected<EncodedImage> VisionEncoder::encode(const image::RgbImage& img) {
  const auto t0 = std::chrono::steady_clock::now();
  FERRY_ASSIGN_OR_RETURN(const model::VisionInput in, model::prepare_vision_input(spec_, img));
  EncodedImage out;
  out.grid_w = in.grid_w;
  out.grid_h = in.grid_h;
  out.width = in.width;
  out.height = in.height;
  FERRY_ASSIGN_OR_RETURN(out.embd, model::encode_image(*ops_, spec_, weights_, in));
  out.encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Expected<PromptRows> multimodal_prompt(const Engine& engine, std::string_view text,
                                       const std::vector<EncodedImage>& images) {
  const model::ModelSpec& spec = engine.spec();
  const text::Tokenizer& tok = engine.tokenizer();
  if (!images.empty() && spec.arch != model::Arch::kQwen2VL)
    return make_error(ErrorCode::kInvalidArgument, "images need a vision-language model; %s is %s",
                      engine.file().path().c_str(), model::arch_name(spec.arch));

  // Text pieces around the markers.
  std::vector<std::string_view> pieces;
  size_t start = 0;
  for (size_t at; (at = text.find(kImageMarker, start)) != std::string_view::npos; start = at + kImageMarker.size())
    pieces.push_back(text.substr(start, at - start));
  pieces.push_back(text.substr(start));
  std::string prefixed;
  if (pieces.size() == 1 && !images.empty()) {  // no marker: one per image in front
    for (size_t i = 0; i < images.size(); ++i) prefixed += kImageMarker;
    prefixed += text;
    return multimodal_prompt(engine, prefixed, images);
  }
  if (pieces.size() - 1 != images.size())
    return make_error(ErrorCode::kInvalidArgument, "the prompt has %zu image markers (%s) for %zu images",
                      pieces.size() - 1, std::string(kImageMarker).c_str(), images.size());

  auto tokenize = [&](std::string_view s) { return tok.encode(s, /*add_special=*/false, /*parse_special=*/true); };
  const std::vector<int32_t> begin_tok = images.empty() ? std::vector<int32_t>{} : tokenize("<|vision_start|>");
  const std::vector<int32_t> end_tok = images.empty() ? std::vector<int32_t>{} : tokenize("<|vision_end|>");
  if (!images.empty() && (begin_tok.size() != 1 || end_tok.size() != 1))
    return make_error(ErrorCode::kInvalidArgument,
                      "the vocabulary of %s has no <|vision_start|> / <|vision_end|> tokens",
                      engine.file().path().c_str());

  // Rows with their RoPE position per stream, gathered per stream then laid out section-major.
  PromptRows rows;
  std::vector<int32_t> pt, ph, pw, pe;
  int32_t t = 0;
  auto add_tokens = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      rows.tokens.push_back(id);
      pt.push_back(t);
      ph.push_back(t);
      pw.push_back(t);
      pe.push_back(t);
      ++t;
    }
  };
  const text::SpecialTokens& sp = tok.special();
  if (sp.add_bos && sp.bos >= 0) add_tokens({sp.bos});
  for (size_t i = 0; i < pieces.size(); ++i) {
    add_tokens(tokenize(pieces[i]));
    if (i == images.size()) break;
    const EncodedImage& img = images[i];
    if (img.n_tokens() <= 0 || img.embd.size() != static_cast<size_t>(img.n_tokens()) * spec.n_embd)
      return make_error(ErrorCode::kInvalidArgument, "image %zu: embeddings do not match the model's width", i + 1);
    add_tokens(begin_tok);
    PromptRows::Span span;
    span.begin = rows.size();
    span.end = span.begin + img.n_tokens();
    span.embd = img.embd.data();
    rows.spans.push_back(span);
    for (int32_t r = 0; r < img.n_tokens(); ++r) {
      rows.tokens.push_back(-1);
      pt.push_back(t);
      ph.push_back(t + r / img.grid_w);
      pw.push_back(t + r % img.grid_w);
      pe.push_back(0);
    }
    t += std::max(img.grid_w, img.grid_h);
    add_tokens(end_tok);
  }
  if (sp.add_eos && sp.eos >= 0) add_tokens({sp.eos});
  if (rows.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "empty prompt (no tokens)");
  if (!images.empty()) {  // text alone: RoPE at the row index, plain rope exactly
    for (const auto* v : {&pt, &ph, &pw, &pe}) rows.mrope_pos.insert(rows.mrope_pos.end(), v->begin(), v->end());
    rows.next_rope_pos = t;
  }
  return rows;
}

}  // namespace ferry::engine
