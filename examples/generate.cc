// Generates text from a model through ferry's library: runtime::open puts the model on a device (the CPU,
// a GPU, or the emulated GPU) under a VRAM budget, and engine::generate runs the prompt and the decode.
//
//   example_generate MODEL.gguf [-p PROMPT] [-n TOKENS] [--device cpu|cuda|emulated] [--vram SIZE]
//                    [--profile GPU_PROFILE.json] [-c CONTEXT] [-t THREADS]
//
// e.g. on a machine without a GPU, SmolLM2 as an H200 would run it under a 1 GiB budget:
//   example_generate models/smollm2-135m-instruct-q4_1.gguf --device emulated --vram 1G
//       --profile tests/data/profiles/h200-host-measured.json
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generate.h"
#include "runtime/runtime.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [-p PROMPT] [-n TOKENS] [--device D] [--vram SIZE] [--profile FILE]"
                 " [-c CONTEXT] [-t THREADS]\n", argv[0]);
    return 2;
  }
  ferry::runtime::OpenOptions opt;
  opt.model_path = argv[1];
  opt.n_ctx = 1024;
  std::string prompt = "The three primary colors are";
  int n_predict = 32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "-p") {
      prompt = value;
    } else if (flag == "-n") {
      n_predict = std::atoi(value.c_str());
    } else if (flag == "--device") {
      opt.device = value;
    } else if (flag == "--vram") {
      opt.vram_budget = ferry::runtime::parse_size(value);
      if (!opt.vram_budget) {
        std::fprintf(stderr, "error: --vram: cannot read size '%s'\n", value.c_str());
        return 2;
      }
    } else if (flag == "--profile") {
      opt.profile_path = value;
    } else if (flag == "-c") {
      opt.n_ctx = std::atoi(value.c_str());
    } else if (flag == "-t") {
      opt.n_threads = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "error: unknown option '%s'\n", flag.c_str());
      return 2;
    }
  }
  opt.on_note = [](const std::string& note) { std::fprintf(stderr, "note: %s\n", note.c_str()); };

  auto opened = ferry::runtime::open(opt);
  if (!opened) {
    std::fprintf(stderr, "error: %s\n", opened.status().message().c_str());
    return 1;
  }
  ferry::runtime::Runtime& rt = **opened;

  ferry::engine::GenerateParams params;
  params.n_predict = n_predict;  // greedy sampling (the default temperature is 0)
  ferry::engine::GenerateCallbacks callbacks;
  callbacks.on_token = [](int32_t, std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  const std::vector<int32_t> tokens = ferry::engine::tokenize_prompt(rt.engine(), prompt);
  std::fputs(prompt.c_str(), stdout);
  auto result = ferry::engine::generate(rt.engine(), tokens, params, callbacks);
  std::fputc('\n', stdout);
  if (!result) {
    std::fprintf(stderr, "error: %s\n", result.status().message().c_str());
    return 1;
  }

  const ferry::runtime::ProcessMemory memory = rt.vram_peak_process();
  std::fprintf(stderr, "%s: %d tokens at %.1f tok/s | device memory of the process: %.1f MiB (%s)\n",
               rt.device().c_str(), result->stats.n_generated, result->stats.decode_tok_s,
               static_cast<double>(memory.peak_bytes) / (1 << 20), memory.source.c_str());
  if (rt.runner()) {
    const ferry::runtime::ProcessBudget& b = rt.budget();
    std::fprintf(stderr, "budget %.1f MiB = CUDA context %.1f MiB + reserve %.1f MiB + arena %.1f MiB\n",
                 b.budget / 1048576.0, b.context_bytes / 1048576.0, b.growth_reserve / 1048576.0,
                 b.arena / 1048576.0);
  }
  return 0;
}
