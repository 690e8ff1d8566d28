// Every FERRY_* environment variable the library and the `ferry` binary read, parsed once, in one place
// (docs/ENVIRONMENT.md lists them with what each is for). Code receives the parsed values (EnvOptions,
// or an options struct made from it, e.g. kernels::CudaOpsOptions); nothing else calls getenv for them.
//
// Every build reads FERRY_CPU_ISA, FERRY_CPU_HUGEPAGES and FERRY_GEMM_STAGING_MB. The FERRY_CUDA_*
// switches choose alternative kernels for A/B studies or leave kernels out (FERRY_CUDA_ABLATE: timing
// only, the results are wrong), so only an experiments build reads them (cmake -DFERRY_EXPERIMENTS=ON,
// FERRY_EXPERIMENTS=1 in the code); a production build ignores them, runs the default kernels, and lists
// the ones that are set in EnvOptions::ignored (the CLI says so once).
//
// This header is plain C++17: the CUDA kernels' sources include it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#ifndef FERRY_EXPERIMENTS
#define FERRY_EXPERIMENTS 0
#endif

namespace ferry {

// True in an experiments build.
inline constexpr bool kExperimentsBuild = FERRY_EXPERIMENTS != 0;

// The FERRY_CUDA_* switches (experiments build only); unset = the default of the option each overrides
// (kernels::CudaOpsOptions and kernels::cuda::LaunchSettings say what the defaults are).
struct CudaExperiments {
  std::optional<int32_t> matvec_kernel;               // FERRY_CUDA_MATVEC: 2 | 3
  std::optional<bool> fuse;                           // FERRY_CUDA_FUSE: 0 | 1
  std::optional<bool> matvec_q4k_wide;                // FERRY_CUDA_Q4K_WIDE: 0 | 1
  std::optional<bool> matvec_q4k_pair;                // FERRY_CUDA_Q4K_PAIR: 0 | 1
  std::optional<bool> matvec_v3_alt;                  // FERRY_CUDA_V3ALT: 0 | 1
  std::optional<bool> matvec_norm_fold;               // FERRY_CUDA_NORM_FOLD: 0 | 1
  std::optional<bool> matvec_glu;                     // FERRY_CUDA_GLU_FUSE: 0 | 1
  std::optional<float> matvec_glu_min_fill;           // FERRY_CUDA_GLU_MIN_FILL: 0 .. 4
  std::optional<bool> attention_decode;               // FERRY_CUDA_ATTN_DEC: 0 | 1
  std::optional<int32_t> attention_decode_max_cells;  // FERRY_CUDA_ATTN_DEC_MAX_CELLS: >= 1
  std::optional<int32_t> attention_decode_splits;     // FERRY_CUDA_ATTN_SPLITS: 1 .. 64
  std::optional<bool> qk_norm_fuse;                   // FERRY_CUDA_QKNORM_FUSE: 0 | 1
  std::optional<bool> pdl;                            // FERRY_CUDA_PDL: 0 | 1
  std::optional<bool> norm_pdl;                       // FERRY_CUDA_NORM_PDL: 0 | 1
  std::optional<int32_t> attention_split_blocks_per_sm;  // FERRY_CUDA_ATTN_SPLIT_SM: 1 .. 16
  std::optional<int32_t> attention_decode_cells;      // FERRY_CUDA_ATTN_DEC_CELLS: 1 .. 4096
  std::optional<bool> moe_mma;                        // FERRY_CUDA_MOE_MMA: 0 | 1
  // FERRY_CUDA_ABLATE: kernel families whose launches are skipped ("norm+rope+attn+combine+glu", any
  // subset, "," or "+" between names, also "matvec").
  std::vector<std::string> ablate;
};

struct EnvOptions {
  std::string cpu_isa;                          // FERRY_CPU_ISA: scalar | avx2 | avx2-vnni | avx512 | amx; "": the best
  bool cpu_huge_pages = true;                   // FERRY_CPU_HUGEPAGES: 0 | 1
  std::optional<uint64_t> gemm_staging_bytes;   // FERRY_GEMM_STAGING_MB (MiB; 0: a whole matrix)
  CudaExperiments cuda;                         // experiments build only; empty in a production build
  // One line per bad value ("FERRY_X='v': expected ..."); such a variable keeps its default.
  std::vector<std::string> errors;
  // FERRY_CUDA_* variables that are set but that this (production) build does not read.
  std::vector<std::string> ignored;
};

// Parses the variables through `lookup` (getenv's contract: nullptr when unset); `experiments` says
// whether the FERRY_CUDA_* switches are read (an experiments build) or only noted as ignored.
EnvOptions parse_env_options(const std::function<const char*(const char*)>& lookup, bool experiments);

// The process's options: parsed from the environment on first use, fixed for the process's life.
const EnvOptions& env_options();

// The names of every variable parse_env_options reads, FERRY_CUDA_* included (for docs and tests).
std::vector<std::string> env_option_names();

}  // namespace ferry
