// ferry run: load a model, generate from a prompt, stream the text to stdout and end with a stats line
// on stderr (prompt tokens, TTFT, prefill and decode tokens/s). --json prints one JSON object instead;
// --logits-out writes the float32 logits of every prompt position and every decode step as raw
// little-endian [n_rows, n_vocab] (row r predicts position r + 1), for the differential tests.
// --json-object / --json-schema-file constrain the reply to one JSON object, --grammar / --grammar-file to
// a GBNF grammar (serve/token_constraint.h).
// Flags follow llama.cpp's where they exist (-m -p -n -c -t -s -b --temp --top-k --top-p ...).
#include <bit>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/multimodal.h"
#include "image/image.h"
#include "format/gguf.h"
#include "hybrid_support.h"
#include "model/model_spec.h"
#include "runtime/runtime.h"
#include "serve/gbnf.h"
#include "serve/token_constraint.h"
#include "serve/json_schema.h"
#include "text/tokenizer.h"

namespace {

using ferry::ErrorCode;
using ferry::Expected;
using ferry::make_error;

// "1, 2,3" / "1 2 3" -> ids. Anything but digits, '-', commas and spaces is a usage error.
Expected<std::vector<int32_t>> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(text.substr(i), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || v < INT32_MIN || v > INT32_MAX)
      return make_error(ErrorCode::kInvalidArgument, "--tokens: not a list of token ids near '%s'",
                        text.substr(i, 16).c_str());
    ids.push_back(static_cast<int32_t>(v));
    i += used;
  }
  return ids;
}

struct RunArgs {
  std::string model;
  std::string prompt;
  bool has_prompt = false;
  std::string tokens;
  int32_t n_predict = 128;
  ferry::engine::SamplerParams sampling;
  int32_t threads = 0;
  std::string cpu_isa;  // --cpu-isa
  int32_t ctx = 4096;
  int32_t batch = 0;  // 0: 1024 for the whole model on a GPU, else 512 (runtime::OpenOptions::n_batch)
  std::string device = "cpu";
  bool json = false;
  std::string logits_out;
  bool chat = false;
  std::string system;
  bool ignore_eos = false;
  ferry::cli::HybridArgs hybrid;  // --vram / --profile / --ring: the hybrid executor
  // Vision-language models: the projector, the images (in order), their token limits.
  std::string mmproj;
  std::vector<std::string> images;
  int32_t image_min_tokens = 0, image_max_tokens = 0;
  std::string image_embd_out;
  // JSON mode: the reply is one JSON object (--json-object), or one that this schema accepts.
  bool json_object = false;
  std::string json_schema_file;
  // A GBNF grammar the reply follows (its text, or a file of it).
  std::string grammar, grammar_file;
};

// The --grammar / --grammar-file grammar (null: none), read and compiled before the model loads.
Expected<std::shared_ptr<const ferry::serve::Grammar>> grammar_constraint(const RunArgs& a) {
  std::string text = a.grammar;
  if (!a.grammar_file.empty()) {
    std::ifstream f(a.grammar_file, std::ios::binary);
    if (!f) return make_error(ErrorCode::kIo, "cannot read --grammar-file '%s'", a.grammar_file.c_str());
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  } else if (text.empty()) {
    return std::shared_ptr<const ferry::serve::Grammar>();
  }
  auto g = ferry::serve::Grammar::parse(text);
  if (!g)
    return make_error(ErrorCode::kInvalidArgument, "%s%s", a.grammar_file.empty() ? "--grammar: " : ("--grammar-file '" + a.grammar_file + "': ").c_str(),
                      g.status().message().c_str());
  return std::move(g).value();
}

