// Dispatch levels: resolve_cpu_isa (the --cpu-isa choice) accepts every level this CPU has and refuses
// the others and unknown names with a message naming what it has; every vector level installs the
// kernels the parity tests (test_cpu_matmul.cc, test_cpu_ops.cc) are meant to cover at that level, so
// those tests cannot pass vacuously by falling back to a lower level's kernels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

namespace ferry::kernels {
namespace {

TEST(CpuIsa, ResolveNamesAndRefusals) {
  for (const char* name : {"", "auto"}) {
    const Expected<CpuIsa> r = resolve_cpu_isa(name);
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(*r, default_cpu_isa());
  }
  const Expected<CpuIsa> bad = resolve_cpu_isa("avx9");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("avx2-vnni"), std::string::npos) << bad.status().message();
  for (CpuIsa isa : kAllCpuIsas) {
    EXPECT_EQ(cpu_isa_from_name(cpu_isa_name(isa)), isa);
    const Expected<CpuIsa> r = resolve_cpu_isa(cpu_isa_name(isa));
    if (cpu_isa_supported(isa)) {
      ASSERT_TRUE(r) << cpu_isa_name(isa) << ": " << r.status().message();
      EXPECT_EQ(*r, isa);
    } else {
      ASSERT_FALSE(r) << cpu_isa_name(isa);
      EXPECT_NE(r.status().message().find("cannot run"), std::string::npos) << r.status().message();
      EXPECT_NE(r.status().message().find("scalar"), std::string::npos) << "names the levels it has";
    }
  }
  EXPECT_NE(supported_cpu_isas().find("scalar"), std::string::npos);
}

// The AVX-VNNI level exists exactly where cpuid says AVX2 + AVX-VNNI, and is never below plain AVX2.
TEST(CpuIsa, AvxVnniLevel) {
  if (cpu_isa_supported(CpuIsa::kAvx2Vnni)) EXPECT_TRUE(cpu_isa_supported(CpuIsa::kAvx2));
  if (!cpu_isa_supported(CpuIsa::kAvx512) && cpu_isa_supported(CpuIsa::kAvx2Vnni))
    EXPECT_EQ(best_cpu_isa(), CpuIsa::kAvx2Vnni);
}

TEST(CpuIsa, VectorLevelsInstallPanelsAndCells) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512}) {
    if (!cpu_isa_supported(isa)) continue;
    const cpu::KernelTable& t = cpu::kernel_table(isa);
    EXPECT_EQ(t.isa, isa);
    std::vector<DType> types(std::begin(kWeightTypes), std::end(kWeightTypes));
    types.insert(types.end(), std::begin(kExpertWeightTypes), std::end(kExpertWeightTypes));
    for (DType type : types) {
      const cpu::MatKernel& m = t.mat[static_cast<uint32_t>(type)];
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + dtype_name(type));
      EXPECT_NE(m.direct, nullptr);
      EXPECT_NE(m.pack, nullptr) << "no panel (prefill) kernel";
      EXPECT_TRUE(m.panel_mul != nullptr || m.panel_il != nullptr);
      EXPECT_LE(m.panel_min_tokens, 64);
    }
    EXPECT_NE(t.attn_cells_scores, nullptr) << cpu_isa_name(isa);
    EXPECT_NE(t.attn_cells_values, nullptr) << cpu_isa_name(isa);
  }
  // The AVX-VNNI level replaces the quantized kernels of the AVX2 one (and only those).
  if (cpu_isa_supported(CpuIsa::kAvx2Vnni)) {
    const cpu::KernelTable& a = cpu::kernel_table(CpuIsa::kAvx2);
    const cpu::KernelTable& v = cpu::kernel_table(CpuIsa::kAvx2Vnni);
    for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::MXFP4}) {
      EXPECT_NE(a.mat[static_cast<uint32_t>(type)].direct, v.mat[static_cast<uint32_t>(type)].direct) << dtype_name(type);
      EXPECT_NE(a.mat[static_cast<uint32_t>(type)].panel_mul, v.mat[static_cast<uint32_t>(type)].panel_mul) << dtype_name(type);
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
