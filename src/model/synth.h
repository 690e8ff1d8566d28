// ferry synth: GGUF files with random weights at named presets (tiny ones for tests, real shapes for
// speed work). Tensor names, metadata keys and shapes follow what llama.cpp's converter writes for each
// architecture, and the tokenizer metadata is complete (byte-level BPE or SentencePiece-style vocab of
// exactly the preset's size) so llama.cpp loads and runs the file as it does ferry. Weights are
// generated and quantized in row chunks on worker threads and streamed to disk, so a 16 GB file needs
// only a few chunks of memory. Output is a pure function of (preset, type, seed, layers, route skew).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model_spec.h"
#include "tensor/dtype.h"

namespace ferry::gguf {
class Writer;
}

namespace ferry::model {

// How the vocabulary is built and which pre-tokenizer / special tokens it declares.
enum class SynthVocabStyle : uint8_t {
  kLlama3,  // gpt2 byte-level BPE, pre "llama-bpe", <|begin_of_text|> ... specials at the end
  kQwen2,   // gpt2 byte-level BPE, pre "qwen2", <|endoftext|> <|im_start|> ... then [PADn]
  kQwen3,   // as kQwen2 plus <think> / <tool_response> tokens
  kGemma,   // SentencePiece-style ("llama" model): scores, token types, <0xXX> byte tokens
  kGptOss,  // gpt2 byte-level BPE, pre "gpt-4o" (o200k), then o200k_harmony's specials (<|start|>, ...)
};

struct SynthPreset {
  const char* name;
  const char* description;  // the real model the shapes come from
  Arch arch;
  bool tiny;                // small enough for tests (every weight type works, < 10 MB; < 32 MB with experts)
  int32_t n_layer;
  int32_t n_embd;           // d
  int32_t n_head;
  int32_t n_kv_head;
  int32_t head_dim;
  int32_t n_ff;
  int32_t n_vocab;
  int32_t n_ctx_train;
  float rms_eps;
  float rope_base;
  float rope_base_swa;      // gemma3 local layers; 0 = key not written
  float rope_linear_factor; // rope.scaling.type=linear with this factor; 0 = none
  float llama3_rope_factor; // llama3-style rope_freqs.weight (factor, low 1, high 4, orig ctx 8192); 0 = none
  int32_t sliding_window;   // gemma3; 0 = none
  bool tied_output;         // no output.weight: the head reuses token_embd.weight
  bool qkv_bias;            // qwen2
  bool head_dim_keys;       // write attention.key_length / value_length (config has head_dim)
  SynthVocabStyle vocab;
  // Mixture of experts (0: dense): every layer's FFN is n_expert experts of width n_ff_expert, n_expert_used
  // per token (Mixtral's llama: n_ff_expert == n_ff; qwen3moe: n_ff is only the metadata key).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_expert = 0;
  // gpt-oss: YaRN rope scaling (rope.scaling.type yarn, factor, original context; 0 = none). Its experts
  // are always MXFP4, as the released files ship them; every other weight follows --type.
  float yarn_factor = 0.f;
  int32_t yarn_orig_ctx = 0;
};

// All presets, in `ferry synth --list` order.
const std::vector<SynthPreset>& synth_presets();
const SynthPreset* find_synth_preset(std::string_view name);

// One tensor of the file as it will be written.
struct SynthTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;  // ggml order, ne[0] innermost (row length)
  DType requested = DType::F32;  // the type asked for; differs from `type` after a fallback
};

// The tensor list for a preset at a weight type: 2-D weights and stacked experts in `type` (with
// llama-quantize's fallback for rows that are not a multiple of the block: Q2_K/Q3_K->Q4_0, Q4_K->Q5_0,
// Q5_K->Q5_1, Q6_K->Q8_0, F16 when even that does not fit), norms / biases / rope factors and the MoE
// routers (ffn_gate_inp, which llama-quantize never quantizes) in F32; gpt-oss's experts in MXFP4.
// `n_layer` 0 = preset's.
// Errors: a type that is not a weight type => kInvalidArgument.
Expected<std::vector<SynthTensor>> synth_tensors(const SynthPreset& preset, DType type, int32_t n_layer = 0);

// The vocabulary written for a preset (exposed for tests).
struct SynthVocab {
  std::string model;   // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;     // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // llama.cpp token types: 1 normal, 3 control, 4 user, 5 unused, 6 byte
  std::vector<float> scores;         // SentencePiece only
  std::vector<std::string> merges;   // BPE only: "left right", in rank order
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false;
  std::string chat_template;
};
SynthVocab synth_vocab(const SynthPreset& preset);

// qwen2vl presets: rope.dimension_sections (time, height, width, 0); zeros for the others.
std::vector<int32_t> synth_rope_sections(const SynthPreset& preset);

struct SynthProgress {
  uint64_t bytes_done = 0;   // tensor data bytes written so far
  uint64_t bytes_total = 0;  // tensor data bytes of the whole file
  const char* tensor = "";   // the tensor being written
};

struct SynthOptions {
  std::string preset;
  DType type = DType::F16;
  std::string path;
  uint64_t seed = 0;
  int32_t n_layer = 0;  // 0 = the preset's
  int32_t n_threads = 0;  // 0 = hardware concurrency
  // Speed studies: each big tensor repeats a pool of 2 distinct quantized chunks (~1M values each,
  // different per tensor) instead of quantizing every row; still real rows of the type, and far faster.
  bool fast = false;
  // Mixture-of-experts presets: skewed expert popularity (model/synth_route_skew.h); 0 = random routers.
  double route_skew = 0;
  std::function<void(const SynthProgress&)> on_progress;  // called from the writing thread
};

struct SynthResult {
  uint64_t data_bytes = 0;
  int64_t n_params = 0;
  size_t n_tensors = 0;
  // One line per group of tensors stored in another type than requested (llama-quantize's fallback).
  std::vector<std::string> notes;
};

// Writes the file. Unknown preset or unsupported type => kInvalidArgument; I/O failure => kIo.
Expected<SynthResult> synth_write(const SynthOptions& options);

// For writers of other files (the vision projector, model/vision/synth_mmproj.h): a tensor of random
// values ~N(mean, stddev) (mean 1: a norm, else 0), drawn per (seed, name, row chunk) as synth_write
// draws them and stored in t.type.
struct SynthRandom {
  SynthTensor t;
  float mean = 0.f;
  float stddev = 1.f;
};
// Writes the data of `tensors` in order (their infos must already be added and begin_data() called).
Status synth_write_random(gguf::Writer& w, const std::vector<SynthRandom>& tensors, uint64_t seed, int n_threads,
                          SynthProgress& prog, const SynthOptions& opt);

}  // namespace ferry::model
