// The AMX panel kernels (kernels_amx.cc) against the AVX-512 panel path, bit for bit (the integer group
// sums are exact and the float epilogue runs in the same order): every quantized type, K with group
// counts that are not multiples of the 4-group tile loop, partial panels (N % 16 != 0) and every column
// count 1..kPanelCols. Kernel level through the emulated tiles (amx_emulated.cc) on any AVX-512 machine;
// with real AMX also the hardware kernels and CpuOps::matmul at the "amx" level (several threads: every
// pool worker configures its own tiles) — skipped, with a message, where AMX is not usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"
#include "tensor/quant.h"

namespace ferry::kernels {
namespace cpu {
void fill_amx_emulated(KernelTable* t);  // tests/kernels/amx_emulated.cc
}  // namespace cpu
namespace {

using cpu::KernelTable;
using cpu::MatArgs;
using cpu::MatKernel;

constexpr DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

struct AlignedBuf {
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<uint8_t[], Free> p;
  explicit AlignedBuf(size_t n) : p(static_cast<uint8_t*>(::operator new[](n + 64, std::align_val_t(64)))) {
    std::memset(p.get(), 0xA5, n + 64);  // garbage: the kernels must not depend on zeroed memory
  }
  uint8_t* get() const { return p.get(); }
};

struct Problem {
  DType type;
  int64_t K, N, T;
  std::vector<uint8_t> w;  // [N] rows of row_bytes(type, K)
  std::vector<float> x;    // [T][K]
};

Problem make_problem(DType type, int64_t K, int64_t N, int64_t T, uint32_t seed) {
  Problem p{type, K, N, T, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> wf(static_cast<size_t>(K));
  const size_t rb = row_bytes(type, K);
  p.w.resize(rb * static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    // Rows of different magnitude, some with an offset (exercises the mins and the extreme levels).
    const float scale = 0.02f * (1.f + static_cast<float>(n % 5)), shift = n % 3 == 0 ? 0.03f : 0.f;
    for (int64_t k = 0; k < K; ++k) wf[k] = nd(rng) * scale + shift;
    quantize_row(type, wf.data(), p.w.data() + rb * n, K);
  }
  p.x.resize(static_cast<size_t>(K * T));
  for (float& v : p.x) v = nd(rng);
  for (int64_t t = 0; t < T; ++t) p.x[t * K + (7 * t) % K] = 9.f;  // an outlier per token
  return p;
}

// The panel path as CpuOps::matmul drives it: act columns, then per panel of 16 rows a pack and one
// panel_mul per kPanelCols columns. out: [T][N].
std::vector<float> panel_matmul(const MatKernel& mk, const Problem& p) {
  const int64_t K = p.K, N = p.N, T = p.T;
  const size_t act_stride = mk.act_bytes(K), rb = row_bytes(p.type, K);
  AlignedBuf act(act_stride * static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) mk.quantize(p.x.data() + t * K, K, act.get() + t * act_stride);
  AlignedBuf panel(mk.panel_bytes(K)), tmp(mk.pack_tmp_bytes(K));
  std::vector<float> out(static_cast<size_t>(N * T), NAN);
  for (int64_t r0 = 0; r0 < N; r0 += cpu::kPanelRows) {
    const int nr = static_cast<int>(N - r0 < cpu::kPanelRows ? N - r0 : cpu::kPanelRows);
    mk.pack(K, p.w.data() + static_cast<size_t>(r0) * rb, rb, nr, panel.get(), tmp.get());
    for (int64_t c0 = 0; c0 < T; c0 += cpu::kPanelCols) {
      MatArgs a;
      a.K = K;
      a.w = panel.get();
      a.n_rows = nr;
      a.act = act.get() + static_cast<size_t>(c0) * act_stride;
      a.act_stride = act_stride;
      a.n_cols = static_cast<int>(T - c0 < cpu::kPanelCols ? T - c0 : cpu::kPanelCols);
      a.out = out.data() + c0 * N + r0;
      a.out_stride = static_cast<size_t>(N);
      mk.panel_mul(a);
    }
  }
  return out;
}

struct Shape {
  int64_t K, N;
};
// Group counts (K / G) around the kernel's 4-group loop (a tail of 1-3 groups) and K % 64 != 0 where
// the block size allows; N with partial panels.
std::vector<Shape> shapes_for(DType t) {
  if (traits(t).block_elems == 256) return {{256, 16}, {768, 19}, {1280, 33}};
  return {{32, 5}, {64, 3}, {96, 19}, {160, 16}, {192, 21}, {416, 47}, {1056, 33}};
}

// Compares the panel path of `got` against the AVX-512 table's, bit for bit.
void expect_equal_to_avx512(const KernelTable& got_tab, const char* what) {
  const KernelTable& ref_tab = cpu::kernel_table(CpuIsa::kAvx512);
  uint32_t seed = 7;
  for (DType type : kQuantTypes) {
    const MatKernel& mk = got_tab.mat[static_cast<uint32_t>(type)];
    const MatKernel& mr = ref_tab.mat[static_cast<uint32_t>(type)];
    ASSERT_NE(mk.pack, nullptr) << dtype_name(type);
    ASSERT_NE(mk.panel_mul, mr.panel_mul) << dtype_name(type) << ": " << what << " did not install its kernel";
    for (const Shape& s : shapes_for(type)) {
      // Every column count of a call (1..kPanelCols) and several calls per panel.
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 23, 40}) {
        const Problem p = make_problem(type, s.K, s.N, T, seed++);
        const std::vector<float> want = panel_matmul(mr, p), got = panel_matmul(mk, p);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << what << " " << dtype_name(type) << " K=" << s.K << " N=" << s.N << " T=" << T
                                     << " token " << i / s.N << " row " << i % s.N;
      }
    }
  }
}

TEST(CpuAmx, IsaNames) {
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAmx), "amx");
  EXPECT_EQ(cpu_isa_from_name("amx"), CpuIsa::kAmx);
  if (cpu_isa_supported(CpuIsa::kAmx)) {
    EXPECT_TRUE(cpu_isa_supported(CpuIsa::kAvx512));
    EXPECT_EQ(best_cpu_isa(), CpuIsa::kAmx);
  } else {
    EXPECT_NE(best_cpu_isa(), CpuIsa::kAmx);
  }
}