// The --json-object / --json-schema-file constraint (null: none), read and compiled before the model loads.
Expected<std::shared_ptr<const ferry::serve::JsonSchema>> json_constraint(const RunArgs& a) {
  if (a.json_object) return ferry::serve::JsonSchema::any_object();
  if (a.json_schema_file.empty()) return std::shared_ptr<const ferry::serve::JsonSchema>();
  std::ifstream f(a.json_schema_file);
  if (!f) return make_error(ErrorCode::kIo, "cannot read --json-schema-file '%s'", a.json_schema_file.c_str());
  nlohmann::json schema;
  try {
    f >> schema;
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(ErrorCode::kInvalidArgument, "--json-schema-file '%s' is not JSON: %s", a.json_schema_file.c_str(),
                      e.what());
  }
  auto compiled = ferry::serve::JsonSchema::compile(schema);
  if (!compiled)
    return make_error(ErrorCode::kInvalidArgument, "--json-schema-file '%s': %s", a.json_schema_file.c_str(),
                      compiled.status().message().c_str());
  return std::move(compiled).value();
}

// Decodes the images (before the model loads, so a bad image fails fast), encodes them with the mmproj,
// and optionally writes their embeddings (float32 [tokens, n_embd], images in order) for the tests.
Expected<std::vector<ferry::engine::EncodedImage>> encode_images(const RunArgs& a, ferry::runtime::Runtime& rt,
                                                                 const std::vector<ferry::image::RgbImage>& pixels) {
  std::vector<ferry::engine::EncodedImage> out;
  if (pixels.empty()) return out;
  // On the run's device: under --vram the tower runs in the budget the language model's weights leave.
  FERRY_ASSIGN_OR_RETURN(auto enc, rt.open_vision(a.mmproj));
  FERRY_RETURN_IF_ERROR(enc->set_token_limits(a.image_min_tokens, a.image_max_tokens));
  for (size_t i = 0; i < pixels.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(ferry::engine::EncodedImage img, enc->encode(pixels[i]));
    if (!a.json) {
      std::fprintf(stderr, "image %zu: %d x %d -> %d x %d pixels, %d tokens (%d x %d), encoded in %.1f ms on %s\n",
                   i + 1, pixels[i].width, pixels[i].height, img.width, img.height, img.n_tokens(), img.grid_w,
                   img.grid_h, img.encode_ms, img.device.c_str());
      if (!img.note.empty()) std::fprintf(stderr, "note: %s\n", img.note.c_str());
    }
    out.push_back(std::move(img));
  }
  if (!a.image_embd_out.empty()) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(a.image_embd_out.c_str(), "wb"), &std::fclose);
    bool ok = static_cast<bool>(f);
    for (const auto& img : out)
      ok = ok && std::fwrite(img.embd.data(), sizeof(float), img.embd.size(), f.get()) == img.embd.size();
    if (!ok || std::fclose(f.release()) != 0)
      return make_error(ErrorCode::kIo, "writing --image-embd-out file '%s' failed", a.image_embd_out.c_str());
  }
  return out;
}

