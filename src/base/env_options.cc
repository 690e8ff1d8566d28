// EnvOptions: one table of the FERRY_* variables, each parsed and validated by its kind.
#include "base/env_options.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace ferry {

namespace {

// Whole decimal number in [lo, hi]; nullopt otherwise.
std::optional<long long> parse_integer(const char* text, long long lo, long long hi) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

struct Parser {
  const std::function<const char*(const char*)>& lookup;
  EnvOptions& out;

  // The value of `name` when set and not empty.
  const char* value(const char* name) const {
    const char* v = lookup(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  }
  void bad(const char* name, const char* v, const char* expected) {
    out.errors.push_back(std::string(name) + "='" + v + "': expected " + expected);
  }
  void flag(const char* name, std::optional<bool>* field) {
    const char* v = value(name);
    if (v == nullptr) return;
    const std::string_view s(v);
    if (s == "0" || s == "1") *field = s == "1";
    else bad(name, v, "0 or 1");
  }
  void integer(const char* name, long long lo, long long hi, std::optional<int32_t>* field) {
    const char* v = value(name);
    if (v == nullptr) return;
    if (auto n = parse_integer(v, lo, hi)) {
      *field = static_cast<int32_t>(*n);
    } else {
      const std::string range = hi >= (1ll << 30) ? "a whole number >= " + std::to_string(lo)
                                                  : "a whole number from " + std::to_string(lo) + " to " +
                                                        std::to_string(hi);
      bad(name, v, range.c_str());
    }
  }
};

// Every FERRY_CUDA_* switch: name and how it is parsed into CudaExperiments.
struct CudaSwitch {
  const char* name;
  void (*parse)(Parser&, CudaExperiments&);
};

const CudaSwitch kCudaSwitches[] = {
    {"FERRY_CUDA_MATVEC",
     [](Parser& p, CudaExperiments& e) { p.integer("FERRY_CUDA_MATVEC", 2, 3, &e.matvec_kernel); }},
    {"FERRY_CUDA_FUSE", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_FUSE", &e.fuse); }},
    {"FERRY_CUDA_Q4K_WIDE", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_Q4K_WIDE", &e.matvec_q4k_wide); }},
    {"FERRY_CUDA_Q4K_PAIR", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_Q4K_PAIR", &e.matvec_q4k_pair); }},
    {"FERRY_CUDA_V3ALT", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_V3ALT", &e.matvec_v3_alt); }},
    {"FERRY_CUDA_NORM_FOLD",
     [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_NORM_FOLD", &e.matvec_norm_fold); }},
    {"FERRY_CUDA_GLU_FUSE", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_GLU_FUSE", &e.matvec_glu); }},
    {"FERRY_CUDA_GLU_MIN_FILL",
     [](Parser& p, CudaExperiments& e) {
       const char* v = p.value("FERRY_CUDA_GLU_MIN_FILL");
       if (v == nullptr) return;
       char* end = nullptr;
       const float f = std::strtof(v, &end);
       if (end != v && *end == '\0' && f >= 0.f && f <= 4.f) e.matvec_glu_min_fill = f;
       else p.bad("FERRY_CUDA_GLU_MIN_FILL", v, "a number from 0 to 4");
     }},
    {"FERRY_CUDA_ATTN_DEC", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_ATTN_DEC", &e.attention_decode); }},
    {"FERRY_CUDA_ATTN_DEC_MAX_CELLS",
     [](Parser& p, CudaExperiments& e) {
       p.integer("FERRY_CUDA_ATTN_DEC_MAX_CELLS", 1, INT32_MAX, &e.attention_decode_max_cells);
     }},
    {"FERRY_CUDA_ATTN_SPLITS",
     [](Parser& p, CudaExperiments& e) { p.integer("FERRY_CUDA_ATTN_SPLITS", 1, 64, &e.attention_decode_splits); }},
    {"FERRY_CUDA_QKNORM_FUSE",
     [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_QKNORM_FUSE", &e.qk_norm_fuse); }},
    {"FERRY_CUDA_PDL", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_PDL", &e.pdl); }},
    {"FERRY_CUDA_NORM_PDL", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_NORM_PDL", &e.norm_pdl); }},
    {"FERRY_CUDA_MOE_MMA", [](Parser& p, CudaExperiments& e) { p.flag("FERRY_CUDA_MOE_MMA", &e.moe_mma); }},
    {"FERRY_CUDA_ATTN_SPLIT_SM",
     [](Parser& p, CudaExperiments& e) {
       p.integer("FERRY_CUDA_ATTN_SPLIT_SM", 1, 16, &e.attention_split_blocks_per_sm);
     }},
    {"FERRY_CUDA_ATTN_DEC_CELLS",
     [](Parser& p, CudaExperiments& e) {
       p.integer("FERRY_CUDA_ATTN_DEC_CELLS", 1, 4096, &e.attention_decode_cells);
     }},
    {"FERRY_CUDA_ABLATE",
     [](Parser& p, CudaExperiments& e) {
       const char* v = p.value("FERRY_CUDA_ABLATE");
       if (v == nullptr) return;
       static const char* const kFamilies[] = {"norm", "rope", "attn", "combine", "glu", "matvec"};
       std::string name;
       const std::string_view s(v);
       for (size_t i = 0; i <= s.size(); ++i) {
         if (i < s.size() && s[i] != ',' && s[i] != '+') {
           name += s[i];
           continue;
         }
         if (name.empty()) continue;
         bool known = false;
         for (const char* f : kFamilies) known |= name == f;
         if (known) {
           e.ablate.push_back(name);
         } else {
           p.bad("FERRY_CUDA_ABLATE", v, "kernel families among norm, rope, attn, combine, glu, matvec");
           e.ablate.clear();
           return;
         }
         name.clear();
       }
     }},
};

}  // namespace

EnvOptions parse_env_options(const std::function<const char*(const char*)>& lookup, bool experiments) {
  EnvOptions out;
  Parser p{lookup, out};
  if (const char* v = p.value("FERRY_CPU_ISA")) {
    const std::string_view s(v);
    if (s == "scalar" || s == "avx2" || s == "avx2-vnni" || s == "avx512" || s == "amx") out.cpu_isa = v;
    else p.bad("FERRY_CPU_ISA", v, "scalar, avx2, avx2-vnni, avx512 or amx");
  }
  std::optional<bool> huge_pages;
  p.flag("FERRY_CPU_HUGEPAGES", &huge_pages);
  out.cpu_huge_pages = huge_pages.value_or(true);
  if (const char* v = p.value("FERRY_GEMM_STAGING_MB")) {
    if (auto mb = parse_integer(v, 0, 1ll << 20)) out.gemm_staging_bytes = static_cast<uint64_t>(*mb) << 20;
    else p.bad("FERRY_GEMM_STAGING_MB", v, "MiB as a whole number from 0 (a whole matrix) to 1048576");
  }
  for (const CudaSwitch& s : kCudaSwitches) {
    if (experiments) s.parse(p, out.cuda);
    else if (p.value(s.name) != nullptr) out.ignored.push_back(s.name);
  }
  return out;
}

const EnvOptions& env_options() {
  static const EnvOptions options = parse_env_options([](const char* name) { return std::getenv(name); },
                                                      kExperimentsBuild);
  return options;
}

std::vector<std::string> env_option_names() {
  std::vector<std::string> names = {"FERRY_CPU_ISA", "FERRY_CPU_HUGEPAGES", "FERRY_GEMM_STAGING_MB"};
  for (const CudaSwitch& s : kCudaSwitches) names.push_back(s.name);
  return names;
}

}  // namespace ferry
