// EnvOptions: every FERRY_* variable parsed once, bad values reported by name with what was expected,
// the FERRY_CUDA_* switches read only by an experiments build (a production build lists them as ignored).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "base/env_options.h"

namespace ferry {
namespace {

EnvOptions parse(const std::map<std::string, std::string>& env, bool experiments) {
  return parse_env_options(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      experiments);
}

TEST(EnvOptions, DefaultsWhenNothingIsSet) {
  for (bool experiments : {false, true}) {
    const EnvOptions o = parse({}, experiments);
    EXPECT_TRUE(o.cpu_isa.empty());
    EXPECT_TRUE(o.cpu_huge_pages);
    EXPECT_FALSE(o.gemm_staging_bytes.has_value());
    EXPECT_FALSE(o.cuda.fuse.has_value());
    EXPECT_TRUE(o.cuda.ablate.empty());
    EXPECT_TRUE(o.errors.empty());
    EXPECT_TRUE(o.ignored.empty());
  }
}

TEST(EnvOptions, EveryBuildReadsTheCpuAndStagingOptions) {
  for (bool experiments : {false, true}) {
    const EnvOptions o =
        parse({{"FERRY_CPU_ISA", "avx2"}, {"FERRY_CPU_HUGEPAGES", "0"}, {"FERRY_GEMM_STAGING_MB", "16"}}, experiments);
    EXPECT_EQ(o.cpu_isa, "avx2");
    EXPECT_FALSE(o.cpu_huge_pages);
    ASSERT_TRUE(o.gemm_staging_bytes.has_value());
    EXPECT_EQ(*o.gemm_staging_bytes, 16ull << 20);
    EXPECT_TRUE(o.errors.empty());
  }
  EXPECT_EQ(parse({{"FERRY_GEMM_STAGING_MB", "0"}}, false).gemm_staging_bytes, 0u);  // a whole matrix
}

TEST(EnvOptions, BadValuesAreNamedWithWhatWasExpected) {
  const EnvOptions o = parse({{"FERRY_CPU_ISA", "avx9"},
                              {"FERRY_CPU_HUGEPAGES", "yes"},
                              {"FERRY_GEMM_STAGING_MB", "16M"},
                              {"FERRY_CUDA_FUSE", "2"},
                              {"FERRY_CUDA_MATVEC", "4"},
                              {"FERRY_CUDA_GLU_MIN_FILL", "x"},
                              {"FERRY_CUDA_ATTN_SPLITS", "65"},
                              {"FERRY_CUDA_ABLATE", "norm+bogus"}},
                             true);
  ASSERT_EQ(o.errors.size(), 8u);
  EXPECT_EQ(o.errors[0], "FERRY_CPU_ISA='avx9': expected scalar, avx2, avx2-vnni, avx512 or amx");
  EXPECT_EQ(o.errors[1], "FERRY_CPU_HUGEPAGES='yes': expected 0 or 1");
  EXPECT_NE(o.errors[2].find("FERRY_GEMM_STAGING_MB='16M'"), std::string::npos);
  EXPECT_EQ(o.errors[3], "FERRY_CUDA_MATVEC='4': expected a whole number from 2 to 3");
  EXPECT_EQ(o.errors[4], "FERRY_CUDA_FUSE='2': expected 0 or 1");
  // The bad ones keep their defaults.
  EXPECT_TRUE(o.cpu_isa.empty());
  EXPECT_TRUE(o.cpu_huge_pages);
  EXPECT_FALSE(o.gemm_staging_bytes.has_value());
  EXPECT_FALSE(o.cuda.fuse.has_value());
  EXPECT_FALSE(o.cuda.matvec_kernel.has_value());
  EXPECT_TRUE(o.cuda.ablate.empty());
}

TEST(EnvOptions, ExperimentsBuildReadsTheCudaSwitches) {
  const EnvOptions o = parse({{"FERRY_CUDA_MATVEC", "2"},
                              {"FERRY_CUDA_FUSE", "0"},
                              {"FERRY_CUDA_GLU_MIN_FILL", "0.5"},
                              {"FERRY_CUDA_ATTN_DEC_MAX_CELLS", "2048"},
                              {"FERRY_CUDA_PDL", "0"},
                              {"FERRY_CUDA_ATTN_SPLIT_SM", "3"},
                              {"FERRY_CUDA_ABLATE", "norm+rope,glu"}},
                             true);
  EXPECT_TRUE(o.errors.empty());
  EXPECT_TRUE(o.ignored.empty());
  EXPECT_EQ(o.cuda.matvec_kernel, 2);
  EXPECT_EQ(o.cuda.fuse, false);
  EXPECT_FLOAT_EQ(o.cuda.matvec_glu_min_fill.value_or(-1), 0.5f);
  EXPECT_EQ(o.cuda.attention_decode_max_cells, 2048);
  EXPECT_EQ(o.cuda.pdl, false);
  EXPECT_EQ(o.cuda.attention_split_blocks_per_sm, 3);
  EXPECT_EQ(o.cuda.ablate, (std::vector<std::string>{"norm", "rope", "glu"}));
}

TEST(EnvOptions, ProductionBuildIgnoresTheCudaSwitchesAndSaysWhich) {
  const EnvOptions o =
      parse({{"FERRY_CUDA_FUSE", "0"}, {"FERRY_CUDA_ABLATE", "norm"}, {"FERRY_CUDA_MATVEC", "bogus"}}, false);
  EXPECT_TRUE(o.errors.empty());  // not read, so not judged
  EXPECT_FALSE(o.cuda.fuse.has_value());
  EXPECT_TRUE(o.cuda.ablate.empty());
  EXPECT_EQ(o.ignored, (std::vector<std::string>{"FERRY_CUDA_MATVEC", "FERRY_CUDA_FUSE", "FERRY_CUDA_ABLATE"}));
}

TEST(EnvOptions, EmptyValuesCountAsUnset) {
  const EnvOptions o = parse({{"FERRY_CPU_ISA", ""}, {"FERRY_CUDA_FUSE", ""}}, false);
  EXPECT_TRUE(o.errors.empty());
  EXPECT_TRUE(o.ignored.empty());
  EXPECT_TRUE(o.cpu_isa.empty());
}

TEST(EnvOptions, NamesCoverEveryVariable) {
  const std::vector<std::string> names = env_option_names();
  EXPECT_EQ(names.size(), 3u + 18u);
  for (const std::string& n : names) EXPECT_EQ(n.rfind("FERRY_", 0), 0u) << n;
}

}  // namespace
}  // namespace ferry
