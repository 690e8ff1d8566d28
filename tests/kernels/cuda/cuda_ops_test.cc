// test_cuda_ops: every CudaOps op (every weight type for matmul and embed, both matmul paths, the v1 and
// v2 decode kernels, split-layout weights, matmul_many, both attention kernels, split and unsplit) against RefOps on random inputs of awkward sizes (token counts
// 1, 3, 17, 100; row counts not multiples of the block's rows). Outputs are poisoned (NaN) before each
// run. Also the CudaDevice: budget refusal, copies, events. Skips when no usable GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "kernels/cuda/cuda_test_util.h"
#include "exec/device.h"
#include "exec/device_cuda.h"
#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"
#include "tensor/repack.h"

namespace ferry::cudatest {
namespace {

using kernels::Activation;
using kernels::AttnParams;
using kernels::BatchMeta;
using kernels::KvView;
using kernels::RefOps;
using kernels::RopeParams;

Env* get_env() {
  std::string why;
  Env* e = env(&why);
  static bool told = false;
  if (!e && !told) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    told = true;
  }
  return e;
}

// Waits for the GPU; a CUDA error fails the test (and is cleared so the next checks still run).
#define SYNC()                                           \
  do {                                                   \
    const Status sync_st_ = E->sync();                   \
    EXPECT_TRUE(sync_st_.is_ok()) << sync_st_.message(); \
  } while (0)

#define REQUIRE_GPU()                                   \
  Env* E = get_env();                                   \
  if (E == nullptr) GTEST_SKIP() << "no usable CUDA GPU"

HostTensor random_f32(std::mt19937& rng, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, float lo = -1.f,
                      float hi = 1.f) {
  HostTensor t(DType::F32, ne0, ne1, ne2);
  fill_uniform(rng, t.data<float>(), t.n(), lo, hi);
  return t;
}

HostTensor i32(const std::vector<int32_t>& v) {
  HostTensor t(DType::I32, static_cast<int64_t>(v.size()));
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}

HostTensor f16_as_f32(const HostTensor& h) {
  HostTensor t(DType::F32, h.n());
  const uint16_t* src = reinterpret_cast<const uint16_t*>(h.bytes.data());
  for (int64_t i = 0; i < h.n(); ++i) t.data<float>()[i] = fp16_to_fp32(src[i]);
  return t;
}

void expect_close(const HostTensor& got, const HostTensor& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.n(), ref.n());
  const ErrStats s = compare(got.data<float>(), ref.data<float>(), got.n());
  EXPECT_EQ(s.non_finite, 0) << what << ": " << describe(s);
  EXPECT_LE(s.nrmse, tol) << what << ": " << describe(s);
  EXPECT_LE(s.max_abs, 8 * tol * std::max(s.ref_max, 1e-3)) << what << ": " << describe(s);
}

// ---- matmul ----------------------------------------------------------------------------------------

// Normalized RMS error allowed per path. Decode path, quantized W: x is quantized to int8 blocks of 32
// (the same scheme llama.cpp uses), so the reference is computed with x quantized the same way
// (q8_activations) and only float summation order remains; float W: exact products in F32. GEMM path:
// x rounded to F16 (BF16 for BF16 weights) and W dequantized to F16 (~5e-4 relative per product).
// Why not compare the decode path with the exact reference: with N = 1 a single output whose terms
// cancel (Q5_1 K=256: ref 0.319 from terms summing to ~50 in magnitude) turns the int8 noise of x into
// a 7.8 % "nrmse" (and F16 rounding into 0.30 %) although the kernel is exact for its inputs (checked
// on the host with the same quant_units.h code: got == the q8 reference to 5 digits).
double matmul_tol(DType t, int path) {
  if (path == 0) return traits(t).quantized ? 1e-3 : 1e-5;
  if (t == DType::F32) return 1e-5;
  return 1e-2;  // F16 / BF16 rounding; single outputs with cancelling terms need the headroom
}