// The kernel's index arithmetic, tile shapes and epilogue, on emulated tiles: runs wherever AVX-512 does.
TEST(CpuAmx, EmulatedPanelEqualsAvx512) {
  if (!cpu_isa_supported(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 (the AMX kernels' epilogue needs it)";
  KernelTable emu = cpu::kernel_table(CpuIsa::kAvx512);
  cpu::fill_amx_emulated(&emu);
  expect_equal_to_avx512(emu, "emulated amx");
}

// The same on the tile hardware.
TEST(CpuAmx, PanelEqualsAvx512) {
  if (!cpu_isa_supported(CpuIsa::kAmx))
    GTEST_SKIP() << "AMX not usable here (needs AMX-TILE + AMX-INT8, OS tile state and the Linux permission)";
  expect_equal_to_avx512(cpu::kernel_table(CpuIsa::kAmx), "amx");
}

// CpuOps::matmul at the amx level equals the avx512 level bit for bit: prefill (panel path, several
// pool threads, each configuring its tiles, panel groups, partial panels) and decode (direct path,
// shared with avx512).
TEST(CpuAmx, MatmulEqualsAvx512) {
  if (!cpu_isa_supported(CpuIsa::kAmx))
    GTEST_SKIP() << "AMX not usable here (needs AMX-TILE + AMX-INT8, OS tile state and the Linux permission)";
  auto amx = make_cpu_ops(4, CpuIsa::kAmx);
  auto avx = make_cpu_ops(4, CpuIsa::kAvx512);
  uint32_t seed = 900;
  for (DType type : kQuantTypes) {
    const bool kq = traits(type).block_elems == 256;
    for (const Shape s : {Shape{kq ? 4096 : 4000, 16 * 21 + 3}, Shape{kq ? 1536 : 1120, 70}}) {
      for (int64_t T : {1, 3, 8, 9, 31, 64, 77}) {
        const Problem p = make_problem(type, s.K, s.N, T, seed++);
        std::vector<float> got(static_cast<size_t>(s.N * T), NAN), want(got.size(), NAN);
        auto* wd = const_cast<uint8_t*>(p.w.data());
        auto* xd = const_cast<float*>(p.x.data());
        const TensorView w = TensorView::make(type, wd, s.K, s.N), x = TensorView::make(DType::F32, xd, s.K, T);
        amx->matmul(w, x, TensorView::make(DType::F32, got.data(), s.N, T));
        avx->matmul(w, x, TensorView::make(DType::F32, want.data(), s.N, T));
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << dtype_name(type) << " K=" << s.K << " N=" << s.N << " T=" << T << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