int run(const RunArgs& a) {
  static_assert(std::endian::native == std::endian::little, "--logits-out writes host floats as little-endian");
  // The model on its device: cpu / ref, the whole model on a GPU (--device cuda), or the hybrid CPU/GPU
  // executor under a budget (--vram); runtime::open does all of it.
  auto schema = json_constraint(a);
  if (!schema) return ferry::cli::report(schema.status());
  auto grammar = grammar_constraint(a);
  if (!grammar) return ferry::cli::report(grammar.status());
  std::vector<ferry::image::RgbImage> pixels;
  for (const std::string& path : a.images) {
    auto img = ferry::image::decode_file(path);
    if (!img) return ferry::cli::report(img.status());
    pixels.push_back(std::move(*img));
  }
  ferry::runtime::OpenOptions opt;
  opt.model_path = a.model;
  opt.n_ctx = a.ctx;
  opt.n_threads = a.threads;
  opt.cpu_isa = a.cpu_isa;
  opt.n_batch = a.batch;
  opt.device = a.device;
  if (ferry::Status hs = ferry::cli::fill_open_options(a.hybrid, &opt); !hs.is_ok()) return ferry::cli::report(hs);
  auto opened = ferry::runtime::open(opt);
  if (!opened) return ferry::cli::report(opened.status());
  ferry::runtime::Runtime& rt = **opened;
  ferry::engine::Engine& engine = rt.engine();

  auto encoded = encode_images(a, rt, pixels);
  if (!encoded) return ferry::cli::report(encoded.status());
  ferry::engine::PromptRows prompt;
  if (!a.tokens.empty()) {
    auto ids = parse_token_list(a.tokens);
    if (!ids) return ferry::cli::report(ids.status());
    prompt.tokens = std::move(*ids);
  } else {
    std::string text = a.prompt;
    // Images without markers go in front of the user's text (inside the chat turn with --chat).
    if (!pixels.empty() && text.find(ferry::engine::kImageMarker) == std::string::npos)
      for (size_t i = 0; i < pixels.size(); ++i) text.insert(0, ferry::engine::kImageMarker);
    if (a.chat) {
      std::string guessed;
      auto wrapped = ferry::engine::apply_chat_template(engine, text, a.system, &guessed);
      if (!wrapped) return ferry::cli::report(wrapped.status());
      if (!guessed.empty()) std::fprintf(stderr, "warning: %s\n", guessed.c_str());
      text = std::move(*wrapped);
    }
    if (pixels.empty()) {
      prompt.tokens = ferry::engine::tokenize_prompt(engine, text);
    } else {
      auto rows = ferry::engine::multimodal_prompt(engine, text, *encoded);
      if (!rows) return ferry::cli::report(rows.status());
      prompt = std::move(*rows);
    }
  }

  std::unique_ptr<FILE, int (*)(FILE*)> logits_file(nullptr, &std::fclose);
  if (!a.logits_out.empty()) {
    logits_file.reset(std::fopen(a.logits_out.c_str(), "wb"));
    if (!logits_file) return ferry::cli::fail("cannot write --logits-out file '" + a.logits_out + "'");
  }

  ferry::engine::GenerateParams gp;
  gp.n_predict = a.n_predict;
  gp.sampling = a.sampling;
  gp.stop_at_eog = !a.ignore_eos;
  gp.all_logits = static_cast<bool>(logits_file);

  int64_t logits_rows = 0;
  bool write_failed = false;
  ferry::engine::GenerateCallbacks cb;
  std::unique_ptr<ferry::serve::TokenConstraint> constraint;
  if (*schema != nullptr || *grammar != nullptr) {
    auto pieces = std::make_shared<ferry::serve::TokenPieces>(engine.tokenizer(), engine.spec().n_vocab);
    constraint = *grammar != nullptr ? ferry::serve::grammar_constraint(pieces, *grammar)
                                     : ferry::serve::json_constraint(pieces, *schema);
    cb.choose = [&](const float* logits, int32_t n_vocab, ferry::engine::Sampler& sampler) {
      return constraint->draw(sampler, logits, n_vocab);
    };
  }
  cb.on_token = [&](int32_t, std::string_view piece) {
    if (!a.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return constraint == nullptr || !constraint->complete();  // ends when nothing more may follow
  };
  if (logits_file) {
    cb.on_logits = [&](const float* row, int32_t n_vocab) {
      ++logits_rows;
      if (std::fwrite(row, sizeof(float), static_cast<size_t>(n_vocab), logits_file.get()) !=
          static_cast<size_t>(n_vocab))
        write_failed = true;
    };
  }

  auto res = ferry::engine::generate_rows(engine, prompt, gp, cb);
  if (!a.json) std::fflush(stdout);
  if (!res) {
    if (!a.json) std::fputc('\n', stdout);
    return ferry::cli::report(res.status());
  }
  if (logits_file && (write_failed || std::fclose(logits_file.release()) != 0))
    return ferry::cli::fail("writing --logits-out file '" + a.logits_out + "' failed");

  const auto& st = res->stats;
  const char* stop = st.hit_eog ? "eog" : st.hit_ctx ? "ctx" : constraint && constraint->complete() ? (*grammar ? "grammar" : "json") : "length";
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["device"] = a.device;
    j["prompt_tokens"] = prompt.tokens;  // image rows: -1
    if (!encoded->empty()) {
      nlohmann::json imgs = nlohmann::json::array();
      for (size_t i = 0; i < encoded->size(); ++i) {
        const auto& e = (*encoded)[i];
        imgs.push_back({{"path", a.images[i]}, {"width", pixels[i].width}, {"height", pixels[i].height},
                        {"encoded_width", e.width}, {"encoded_height", e.height}, {"grid_w", e.grid_w},
                        {"grid_h", e.grid_h}, {"tokens", e.n_tokens()}, {"encode_ms", e.encode_ms},
                        {"encode_device", e.device}, {"encode_note", e.note}});
      }
      j["images"] = imgs;
    }
    j["tokens"] = res->tokens;
    j["text"] = res->text;
    j["n_prompt"] = st.n_prompt;
    j["n_generated"] = st.n_generated;
    j["ttft_ms"] = st.ttft_ms;
    j["prefill_ms"] = st.prefill_ms;
    j["decode_ms"] = st.decode_ms;
    j["prefill_tok_s"] = st.prefill_tok_s;
    j["decode_tok_s"] = st.decode_tok_s;
    j["stop"] = stop;
    j["n_vocab"] = engine.spec().n_vocab;
    j["n_ctx"] = engine.n_ctx();
    // Device memory of the whole process, read from the driver (cuda), modelled (emulated) or 0 (cpu).
    const ferry::runtime::ProcessMemory pm = rt.vram_peak_process();
    j["vram_peak_process_bytes"] = pm.peak_bytes;
    j["vram_peak_process_source"] = pm.source;
    if (rt.runner()) j["hybrid"] = rt.report_json();
    if (!a.logits_out.empty()) {
      j["logits_out"] = a.logits_out;
      j["logits_rows"] = logits_rows;
    }
    std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", out.c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the text's last line before the stats line when both go to a terminal
    std::fprintf(stderr,
                 "prompt: %d tokens | generated: %d tokens (stop: %s) | TTFT %.1f ms | prefill %.2f tok/s | "
                 "decode %.2f tok/s\n",
                 st.n_prompt, st.n_generated, stop, st.ttft_ms, st.prefill_tok_s, st.decode_tok_s);
    std::fputs(rt.report_text(false).c_str(), stderr);
  }
  std::fflush(stdout);
  ferry::cli::warn_profile_after_run(rt);
  return 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  RunArgs a;
  CLI::App app{"Generate text from a prompt.", "ferry run"};
  app.add_option("-m,--model", a.model, "GGUF model file")->required();
  auto* p_opt = app.add_option("-p,--prompt", a.prompt, "prompt text");
  auto* t_opt = app.add_option("--tokens", a.tokens, "prompt as token ids (\"1,2,3\"), used as is (no BOS added)");
  p_opt->excludes(t_opt);
  app.add_option("-n,--n-predict", a.n_predict, "tokens to generate (-1: until end of generation)")
      ->check(CLI::Range(-1, INT32_MAX));
  const CLI::Validator finite = ferry::cli::finite_number();
  app.add_option("--temp", a.sampling.temp, "temperature (0: greedy)")->check(finite)->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", a.sampling.top_k, "top-k (<= 0: off)")->capture_default_str();
  app.add_option("--top-p", a.sampling.top_p, "top-p (>= 1: off)")->check(finite)->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--min-p", a.sampling.min_p, "min-p (0: off)")->check(finite)->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--repeat-penalty", a.sampling.repeat_penalty, "repetition penalty (1: off)")
      ->check(finite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--repeat-last-n", a.sampling.repeat_last_n, "tokens the penalty looks back at (-1: all)")
      ->check(CLI::Range(-1, INT32_MAX))->capture_default_str();
  app.add_option("-s,--seed", a.sampling.seed, "sampling seed")->capture_default_str();
  app.add_option("-t,--threads", a.threads, "CPU threads (0: physical cores)")->check(CLI::Range(0, 4096));
  ferry::cli::add_cpu_isa_option(app, &a.cpu_isa);
  app.add_option("-c,--ctx-size", a.ctx, "context size in tokens (0: the model's)")->check(CLI::Range(0, INT32_MAX))
      ->capture_default_str();
  app.add_option("-b,--batch-size", a.batch,
                 "most tokens per prefill step (default: 1024 with the whole model on a GPU, else 512)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--device", a.device, "where to compute (ref: scalar, llama.cpp rounding; ref-exact: scalar, exact)")
      ->check(CLI::IsMember({"cpu", "ref", "ref-exact", "cuda", "emulated"}))->capture_default_str();
  app.add_flag("--json", a.json, "print one JSON object (ids, text, timings) instead of streaming text");
  app.add_option("--logits-out", a.logits_out, "write float32 logits [n_rows, n_vocab] of every position here");
  app.add_flag("--chat", a.chat,
               "render the prompt as a user turn with the model's own chat template (tokenizer.chat_template, "
               "`ferry template` shows the text); a file without a template gets its architecture's format and a "
               "warning, or an error when the architecture has none");
  app.add_option("--system", a.system, "system message for --chat");
  app.add_flag("--ignore-eos", a.ignore_eos, "keep generating past end-of-generation tokens");
  ferry::cli::add_hybrid_options(app, &a.hybrid, false);
  app.add_option("--mmproj", a.mmproj, "vision-language models: the multimodal projector GGUF (vision tower)");
  app.add_option("--image", a.images,
                 "JPEG or PNG image (repeat for several); each replaces one <__media__> marker in the prompt, or "
                 "goes in front of it when there is none. Needs --mmproj");
  app.add_option("--image-min-tokens", a.image_min_tokens, "smallest image in tokens after resizing (default: 8)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--image-max-tokens", a.image_max_tokens, "largest image in tokens after resizing (default: 4096)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--image-embd-out", a.image_embd_out, "write the images' embeddings here (float32 [tokens, n_embd])");
  auto* jo = app.add_flag("--json-object", a.json_object,
                          "JSON mode: the reply is one JSON object (generation ends when it closes)");
  auto* js = app.add_option("--json-schema-file", a.json_schema_file,
                 "structured output: the reply is one JSON object that this JSON Schema accepts (the subset "
                 "`ferry serve` takes: types, properties, required, enum, anyOf, items, $ref, string lengths, integer ranges)")
      ->excludes(jo);
  auto* gr = app.add_option("--grammar", a.grammar,
                            "the reply follows this GBNF grammar from its `root` rule (llama.cpp's format)")
                 ->excludes(jo)
                 ->excludes(js);
  app.add_option("--grammar-file", a.grammar_file, "the reply follows the GBNF grammar in this file")
      ->excludes(jo)
      ->excludes(js)
      ->excludes(gr);

  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  a.has_prompt = p_opt->count() > 0;
  if (!a.has_prompt && a.tokens.empty()) return ferry::cli::usage_error("ferry run needs -p TEXT or --tokens IDS");
  if (a.chat && !a.tokens.empty()) return ferry::cli::usage_error("--chat applies to -p text, not --tokens");
  if (!a.images.empty() && a.mmproj.empty()) return ferry::cli::usage_error("--image needs --mmproj (the vision tower)");
  if (!a.images.empty() && !a.tokens.empty()) return ferry::cli::usage_error("--image goes with -p text, not --tokens");
  try {
    return run(a);
  } catch (const std::exception& e) {
    return ferry::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