// x [K, T] with every block of 32 replaced by its int8 quantization d * q, d = max|x| / 127, q =
// round-half-even(x / d): exactly what matvec.cu's quantize_q8_kernel hands the decode kernels.
HostTensor q8_activations(const HostTensor& x, int64_t K, int64_t T) {
  HostTensor y(DType::F32, K, T);
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  for (int64_t b = 0; b < K * T / 32; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(src[32 * b + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i)
      dst[32 * b + i] = amax > 0.f ? d * static_cast<float>(std::nearbyint(src[32 * b + i] / d)) : 0.f;
  }
  return y;
}

struct MatmulCase {
  DType type;
  int64_t K, N, T;
};

class CudaMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(CudaMatmul, BothPathsMatchRef) {
  REQUIRE_GPU();
  const DType t = GetParam();
  std::mt19937 rng(static_cast<unsigned>(t) * 31 + 5);
  const bool quant = traits(t).quantized;
  // K: a multiple of 256 for the k-quants; odd widths for the float types to hit the scalar tails.
  const std::vector<std::pair<int64_t, int64_t>> shapes = quant ? std::vector<std::pair<int64_t, int64_t>>{{768, 37}, {256, 1}, {2048, 130}}
                                                                : std::vector<std::pair<int64_t, int64_t>>{{100, 37}, {768, 130}, {1032, 5}};
  RefOps ref;
  for (const auto& [K, N] : shapes) {
    HostTensor w = random_weights(rng, t, K, N);
    DevTensor dw(*E, w);
    for (int64_t T : {1, 3, 8, 17, 100}) {
      HostTensor x = random_f32(rng, K, T);
      HostTensor want(DType::F32, N, T);
      ref.matmul(w.view, x.view, want.view);
      // The decode path's reference for quantized W (see matmul_tol).
      HostTensor want_q8(DType::F32, N, T);
      if (quant) ref.matmul(w.view, q8_activations(x, K, T).view, want_q8.view);
      const HostTensor& want_dec = quant ? want_q8 : want;
      DevTensor dx(*E, x);
      DevTensor dout(*E, DType::F32, N, T);
      for (int path : {0, 1}) {
        dout.poison();
        E->ops->matmul_path(dw.view, dx.view, dout.view, path);
        SYNC();
        expect_close(dout.download(), path == 0 ? want_dec : want, matmul_tol(t, path),
                     std::string(dtype_name(t)) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                         " T=" + std::to_string(T) + " path=" + std::to_string(path));
      }
      if (T == 1 && quant) {  // the v1 single-token variants with 2 and 4 rows per warp
        for (int rpw : {2, 4}) {
          kernels::CudaOpsOptions o;
          o.matvec_rows_per_warp = rpw;
          o.matvec_v2 = false;
          kernels::CudaOps ops(*E->ctx, o);
          dout.poison();
          ops.matmul_path(dw.view, dx.view, dout.view, 0);
          SYNC();
          expect_close(dout.download(), want_dec, matmul_tol(t, 0),
                       std::string(dtype_name(t)) + " N=" + std::to_string(N) + " rows/warp=" + std::to_string(rpw));
        }
      }
      if (T <= 8) {  // the v1 kernels (the default takes v2 where matvec_v2_supported)
        kernels::CudaOpsOptions o;
        o.matvec_v2 = false;
        kernels::CudaOps ops(*E->ctx, o);
        dout.poison();
        ops.matmul_path(dw.view, dx.view, dout.view, 0);
        SYNC();
        expect_close(dout.download(), want_dec, matmul_tol(t, 0),
                     std::string(dtype_name(t)) + " v1 N=" + std::to_string(N) + " T=" + std::to_string(T));
      }
      // The automatic choice.
      dout.poison();
      E->ops->matmul(dw.view, dx.view, dout.view);
      SYNC();
      expect_close(dout.download(), T <= 8 ? want_dec : want, matmul_tol(t, T <= 8 ? 0 : 1),
                   std::string(dtype_name(t)) + " auto");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, CudaMatmul, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
// gpt-oss's MXFP4 (ggml layout only: the v1 kernels and the F16 dequantization for cuBLAS).
INSTANTIATE_TEST_SUITE_P(CudaMxfp4, CudaMatmul, ::testing::ValuesIn(kExpertWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// ---- decode kernels v2 (16-byte loads) and the split layout -------------------------------------------

// Rows [r0, r0 + N), tokens [0, T) of a [rows, tokens] F32 host tensor, as a contiguous [N, T].
HostTensor sub(const HostTensor& a, int64_t r0, int64_t N, int64_t T) {
  HostTensor s(DType::F32, N, T);
  const int64_t ld = a.view.ne[0];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) s.data<float>()[t * N + n] = a.data<float>()[t * ld + r0 + n];
  return s;
}

// What the v2 kernels read: the split layout of the legacy types, Q2_K, Q3_K and Q6_K (repacked on the
// host), ggml Q4_K / Q5_K, and the float types.
struct V2Case {
  DType type;
  bool split;
};
const V2Case kV2Cases[] = {{DType::Q4_0, true},  {DType::Q4_1, true},  {DType::Q5_0, true},  {DType::Q5_1, true},
                           {DType::Q8_0, true},  {DType::Q2_K, true},  {DType::Q3_K, true},  {DType::Q6_K, true},
                           {DType::Q4_K, false}, {DType::Q5_K, false}, {DType::F16, false},  {DType::BF16, false},
                           {DType::F32, false}};
std::string v2_name(const V2Case& c) { return std::string(dtype_name(c.type)) + (c.split ? "_split" : ""); }

class CudaMatvecV2 : public ::testing::TestWithParam<V2Case> {};

// Every awkward shape and token count 1..8 against the reference (x quantized as the kernels see it for
// the quantized types): N = 1 (one row, S = 8 warps split it), 7, 1000 (and rows [3, 1003): a row slice
// that starts mid-tensor), 4097 (a block's last row group half full); K = 256 (fewer chunks than lanes),
// 4096, 14336. out has a row stride larger than N.
TEST_P(CudaMatvecV2, ShapesAndTokenCounts) {
  REQUIRE_GPU();
  const auto [t, split] = GetParam();
  const bool quant = traits(t).quantized;
  std::mt19937 rng(static_cast<unsigned>(t) * 7 + 1);
  RefOps ref;
  for (int64_t K : {256, 4096, 14336}) {
    if (split && !split_layout_supported(t, K)) continue;
    // 1003 random rows, tiled to n_max rows (and their reference outputs likewise): the reference and the
    // quantization cost of 1003 rows, row indices up to 4097.
    constexpr int64_t kBase = 1003;
    const int64_t n_max = K == 14336 ? kBase : 4097;
    HostTensor base = random_weights(rng, t, K, kBase);
    HostTensor x = random_f32(rng, K, 8);
    HostTensor want_base(DType::F32, kBase, 8);
    ref.matmul(base.view, quant ? q8_activations(x, K, 8).view : x.view, want_base.view);
    HostTensor w(t, K, n_max), want(DType::F32, n_max, 8);
    const size_t rb = base.view.row_size();
    for (int64_t n = 0; n < n_max; ++n) {
      std::memcpy(w.view.row(n), base.view.row(n % kBase), rb);
      for (int64_t tk = 0; tk < 8; ++tk) want.data<float>()[tk * n_max + n] = want_base.data<float>()[tk * kBase + n % kBase];
    }
    DevTensor dw(*E, split ? to_split(w) : w), dx(*E, x), dout(*E, DType::F32, n_max, 8);
    ASSERT_EQ(dw.view.layout, split ? Layout::kSplit : Layout::kGgml);
    for (int64_t N : {1, 7, 1000, 4097}) {
      for (int64_t r0 : {0, 3}) {
        if (r0 + N > n_max || (r0 > 0 && N != 1000)) continue;
        for (int64_t T = 1; T <= 8; ++T) {
          TensorView xv = dx.view, ov = dout.view;
          xv.ne[1] = T;
          ov.ne[0] = N;  // nb[1] stays n_max floats
          ov.ne[1] = T;
          dout.poison();
          E->ops->matmul_path(dw.view.rows(r0, N), xv, ov, 0);
          SYNC();
          expect_close(sub(dout.download(), 0, N, T), sub(want, r0, N, T), matmul_tol(t, 0),
                       v2_name(GetParam()) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                           " r0=" + std::to_string(r0) + " T=" + std::to_string(T));
        }
      }
    }
    // Without programmatic dependent launch, and (split types) the same weights in ggml's layout through
    // the v1 kernels: the same reference.
    const int64_t N = std::min<int64_t>(1000, n_max), T = 3;
    TensorView xv = dx.view, ov = dout.view;
    xv.ne[1] = T;
    ov.ne[0] = N;
    ov.ne[1] = T;
    kernels::CudaOpsOptions o;
    o.matvec_pdl = false;
    kernels::CudaOps no_pdl(*E->ctx, o);
    dout.poison();
    no_pdl.matmul_path(dw.view.rows(0, N), xv, ov, 0);
    SYNC();
    expect_close(sub(dout.download(), 0, N, T), sub(want, 0, N, T), matmul_tol(t, 0), v2_name(GetParam()) + " no PDL");
    if (split) {
      DevTensor dg(*E, w);
      dout.poison();
      E->ops->matmul_path(dg.view.rows(0, N), xv, ov, 0);
      SYNC();
      expect_close(sub(dout.download(), 0, N, T), sub(want, 0, N, T), matmul_tol(t, 0),
                   v2_name(GetParam()) + " ggml layout, v1");
    }
  }
}

// Split weights through the prefill path (dequantize the split rows + cuBLAS), also what decode falls back
// to when the v2 kernels are off.
TEST_P(CudaMatvecV2, SplitGemmPath) {
  REQUIRE_GPU();
  const auto [t, split] = GetParam();
  if (!split) GTEST_SKIP() << "ggml layout: covered by CudaMatmul";
  std::mt19937 rng(static_cast<unsigned>(t) * 11 + 3);
  RefOps ref;
  const int64_t K = 4096, N = 777;
  HostTensor w = random_weights(rng, t, K, N);
  DevTensor dw(*E, to_split(w));
  for (int64_t T : {1, 17, 100}) {
    HostTensor x = random_f32(rng, K, T);
    HostTensor want(DType::F32, N, T);
    ref.matmul(w.view, x.view, want.view);
    DevTensor dx(*E, x), dout(*E, DType::F32, N, T);
    dout.poison();
    E->ops->matmul_path(dw.view, dx.view, dout.view, 1);
    SYNC();
    expect_close(dout.download(), want, matmul_tol(t, 1), v2_name(GetParam()) + " gemm T=" + std::to_string(T));
    if (T == 1) {
      kernels::CudaOpsOptions o;
      o.matvec_v2 = false;
      kernels::CudaOps v1(*E->ctx, o);
      dout.poison();
      v1.matmul(dw.view, dx.view, dout.view);
      SYNC();
      expect_close(dout.download(), want, matmul_tol(t, 1), v2_name(GetParam()) + " v2 off -> gemm");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(V2, CudaMatvecV2, ::testing::ValuesIn(kV2Cases),
                         [](const ::testing::TestParamInfo<V2Case>& i) { return v2_name(i.param); });

// matmul_many: q/k/v-like weights of mixed types and layouts sharing x; each output as its own matmul.
TEST(CudaOps, MatmulMany) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  RefOps ref;
  const int64_t K = 4096;
  const DType types[] = {DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::Q5_0, DType::F16, DType::Q4_K,
                         DType::Q4_K, DType::Q4_K, DType::Q8_0};
  const int64_t rows[] = {1000, 300, 200, 100, 64, 5, 7, 9, 33};
  const bool split[] = {false, false, true, false, false, false, false, false, true};
  constexpr int n = 9;  // 5 Q4_K: two launches (4 + 1)
  std::vector<HostTensor> w;
  std::vector<std::unique_ptr<DevTensor>> dw;
  for (int i = 0; i < n; ++i) {
    w.push_back(random_weights(rng, types[i], K, rows[i]));
    dw.push_back(std::make_unique<DevTensor>(*E, split[i] ? to_split(w[i]) : w[i]));
  }
  for (int64_t T : {1, 3, 8, 12}) {
    HostTensor x = random_f32(rng, K, T);
    DevTensor dx(*E, x);
    std::vector<std::unique_ptr<DevTensor>> dout;
    std::vector<TensorView> outs;
    std::vector<const TensorView*> ws;
    for (int i = 0; i < n; ++i) {
      dout.push_back(std::make_unique<DevTensor>(*E, DType::F32, rows[i], T));
      dout.back()->poison();
      outs.push_back(dout.back()->view);
      ws.push_back(&dw[i]->view);
    }
    for (bool pdl : {true, false}) {
      kernels::CudaOpsOptions o;
      o.matvec_pdl = pdl;
      kernels::CudaOps ops(*E->ctx, o);
      ops.matmul_many(n, ws.data(), dx.view, outs.data());
      SYNC();
      for (int i = 0; i < n; ++i) {
        const bool quant = traits(types[i]).quantized, decode = T <= 8;
        HostTensor want(DType::F32, rows[i], T);
        ref.matmul(w[i].view, quant && decode ? q8_activations(x, K, T).view : x.view, want.view);
        expect_close(dout[i]->download(), want, matmul_tol(types[i], decode ? 0 : 1),
                     "matmul_many #" + std::to_string(i) + " " + dtype_name(types[i]) + " T=" + std::to_string(T) +
                         (pdl ? " pdl" : ""));
        dout[i]->poison();
      }
    }
  }
}

// ---- decode fusions and the v3 matvec ------------------------------------------------------------------

// `got` and `want` (two CudaOps with different options) multiply the same weights by random x [K, T]: the
// outputs agree within 1e-6 (normalized RMS).
void expect_same_matmul(Env* E, std::mt19937& rng, kernels::CudaOps& got, kernels::CudaOps& want, const DevTensor& dw,
                        int64_t K, int64_t N, int64_t T, const std::string& what) {
  HostTensor x = random_f32(rng, K, T);
  DevTensor dx(*E, x), dg(*E, DType::F32, N, T), dwant(*E, DType::F32, N, T);
  dg.poison();
  dwant.poison();
  want.matmul(dw.view, dx.view, dwant.view);
  got.matmul(dw.view, dx.view, dg.view);
  SYNC();
  expect_close(dg.download(), dwant.download(), 1e-6, what);
}

// The persistent v3 kernel (rows >= the GPU's warp slots, 1-2 tokens) against v2 on the same weights:
// K = 14336 gives rows of several rounds with a partial last one; K = 4096 one round per row.
TEST(CudaOps, MatvecV3MatchesV2) {
  REQUIRE_GPU();
  std::mt19937 rng(21);
  const V2Case cases[] = {{DType::Q4_0, true}, {DType::Q4_K, false}, {DType::Q6_K, true},
                          {DType::Q8_0, true}, {DType::F16, false},  {DType::Q5_K, false}};
  kernels::CudaOpsOptions o2, o3, o3alt;
  o2.matvec_kernel = 2;
  o3.matvec_kernel = 3;
  o3alt.matvec_kernel = 3;
  o3alt.matvec_v3_alt = true;  // 1 chunk a tile at 4 blocks per SM (the A/B variant)
  kernels::CudaOps v2(*E->ctx, o2), v3(*E->ctx, o3), v3alt(*E->ctx, o3alt);
  for (const V2Case& c : cases) {
    for (int64_t K : {4096, 14336}) {
      const int64_t N = K == 4096 ? 5003 : 1500;
      HostTensor w = random_weights(rng, c.type, K, N);
      DevTensor dw(*E, c.split ? to_split(w) : w);
      const std::string shape = v2_name(c) + " K=" + std::to_string(K);
      for (int64_t T : {1, 2})
        expect_same_matmul(E, rng, v3, v2, dw, K, N, T, "v3 vs v2 " + shape + " T=" + std::to_string(T));
      expect_same_matmul(E, rng, v3alt, v3, dw, K, N, 1, "v3 1-chunk tiles vs v3 " + shape);
    }
  }
}

// The 32-byte Q4_K decoder (matvec_q4k_wide, the default) against the 16-byte one, v3 and v2 paths (1, 2
// and 5 tokens): the same integer sums, grouped differently in float.
TEST(CudaOps, MatvecQ4KWideMatchesDefault) {
  REQUIRE_GPU();
  std::mt19937 rng(24);
  kernels::CudaOpsOptions ow, on;
  ow.matvec_q4k_wide = true;
  ow.matvec_q4k_pair = false;  // the pair decoder has its own test (MatvecQ4KPairMatchesWide)
  on.matvec_q4k_wide = false;
  kernels::CudaOps wide(*E->ctx, ow), base(*E->ctx, on);
  for (int64_t K : {4096, 14336}) {
    const int64_t N = K == 4096 ? 5003 : 300;  // 300 rows: the v2 kernel (rows alone do not fill the GPU)
    HostTensor w = random_weights(rng, DType::Q4_K, K, N);
    DevTensor dw(*E, w);
    for (int64_t T : {1, 2, 5})
      expect_same_matmul(E, rng, wide, base, dw, K, N, T,
                         "Q4_K wide vs default K=" + std::to_string(K) + " T=" + std::to_string(T));
  }
}

// The lane-pair Q4_K decoder (matvec_q4k_pair, K % 2048 == 0) against the wide one: v3 (1, 2 tokens), v2
// (5 tokens; 300 rows) and K = 2304 (not a multiple of 2048: the wide decoder runs for both); the same
// integer sums, added in another order.
TEST(CudaOps, MatvecQ4KPairMatchesWide) {
  REQUIRE_GPU();
  std::mt19937 rng(25);
  kernels::CudaOpsOptions op, ow;
  op.matvec_q4k_pair = true;
  ow.matvec_q4k_pair = false;
  kernels::CudaOps pair(*E->ctx, op), wide(*E->ctx, ow);
  for (int64_t K : {4096, 14336, 2304}) {
    for (int64_t N : {int64_t{5003}, int64_t{300}}) {
      HostTensor w = random_weights(rng, DType::Q4_K, K, N);
      DevTensor dw(*E, w);
      for (int64_t T : {1, 2, 5})
        expect_same_matmul(E, rng, pair, wide, dw, K, N, T,
                           "Q4_K pair vs wide K=" + std::to_string(K) + " N=" + std::to_string(N) +
                               " T=" + std::to_string(T));
    }
  }
}

// rms_norm -> matmul_many with the Q8 stash, glu -> matmul_acc (stash + epilogue add), rope_qk_store:
// the fused ops against the unfused ones (fuse = false, v2 kernels): the same values.
TEST(CudaOps, DecodeFusionsMatchUnfused) {
  REQUIRE_GPU();
  std::mt19937 rng(22);
  kernels::CudaOpsOptions of, op;
  op.fuse = false;
  op.matvec_kernel = 2;
  kernels::CudaOps fused(*E->ctx, of), plain(*E->ctx, op);
  const int64_t K = 4096, ff = 1536;
  const V2Case types[] = {{DType::Q4_0, true}, {DType::Q4_K, false}, {DType::F16, false}};
  for (const V2Case& c : types) {
    HostTensor wq = random_weights(rng, c.type, K, 2048), wk = random_weights(rng, c.type, K, 512);
    HostTensor wd = random_weights(rng, c.type, ff, K);
    DevTensor dwq(*E, c.split ? to_split(wq) : wq), dwk(*E, c.split ? to_split(wk) : wk);
    DevTensor dwd(*E, c.split ? to_split(wd) : wd);
    for (int64_t T : {1, 2, 5, 12}) {
      HostTensor x = random_f32(rng, K, T, 1, -2.f, 2.f), nw = random_f32(rng, K);
      HostTensor g = random_f32(rng, ff, T, 1, -3.f, 3.f), u = random_f32(rng, ff, T);
      HostTensor acc = random_f32(rng, K, T);
      DevTensor dx(*E, x), dnw(*E, nw);
      const std::string what = v2_name(c) + " T=" + std::to_string(T);
      HostTensor got[2][4];
      for (int f = 0; f < 2; ++f) {
        kernels::CudaOps& ops = f == 0 ? fused : plain;
        DevTensor xn(*E, DType::F32, K, T), q(*E, DType::F32, 2048, T), k(*E, DType::F32, 512, T);
        ops.rms_norm(dx.view, dnw.view, 1e-5f, xn.view);
        const TensorView* ws[2] = {&dwq.view, &dwk.view};
        TensorView outs[2] = {q.view, k.view};
        ops.matmul_many(2, ws, xn.view, outs);
        DevTensor dg(*E, g), du(*E, u), dacc(*E, acc), tmp(*E, DType::F32, K, T);
        ops.glu(dg.view, du.view, Activation::kSilu, dg.view);
        ops.matmul_acc(dwd.view, dg.view, tmp.view, dacc.view);
        SYNC();
        got[f][0] = xn.download();
        got[f][1] = q.download();
        got[f][2] = k.download();
        got[f][3] = dacc.download();
      }
      EXPECT_EQ(got[0][0].bytes, got[1][0].bytes) << "rms_norm " << what;
      expect_close(got[0][1], got[1][1], 1e-6, "norm -> matmul_many q " + what);
      expect_close(got[0][2], got[1][2], 1e-6, "norm -> matmul_many k " + what);
      expect_close(got[0][3], got[1][3], 1e-6, "glu -> matmul_acc " + what);
    }
  }
  // rope_qk_store: q 8 heads, k / v 2 heads of 128, cells with one out of range (skipped by both).
  const int64_t hd = 128, T = 3, cells = 16;
  HostTensor q = random_f32(rng, hd, 8, T), k = random_f32(rng, hd * 2, T), v = random_f32(rng, hd * 2, T);
  HostTensor pos = i32({5, 900, 70000}), cell = i32({3, 15, 99});
  DevTensor dpos(*E, pos), dcell(*E, cell);
  // One rope_qk_store (qn null) or qk_norm_rope_store on fresh copies of q [hd, heads, T], k and v
  // [hd * n_kv, T] and an empty cache; returns q, k, the k cache and the v cache.
  auto rope_store = [&](kernels::CudaOps& ops, const HostTensor& qh, const HostTensor& kh, const HostTensor& vh,
                        int64_t hdim, int64_t n_kv, const RopeParams& p, const TensorView* qn,
                        const TensorView* kn) {
    const int64_t nt = qh.view.ne[2];
    HostTensor kc(DType::F16, hdim * n_kv, cells);
    DevTensor dq(*E, qh), dk(*E, kh), dv(*E, vh), dkc(*E, kc), dvc(*E, kc);
    BatchMeta b;
    b.n_tokens = static_cast<int32_t>(nt);
    b.pos = dpos.view;
    b.cell = dcell.view;
    KvView kv;
    kv.k = dkc.view;
    kv.v = dvc.view;
    TensorView k3 = TensorView::make(DType::F32, dk.view.data, hdim, n_kv, nt, 1, dk.view.where);
    if (qn != nullptr) {
      ops.qk_norm_rope_store(dq.view, k3, *qn, *kn, 1e-6f, dk.view, dv.view, b, p, kv);
    } else {
      ops.rope_qk_store(dq.view, k3, dk.view, dv.view, b, p, kv);
    }
    SYNC();
    return std::array<HostTensor, 4>{dq.download(), dk.download(), dkc.download(), dvc.download()};
  };
  for (bool neox : {false, true}) {
    RopeParams p;
    p.n_rot = hd;
    p.neox = neox;
    const std::array<HostTensor, 4> got = rope_store(fused, q, k, v, hd, 2, p, nullptr, nullptr);
    const std::array<HostTensor, 4> ref = rope_store(plain, q, k, v, hd, 2, p, nullptr, nullptr);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(got[i].bytes, ref[i].bytes) << "rope_qk_store part " << i << (neox ? " neox" : "");
  }
  // qk_norm_rope_store (q / k norms in the rope kernel) against rms_norm, rms_norm, rope_qk_store: the same
  // arithmetic in the same order (float contraction aside), every head size it takes, a position where
  // the angle is large, and a cell out of range. Not neox: both take the unfused path.
  for (const int64_t hdn : {64, 128, 256}) {
    for (bool neox : {true, false}) {
      const int64_t nq = 6, nk = 2;
      HostTensor qh = random_f32(rng, hdn, nq, T, -3.f, 3.f), kh = random_f32(rng, hdn * nk, T, 1, -3.f, 3.f);
      HostTensor vh = random_f32(rng, hdn * nk, T), qn = random_f32(rng, hdn, 1, 1, 0.5f, 1.5f);
      HostTensor kn = random_f32(rng, hdn, 1, 1, 0.5f, 1.5f);
      DevTensor dqn(*E, qn), dkn(*E, kn);
      RopeParams p;
      p.n_rot = static_cast<int32_t>(hdn);
      p.neox = neox;
      p.freq_base = 1e6f;
      const std::array<HostTensor, 4> got = rope_store(fused, qh, kh, vh, hdn, nk, p, &dqn.view, &dkn.view);
      const std::array<HostTensor, 4> ref = rope_store(plain, qh, kh, vh, hdn, nk, p, &dqn.view, &dkn.view);
      const std::string what = "qk_norm_rope_store head_dim " + std::to_string(hdn) + (neox ? " neox" : "");
      expect_close(got[0], ref[0], 1e-6, what + " q");
      expect_close(got[1], ref[1], 1e-6, what + " k");
      expect_close(f16_as_f32(got[2]), f16_as_f32(ref[2]), 1e-3, what + " k cache");
      EXPECT_EQ(got[3].bytes, ref[3].bytes) << what << " v cache";
    }
  }
}

// matmul_glu for one token (matvec_quant_glu: the activation and its Q8 image in the gate / up matvec's
// epilogue) against matvec + glu on the same v3 kernel (matvec_glu = false), then the down projection that
// reads the stashed Q8 image: the same bits. x from rms_norm (its own Q8 image in the stash: gate's goes
// after it) and x uploaded (quantize_q8), silu and gelu; F = 19200 gives more 32-row groups than the GPU
// has block slots (blocks take two groups), F = 1280 few.
TEST(CudaOps, MatmulGluFusedMatchesUnfused) {
  REQUIRE_GPU();
  std::mt19937 rng(25);
  kernels::CudaOpsOptions of, op;
  op.matvec_glu = false;
  of.matvec_glu_min_fill = 0.f;  // the fused kernel however few groups F has
  kernels::CudaOps fused(*E->ctx, of), plain(*E->ctx, op);
  // (Q5_K, not Q6_K: split Q6_K rows need K % 2048 == 0, which F = 1280 / 19200 are not.)
  const V2Case types[] = {{DType::Q4_0, true}, {DType::Q4_K, false}, {DType::Q5_K, false}, {DType::Q8_0, true}};
  struct Shape {
    int64_t K, F;
  };
  for (const V2Case& c : types) {
    for (const Shape sh : {Shape{1024, 19200}, Shape{4096, 1280}}) {
      HostTensor wg = random_weights(rng, c.type, sh.K, sh.F), wu = random_weights(rng, c.type, sh.K, sh.F);
      HostTensor wd = random_weights(rng, c.type, sh.F, sh.K);
      DevTensor dwg(*E, c.split ? to_split(wg) : wg), dwu(*E, c.split ? to_split(wu) : wu);
      DevTensor dwd(*E, c.split ? to_split(wd) : wd);
      HostTensor x = random_f32(rng, sh.K, 1, 1, -2.f, 2.f), nw = random_f32(rng, sh.K, 1, 1, 0.5f, 1.5f);
      HostTensor acc = random_f32(rng, sh.K, 1);
      DevTensor dx(*E, x), dnw(*E, nw);
      for (const bool normed : {true, false}) {
        for (const Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
          const std::string what = v2_name(c) + " K=" + std::to_string(sh.K) + " F=" + std::to_string(sh.F) +
                                   (normed ? " normed" : " uploaded") + (act == Activation::kSilu ? " silu" : " gelu");
          HostTensor got[2][2];
          for (int f = 0; f < 2; ++f) {
            kernels::CudaOps& ops = f == 0 ? fused : plain;
            DevTensor xn(*E, DType::F32, sh.K, 1), gate(*E, DType::F32, sh.F, 1), up(*E, DType::F32, sh.F, 1);
            DevTensor dacc(*E, acc), tmp(*E, DType::F32, sh.K, 1);
            gate.poison();
            TensorView xin = dx.view;
            if (normed) {
              ops.rms_norm(dx.view, dnw.view, 1e-5f, xn.view);
              xin = xn.view;
            }
            ops.matmul_glu(dwg.view, dwu.view, xin, act, gate.view, up.view);
            ops.matmul_acc(dwd.view, gate.view, tmp.view, dacc.view);
            SYNC();
            got[f][0] = gate.download();
            got[f][1] = dacc.download();
          }
          EXPECT_EQ(got[0][0].bytes, got[1][0].bytes) << "matmul_glu gate " << what;
          EXPECT_EQ(got[0][1].bytes, got[1][1].bytes) << "matmul_glu -> matmul_acc " << what;
        }
      }
    }
  }
}

// The rms_norm folded into the matvecs around it (matvec_norm_fold): expect_norm + matmul_acc (the
// producer: residual add, the Q8 image of h * nw and the group sums of squares in its epilogue), then
// norm_matmul_glu / norm_matmul_many (the consumers scale their row sums by the norm's s), against the
// same calls with the fold off (a norm kernel, its Q8 image). The residual is the same bits; the consumers
// see x * nw quantized before the scale instead of after, so an int8 may round the other way: within
// 2e-3 nrmse (Q8 activations themselves are ~1e-2). A hint naming another weight than the norm that
// follows falls back to the norm kernel; F16 weights (no fold) give the unfused results exactly. With the
// default matvec_glu_min_fill, ff = 6144 is too few groups for the fused gate / up kernel: the folded image
// then feeds plain gate / up matvecs and the glu kernel, the same bits as the fused kernel.
TEST(CudaOps, NormFoldMatchesUnfused) {
  REQUIRE_GPU();
  std::mt19937 rng(26);
  kernels::CudaOpsOptions of, op, ofp, ofu;
  op.matvec_norm_fold = false;
  op.matvec_q4k_pair = false;
  of.matvec_q4k_pair = false;
  of.matvec_glu_min_fill = 0.f;
  ofp.matvec_q4k_pair = true;
  ofp.matvec_glu_min_fill = 0.f;
  ofu.matvec_q4k_pair = false;
  kernels::CudaOps fold(*E->ctx, of), plain(*E->ctx, op), fold_pair(*E->ctx, ofp), fold_unfused(*E->ctx, ofu);
  const int64_t d = 2048, ff = 6144, kvd = 512;
  const float eps = 1e-5f;
  const V2Case types[] = {{DType::Q4_0, true}, {DType::Q4_K, false}, {DType::F16, false}};
  for (const V2Case& c : types) {
    auto weights = [&](int64_t K, int64_t N) {
      HostTensor w = random_weights(rng, c.type, K, N);
      return std::make_unique<DevTensor>(*E, c.split ? to_split(w) : w);
    };
    auto wo = weights(d, d), wg = weights(d, ff), wu = weights(d, ff), wd = weights(ff, d);
    auto wq = weights(d, d), wk = weights(d, kvd), wv = weights(d, kvd);
    HostTensor attn = random_f32(rng, d, 1, 1, -1.f, 1.f), res = random_f32(rng, d, 1, 1, -3.f, 3.f);
    HostTensor nw1 = random_f32(rng, d, 1, 1, 0.5f, 1.5f), nw2 = random_f32(rng, d, 1, 1, 0.5f, 1.5f);
    DevTensor dattn(*E, attn), dnw1(*E, nw1), dnw2(*E, nw2);
    for (const bool wrong_hint : {false, true}) {
      HostTensor got[4][5];
      for (int f = 0; f < 4; ++f) {
        kernels::CudaOps& ops = f == 0 ? plain : (f == 1 ? fold : (f == 2 ? fold_pair : fold_unfused));
        DevTensor x(*E, res), xn(*E, DType::F32, d, 1), tmp(*E, DType::F32, d, 1);
        DevTensor gate(*E, DType::F32, ff, 1), up(*E, DType::F32, ff, 1);
        DevTensor q(*E, DType::F32, d, 1), k(*E, DType::F32, kvd, 1), v(*E, DType::F32, kvd, 1);
        gate.poison();
        ops.expect_norm(x.view, dnw1.view, eps);
        ops.matmul_acc(wo->view, dattn.view, tmp.view, x.view);
        SYNC();
        got[f][0] = x.download();
        ops.norm_matmul_glu(x.view, dnw1.view, eps, xn.view, wg->view, wu->view, Activation::kSilu, gate.view,
                            up.view);
        ops.expect_norm(x.view, wrong_hint ? dnw1.view : dnw2.view, eps);
        ops.matmul_acc(wd->view, gate.view, tmp.view, x.view);
        const TensorView* ws[3] = {&wq->view, &wk->view, &wv->view};
        TensorView outs[3] = {q.view, k.view, v.view};
        ops.norm_matmul_many(x.view, dnw2.view, eps, xn.view, 3, ws, outs);
        SYNC();
        got[f][1] = gate.download();
        got[f][2] = x.download();
        got[f][3] = q.download();
        got[f][4] = v.download();
      }
      const char* names[5] = {"o-proj residual", "norm_matmul_glu gate", "down residual", "norm_matmul_many q",
                              "norm_matmul_many v"};
      for (int f = 1; f < 3; ++f) {
        const std::string what = v2_name(c) + (f == 2 ? " pair" : "") + (wrong_hint ? " wrong hint" : "");
        for (int i = 0; i < 5; ++i) {
          // The residual: the plain v3 kernel's sums (the pair decoder adds in another order than wide).
          if (c.type == DType::F16 || (i == 0 && !(f == 2 && c.type == DType::Q4_K)))
            EXPECT_EQ(got[f][i].bytes, got[0][i].bytes) << names[i] << " " << what;
          else
            expect_close(got[f][i], got[0][i], 2e-3, std::string(names[i]) + " " + what);
        }
      }
      for (int i = 0; i < 5; ++i)
        EXPECT_EQ(got[3][i].bytes, got[1][i].bytes) << names[i] << " " << v2_name(c) << " plain gate / up + glu"
                                                    << (wrong_hint ? " wrong hint" : "");
    }
  }
}

// ---- embed -----------------------------------------------------------------------------------------

class CudaEmbed : public ::testing::TestWithParam<DType> {};

TEST_P(CudaEmbed, MatchesRef) {
  REQUIRE_GPU();
  const DType t = GetParam();
  std::mt19937 rng(99 + static_cast<unsigned>(t));
  const int64_t d = traits(t).quantized ? 512 : 100, vocab = 37;
  HostTensor table = random_weights(rng, t, d, vocab);
  HostTensor tokens = i32({5, 0, 36, 5, 17});
  HostTensor want(DType::F32, d, 5);
  RefOps().embed(table.view, tokens.view, 0.5f, want.view);
  DevTensor dt(*E, table), dtok(*E, tokens), dout(*E, DType::F32, d, 5);
  dout.poison();
  E->ops->embed(dt.view, dtok.view, 0.5f, dout.view);
  SYNC();
  expect_close(dout.download(), want, 1e-7, dtype_name(t));
}

TEST(CudaOps, EmbedSplitTables) {
  REQUIRE_GPU();
  std::mt19937 rng(98);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                  DType::Q6_K}) {
    const int64_t d = 2048, vocab = 37;
    HostTensor table = random_weights(rng, t, d, vocab);
    HostTensor tokens = i32({5, 0, 36, 5, 17, 36, 1});
    HostTensor want(DType::F32, d, 7);
    RefOps().embed(table.view, tokens.view, 0.5f, want.view);
    DevTensor dt(*E, to_split(table)), dtok(*E, tokens), dout(*E, DType::F32, d, 7);
    dout.poison();
    E->ops->embed(dt.view, dtok.view, 0.5f, dout.view);
    SYNC();
    expect_close(dout.download(), want, 1e-7, std::string(dtype_name(t)) + " split table");
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, CudaEmbed, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
INSTANTIATE_TEST_SUITE_P(CudaMxfp4, CudaEmbed, ::testing::ValuesIn(kExpertWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// ---- elementwise -----------------------------------------------------------------------------------

TEST(CudaOps, RmsNormRowsAndHeads) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  RefOps ref;
  struct Shape {
    int64_t a, b, c;
  };
  for (Shape s : {Shape{4096, 3, 1}, Shape{128, 8, 17}, Shape{576, 100, 1}, Shape{64, 5, 3}, Shape{1024, 2, 1},
                  Shape{1028, 3, 1}, Shape{2560, 2, 2}, Shape{5120, 2, 1}, Shape{8192, 1, 1}, Shape{4098, 2, 1}}) {
    HostTensor x = random_f32(rng, s.a, s.b, s.c, -2.f, 2.f);
    HostTensor w = random_f32(rng, s.a);
    HostTensor want(DType::F32, s.a, s.b, s.c);
    ref.rms_norm(x.view, w.view, 1e-6f, want.view);
    DevTensor dx(*E, x), dw(*E, w), dout(*E, DType::F32, s.a, s.b, s.c);
    dout.poison();
    E->ops->rms_norm(dx.view, dw.view, 1e-6f, dout.view);
    SYNC();
    expect_close(dout.download(), want, 1e-6, "rms_norm " + std::to_string(s.a));
    E->ops->rms_norm(dx.view, dw.view, 1e-6f, dx.view);  // in place
    SYNC();
    expect_close(dx.download(), want, 1e-6, "rms_norm in place");
  }
}

TEST(CudaOps, AddScaleGlu) {
  REQUIRE_GPU();
  std::mt19937 rng(4);
  RefOps ref;
  const int64_t d = 1000, T = 17;
  HostTensor a = random_f32(rng, d, T, 1, -4.f, 4.f), b = random_f32(rng, d, T), bias = random_f32(rng, d, 1);
  DevTensor da(*E, a), db(*E, b), dbias(*E, bias), dout(*E, DType::F32, d, T);
  HostTensor want(DType::F32, d, T);

  ref.add(a.view, b.view, want.view);
  dout.poison();
  E->ops->add(da.view, db.view, dout.view);
  SYNC();
  expect_close(dout.download(), want, 1e-7, "add");

  ref.add(a.view, bias.view, want.view);
  dout.poison();
  E->ops->add(da.view, dbias.view, dout.view);
  SYNC();
  expect_close(dout.download(), want, 1e-7, "add bias");

  ref.scale(a.view, 0.125f, want.view);
  dout.poison();
  E->ops->scale(da.view, 0.125f, dout.view);
  SYNC();
  expect_close(dout.download(), want, 1e-7, "scale");

  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    ref.glu(a.view, b.view, act, want.view);
    dout.poison();
    E->ops->glu(da.view, db.view, act, dout.view);
    SYNC();
    expect_close(dout.download(), want, 2e-6, act == Activation::kSilu ? "silu" : "gelu");
  }
  {  // gpt-oss's clamped SwiGLU: a and b span [-4, 4] and [0, 1]; scaled up to cross both clamps (+-7)
    HostTensor g2 = random_f32(rng, d, T, 1, -12.f, 12.f), u2 = random_f32(rng, d, T, 1, -12.f, 12.f);
    DevTensor dg2(*E, g2), du2(*E, u2);
    ref.glu(g2.view, u2.view, Activation::kSwigluOai, want.view);
    dout.poison();
    E->ops->glu(dg2.view, du2.view, Activation::kSwigluOai, dout.view);
    SYNC();
    expect_close(dout.download(), want, 2e-6, "swiglu_oai");
  }
  // In place: out == a.
  ref.add(a.view, bias.view, want.view);
  E->ops->add(da.view, dbias.view, da.view);
  SYNC();
  expect_close(da.download(), want, 1e-7, "add in place");
}

TEST(CudaOps, Rope) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  RefOps ref;
  const int64_t hd = 128, nh = 8;
  for (int64_t T : {1, 17, 100}) {
    std::vector<int32_t> pos(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i % 2 ? 30000 + i : i);
    HostTensor hpos = i32(pos);
    HostTensor ff = random_f32(rng, hd / 2, 1, 1, 1.f, 8.f);
    DevTensor dpos(*E, hpos), dff(*E, ff);
    for (int variant = 0; variant < 5; ++variant) {
      RopeParams p;
      p.n_rot = variant == 3 ? 64 : 128;
      p.freq_base = variant == 1 ? 500000.f : variant == 4 ? 150000.f : 10000.f;
      p.freq_scale = variant == 2 ? 0.25f : variant == 4 ? 1.f / 32 : 1.f;
      p.neox = variant % 2 == 1 || variant == 4;
      if (variant == 4) {  // gpt-oss's YaRN: factor 32 over 4096 original positions
        p.ext_factor = 1.f;
        p.n_ctx_orig = 4096;
      }
      HostTensor x = random_f32(rng, hd, nh, T);
      HostTensor want = x;
      want.view.data = want.bytes.data();
      BatchMeta hb;
      hb.n_tokens = static_cast<int32_t>(T);
      hb.pos = hpos.view;
      BatchMeta db = hb;
      db.pos = dpos.view;
      RopeParams hp = p, dp = p;
      if (variant == 2 || variant == 3) {
        hp.freq_factors = TensorView::make(DType::F32, ff.bytes.data(), p.n_rot / 2);
        dp.freq_factors = dff.view;
        dp.freq_factors.ne[0] = p.n_rot / 2;
      }
      ref.rope(want.view, hb, hp);
      DevTensor dx(*E, x);
      E->ops->rope(dx.view, db, dp);
      SYNC();
      expect_close(dx.download(), want, 1e-6, "rope variant " + std::to_string(variant) + " T=" + std::to_string(T));
      // rope_qk: q as above plus a k of 2 heads, one launch.
      HostTensor k = random_f32(rng, hd, 2, T);
      HostTensor want_k = k;
      want_k.view.data = want_k.bytes.data();
      ref.rope(want_k.view, hb, hp);
      DevTensor dq(*E, x), dk(*E, k);
      E->ops->rope_qk(dq.view, dk.view, db, dp);
      SYNC();
      expect_close(dq.download(), want, 1e-6, "rope_qk q variant " + std::to_string(variant));
      expect_close(dk.download(), want_k, 1e-6, "rope_qk k variant " + std::to_string(variant));
    }
  }
}

TEST(CudaOps, KvStoreGatherArgmax) {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  RefOps ref;
  const int64_t kvd = 256, T = 5, cells = 40;
  HostTensor k = random_f32(rng, kvd, T, 1, -3.f, 3.f), v = random_f32(rng, kvd, T);
  HostTensor cell = i32({7, 0, 39, 12, 13});
  HostTensor kc(DType::F16, kvd, cells), vc(DType::F16, kvd, cells);
  DevTensor dk(*E, k), dv(*E, v), dcell(*E, cell), dkc(*E, kc), dvc(*E, vc);
  BatchMeta hb;
  hb.n_tokens = T;
  hb.cell = cell.view;
  BatchMeta db = hb;
  db.cell = dcell.view;
  KvView hkv, dkv;
  hkv.k = kc.view;
  hkv.v = vc.view;
  dkv.k = dkc.view;
  dkv.v = dvc.view;
  ref.kv_store(k.view, v.view, hb, hkv);
  E->ops->kv_store(dk.view, dv.view, db, dkv);
  SYNC();
  EXPECT_EQ(dkc.download().bytes, kc.bytes);
  EXPECT_EQ(dvc.download().bytes, vc.bytes);

  HostTensor x = random_f32(rng, 100, 50);
  const std::vector<int32_t> rows = {49, 0, 7, 7, 13};
  HostTensor want(DType::F32, 100, 5);
  ref.gather_rows(x.view, rows.data(), want.view);
  DevTensor dx(*E, x), dout(*E, DType::F32, 100, 5);
  dout.poison();
  E->ops->gather_rows(dx.view, rows.data(), dout.view);
  SYNC();
  EXPECT_EQ(dout.download().bytes, want.bytes);

  HostTensor logits = random_f32(rng, 1000, 3);
  logits.data<float>()[123] = 5.f;
  logits.data<float>()[1000 + 999] = 5.f;
  logits.data<float>()[2000 + 10] = 7.f;
  logits.data<float>()[2000 + 11] = 7.f;  // tie: lowest index wins
  DevTensor dl(*E, logits), dam(*E, DType::I32, 3);
  E->ops->argmax_rows(dl.view, dam.view);
  SYNC();
  HostTensor am = dam.download();
  EXPECT_EQ(am.data<int32_t>()[0], 123);
  EXPECT_EQ(am.data<int32_t>()[1], 999);
  EXPECT_EQ(am.data<int32_t>()[2], 10);
}

// ---- attention -------------------------------------------------------------------------------------

struct AttnCase {
  const char* name;
  int n_head, n_kv_head, head_dim;
  int n_past;      // cells already holding the sequence before this batch
  int n_tokens;    // new tokens (stored in the cache before attention, as the model does)
  int n_seq;       // tokens spread round-robin over this many sequences
  int window = 0;
  float softcap = 0.f;
  bool sinks = false;  // gpt-oss's per-head sink logits (some above every score, some below)
};

void run_attention_case(Env* E, const AttnCase& c) {
  std::mt19937 rng(1234 + c.n_past + c.n_tokens * 7 + c.head_dim);
  const int D = c.head_dim, kvd = D * c.n_kv_head;
  // Cell layout: per sequence, n_past cells then its new tokens; a few empty cells and a foreign
  // sequence (id 9) mixed in; cells shuffled so attention must not assume order.
  std::vector<int32_t> cpos, cseq, pos, seq, cell;
  for (int s = 0; s < c.n_seq; ++s)
    for (int p = 0; p < c.n_past; ++p) {
      cpos.push_back(p);
      cseq.push_back(s);
    }
  for (int i = 0; i < 5; ++i) {
    cpos.push_back(-1);
    cseq.push_back(-1);
    cpos.push_back(i);
    cseq.push_back(9);
  }
  std::vector<int> next(c.n_seq, c.n_past);
  for (int t = 0; t < c.n_tokens; ++t) {
    const int s = t % c.n_seq;
    pos.push_back(next[s]++);
    seq.push_back(s);
    cpos.push_back(pos.back());
    cseq.push_back(s);
  }
  const int n_cells = static_cast<int>(cpos.size());
  std::vector<int> perm(n_cells);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> cpos2(n_cells), cseq2(n_cells);
  for (int i = 0; i < n_cells; ++i) {
    cpos2[perm[i]] = cpos[i];
    cseq2[perm[i]] = cseq[i];
  }
  for (int t = 0; t < c.n_tokens; ++t) cell.push_back(perm[n_cells - c.n_tokens + t]);
  // The cache: random K/V everywhere (what earlier steps stored), then this batch's K/V via kv_store.
  HostTensor kc(DType::F16, kvd, n_cells + 3), vc(DType::F16, kvd, n_cells + 3);
  {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < kc.n(); ++i) {
      kc.data<uint16_t>()[i] = fp32_to_fp16(u(rng));
      vc.data<uint16_t>()[i] = fp32_to_fp16(u(rng));
    }
  }
  HostTensor knew = random_f32(rng, kvd, c.n_tokens), vnew = random_f32(rng, kvd, c.n_tokens);
  HostTensor q = random_f32(rng, D, c.n_head, c.n_tokens, -2.f, 2.f);
  HostTensor hpos = i32(pos), hseq = i32(seq), hcell = i32(cell), hcpos = i32(cpos2), hcseq = i32(cseq2);

  BatchMeta hb;
  hb.n_tokens = c.n_tokens;
  hb.pos = hpos.view;
  hb.seq = hseq.view;
  hb.cell = hcell.view;
  KvView hkv;
  hkv.k = kc.view;
  hkv.v = vc.view;
  hkv.cell_pos = hcpos.view;
  hkv.cell_seq = hcseq.view;
  hkv.n_cells = n_cells;
  AttnParams p;
  p.n_head = c.n_head;
  p.n_kv_head = c.n_kv_head;
  p.head_dim = D;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  p.window = c.window;
  p.softcap = c.softcap;
  HostTensor sinks = random_f32(rng, c.n_head, 1, 1, -3.f, 6.f);
  DevTensor dsinks(*E, sinks);
  AttnParams dp = p;  // the device's: its sinks where the kernels read them
  if (c.sinks) {
    p.sinks = sinks.view;
    dp.sinks = dsinks.view;
  }

  DevTensor dkc(*E, kc), dvc(*E, vc), dknew(*E, knew), dvnew(*E, vnew), dq(*E, q);
  DevTensor dpos(*E, hpos), dseq(*E, hseq), dcell(*E, hcell), dcpos(*E, hcpos), dcseq(*E, hcseq);
  BatchMeta db = hb;
  db.pos = dpos.view;
  db.seq = dseq.view;
  db.cell = dcell.view;
  KvView dkv = hkv;
  dkv.k = dkc.view;
  dkv.v = dvc.view;
  dkv.cell_pos = dcpos.view;
  dkv.cell_seq = dcseq.view;

  RefOps ref;
  ref.kv_store(knew.view, vnew.view, hb, hkv);
  HostTensor want(DType::F32, static_cast<int64_t>(D) * c.n_head, c.n_tokens);
  ref.attention(q.view, hkv, hb, p, want.view);

  E->ops->kv_store(dknew.view, dvnew.view, db, dkv);
  DevTensor dout(*E, DType::F32, static_cast<int64_t>(D) * c.n_head, c.n_tokens);
  const int G = c.n_head / c.n_kv_head;
  const bool decode_ok = c.n_tokens == 1 && (D == 64 || D == 128 || D == 256) && (G == 1 || G == 2 || G == 4 || G == 8);
  for (int kernel : {0, 1, 2}) {
    for (int splits : {0, 1, 3, 12, 40}) {  // 3: the warp-per-row combine, 12 / 40: the block-per-row one
      dout.poison();
      E->ops->attention_path(dq.view, dkv, db, dp, dout.view, kernel, splits);
      SYNC();
      // The tensor-core kernel (also what 2 falls back to) rounds q and the probabilities to F16.
      const bool mma = (kernel == 1 || (kernel >= 2 && !decode_ok)) && (D == 64 || D == 128 || D == 256);
      const double tol = mma ? 4e-3 : kernel == 2 ? 1e-4 : 2e-5;
      expect_close(dout.download(), want, tol,
                   std::string(c.name) + " kernel=" + std::to_string(kernel) + " splits=" + std::to_string(splits));
    }
  }
  // The split-combine kernel also writes out's Q8 image (the stash) for the next matvec: that matvec must
  // give what it gives on out quantized by itself (an unfused CudaOps), bit for bit.
  const int64_t K = static_cast<int64_t>(D) * c.n_head;
  if (D % 32 == 0 && c.n_tokens <= 8 && K % 256 == 0) {
    HostTensor w = random_weights(rng, DType::Q4_K, K, 64);
    DevTensor dw(*E, w), m1(*E, DType::F32, 64, c.n_tokens), m2(*E, DType::F32, 64, c.n_tokens);
    kernels::CudaOpsOptions op;
    op.fuse = false;
    kernels::CudaOps plain(*E->ctx, op);
    for (int kernel : {0, 1, 2}) {
      for (int splits : {1, 3, 12}) {
        E->ops->attention_path(dq.view, dkv, db, dp, dout.view, kernel, splits);
        E->ops->matmul(dw.view, dout.view, m1.view);
        plain.matmul(dw.view, dout.view, m2.view);
        SYNC();
        EXPECT_EQ(m1.download().bytes, m2.download().bytes)
            << c.name << " kernel=" << kernel << " splits=" << splits << ": stash after attention";
      }
    }
  }
}

TEST(CudaAttention, Cases) {
  REQUIRE_GPU();
  const AttnCase cases[] = {
      {"decode gqa4 d128", 32, 8, 128, 3000, 1, 1},
      {"prefill gqa4 d128", 32, 8, 128, 0, 100, 1},
      {"chunk gqa4 d128", 8, 2, 128, 77, 17, 1},
      {"three tokens three seqs", 8, 2, 128, 40, 3, 3},
      {"d256 mqa", 4, 1, 256, 50, 17, 1},
      {"d64 gqa3", 9, 3, 64, 20, 100, 2},
      {"d80 plain only", 6, 6, 80, 10, 3, 1},
      {"window + softcap", 8, 4, 128, 200, 17, 1, 32, 30.f},
      {"single token no past", 4, 2, 64, 0, 1, 1},
      {"decode gqa8 d64", 16, 2, 64, 700, 1, 1},
      {"decode gqa1 d128", 8, 8, 128, 300, 1, 1},
      {"decode gqa2 d256 window + softcap", 4, 2, 256, 500, 1, 1, 64, 30.f},
      {"decode gqa7 d64 (falls back)", 14, 2, 64, 100, 1, 1},
      {"decode gqa4 d128 long", 32, 8, 128, 9000, 1, 1},
  };
  for (const AttnCase& c : cases) run_attention_case(E, c);
}

// gpt-oss's attention sinks (a logit per head in the softmax's max and sum) in every kernel and split count:
// decode (the one-token kernel at GQA 8, gpt-oss's), prefill, a sliding window, a sequence with no past.
TEST(CudaSinks, AttentionMatchesRef) {
  REQUIRE_GPU();
  AttnCase cases[] = {
      {"sinks decode gqa8 d64", 64, 8, 64, 700, 1, 1},
      {"sinks prefill gqa8 d64", 64, 8, 64, 0, 100, 1},
      {"sinks chunk window", 16, 2, 64, 200, 17, 2, 16},
      {"sinks decode window d128", 8, 8, 128, 300, 1, 1, 128},
      {"sinks single token no past", 8, 1, 64, 0, 1, 1},
      {"sinks d80 plain only", 6, 6, 80, 10, 3, 1},
  };
  for (AttnCase& c : cases) {
    c.sinks = true;
    run_attention_case(E, c);
  }
}

// ---- device ----------------------------------------------------------------------------------------

TEST(CudaDevice, BudgetCopiesEvents) {
  REQUIRE_GPU();
  exec::Device& dev = *E->dev;
  auto info = dev.memory_info();
  ASSERT_TRUE(info.has_value());
  EXPECT_GT(info->device_total, info->arena_capacity);
  auto too_big = dev.allocate(info->arena_capacity + 1, "too big");
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(too_big.status().message().find("budget"), std::string::npos);

  auto huge = exec::make_cuda_device(0, 1ull << 50);
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.status().code(), ErrorCode::kOutOfMemory);

  const size_t n = 64 << 20;
  auto pinned = std::move(dev.allocate_pinned(n)).value();
  auto a = std::move(dev.allocate(n, "a")).value();
  auto b = std::move(dev.allocate(n, "b")).value();
  std::memset(pinned.ptr, 0x5a, n);
  auto s2 = std::move(dev.create_stream()).value();
  auto e0 = std::move(dev.create_event()).value();
  auto e1 = std::move(dev.create_event()).value();
  ASSERT_TRUE(dev.record(*e0, *E->stream).is_ok());
  ASSERT_TRUE(dev.copy_h2d(a.ptr, pinned.ptr, n, *E->stream).is_ok());
  ASSERT_TRUE(dev.record(*e1, *E->stream).is_ok());
  ASSERT_TRUE(dev.wait(*s2, *e1).is_ok());
  ASSERT_TRUE(dev.copy_d2d(b.ptr, a.ptr, n, *s2).is_ok());
  ASSERT_TRUE(dev.memset(a.ptr, 0, n, *s2).is_ok());
  ASSERT_TRUE(dev.copy_d2h(pinned.ptr, b.ptr, n, *s2).is_ok());
  bool ran = false;
  ASSERT_TRUE(dev.host_fn(*s2, [&] { ran = true; }).is_ok());
  ASSERT_TRUE(dev.sync(*s2).is_ok());
  EXPECT_TRUE(ran);
  EXPECT_EQ(static_cast<uint8_t*>(pinned.ptr)[n - 1], 0x5a);
  auto ms = dev.elapsed_ms(*e0, *e1);
  ASSERT_TRUE(ms.has_value());
  std::printf("h2d %zu MiB pinned: %.3f ms = %.1f GB/s\n", n >> 20, *ms, n / (*ms * 1e6));
  EXPECT_TRUE(*dev.query(*e1));
  dev.release(&a);
  dev.release(&b);
  dev.release_pinned(&pinned);
}

TEST(CudaDevice, BundleAndGraphReplay) {
  REQUIRE_GPU();
  exec::Device& dev = *E->dev;
  auto stream = std::move(dev.create_stream()).value();
  kernels::CudaScratchShape shape;
  shape.max_tokens = 8;
  auto bundle = exec::CudaOpsBundle::create(dev, *stream, shape);
  ASSERT_TRUE(bundle.has_value()) << bundle.status().message();
  kernels::Ops& ops = (*bundle)->ops();
  std::mt19937 rng(8);
  const int64_t K = 1024, N = 300;
  HostTensor w = random_weights(rng, DType::Q4_K, K, N);
  HostTensor nw = random_f32(rng, K);
  HostTensor x1 = random_f32(rng, K, 1), x2 = random_f32(rng, K, 1);
  DevTensor dw(*E, w), dnw(*E, nw), dx(*E, x1), dh(*E, DType::F32, K, 1), dout(*E, DType::F32, N, 1);
  auto step = [&] {
    ops.rms_norm(dx.view, dnw.view, 1e-5f, dh.view);
    ops.matmul(dw.view, dh.view, dout.view);
  };
  auto run_direct = [&](const HostTensor& x) {
    dx.upload(x);
    step();
    EXPECT_TRUE(dev.sync(*stream).is_ok());
    return dout.download();
  };
  HostTensor want1 = run_direct(x1), want2 = run_direct(x2);
  ASSERT_TRUE((*bundle)->begin_capture().is_ok());
  step();
  auto id = (*bundle)->end_capture();
  ASSERT_TRUE(id.has_value()) << id.status().message();
  for (const HostTensor* x : {&x1, &x2}) {
    dx.upload(*x);
    dout.poison();
    SYNC();
    ASSERT_TRUE((*bundle)->replay(*id).is_ok());
    ASSERT_TRUE(dev.sync(*stream).is_ok());
    expect_close(dout.download(), x == &x1 ? want1 : want2, 1e-7, "graph replay");
  }
  EXPECT_TRUE((*bundle)->status().is_ok());
  EXPECT_FALSE((*bundle)->replay(*id + 1).is_ok());
  (*bundle)->drop_graphs();
  bundle->reset();
}

}  // namespace
}  // namespace ferry::cudatest
