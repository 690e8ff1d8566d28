// CpuOps::matmul at every dispatch level this machine supports, every weight type, odd shapes (rows,
// block counts, token counts 1, 3, 17, 64+5): (1) against an exact emulation — the activations
// quantized as llama.cpp does on x86 (Q8_0 / Q8_1 / Q8_K / F16 / BF16 by weight type), dequantized,
// and dotted in double with dequantize_row weights — to float rounding; (2) against RefOps with
// llama.cpp numerics to float rounding, and with exact numerics (unquantized activations) to the
// activation-quantization error; (3) levels against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry::kernels {
namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : kAllCpuIsas)
    if (cpu_isa_supported(isa)) v.push_back(isa);
  return v;
}

// The activation type ggml pairs with a weight type.
DType act_type(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::MXFP4: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return DType::Q8_K;
    default: return w;  // F32, F16, BF16: x rounded to the weight's float type
  }
}

// Q8_0 / Q8_1 blocks as llama.cpp quantizes activations on x86: d = amax / 127, levels
// round-half-even(x * 127 / amax), s = fp16(d * sum) (Q8_1).
void quantize_q8_x86(DType a, const float* x, void* dst, int64_t K) {
  for (int64_t b = 0; b < K / 32; ++b) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
    int8_t q[32];
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      q[j] = static_cast<int8_t>(std::nearbyint(x[32 * b + j] * id));
      sum += q[j];
    }
    if (a == DType::Q8_1) {
      BlockQ8_1& o = static_cast<BlockQ8_1*>(dst)[b];
      o.d = fp32_to_fp16(d);
      o.s = fp32_to_fp16(d * static_cast<float>(sum));
      std::memcpy(o.qs, q, 32);
    } else {
      BlockQ8_0& o = static_cast<BlockQ8_0*>(dst)[b];
      o.d = fp32_to_fp16(d);
      std::memcpy(o.qs, q, 32);
    }
  }
}

// x as the kernels see it: quantized to the activation type and back.
std::vector<float> act_roundtrip(DType w, const float* x, int64_t K) {
  const DType a = act_type(w);
  std::vector<float> y(static_cast<size_t>(K));
  std::vector<uint8_t> q(row_bytes(a, K));
  if (a == DType::Q8_0 || a == DType::Q8_1) {
    quantize_q8_x86(a, x, q.data(), K);
  } else {
    quantize_row(a, x, q.data(), K);
  }
  dequantize_row(a, q.data(), y.data(), K);
  return y;
}

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
  std::vector<float> wf(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n) {
    const float row_scale = 0.02f * (1.f + static_cast<float>(n % 5));  // rows of different magnitude
    for (int64_t k = 0; k < K; ++k) wf[n * K + k] = nd(rng) * row_scale;
  }
  const size_t rb = row_bytes(type, K);
  p.w.resize(rb * static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) quantize_row(type, wf.data() + n * K, p.w.data() + rb * n, K);
  p.x.resize(static_cast<size_t>(K * T));
  for (float& v : p.x) v = nd(rng);
  for (int64_t t = 0; t < T; ++t) p.x[t * K + (t % K)] = 8.f;  // an outlier per token
  return p;
}

std::vector<float> run_matmul(Ops& ops, const Problem& p) {
  std::vector<float> out(static_cast<size_t>(p.N * p.T), NAN);
  auto* wd = const_cast<uint8_t*>(p.w.data());
  auto* xd = const_cast<float*>(p.x.data());
  ops.matmul(TensorView::make(p.type, wd, p.K, p.N), TensorView::make(DType::F32, xd, p.K, p.T),
             TensorView::make(DType::F32, out.data(), p.N, p.T));
  return out;
}

struct Expect {
  std::vector<double> exact;  // emulation with quantized activations
  std::vector<double> mag;    // sum |w * x'| per output (error scale)
  std::vector<double> qerr;   // sum |w| * |x - x'|: bounds the effect of the activation rounding
};

Expect emulate(const Problem& p) {
  Expect e;
  e.exact.resize(static_cast<size_t>(p.N * p.T));
  e.mag.resize(e.exact.size());
  e.qerr.resize(e.exact.size());
  std::vector<float> wrow(static_cast<size_t>(p.K));
  const size_t rb = row_bytes(p.type, p.K);
  std::vector<std::vector<float>> xq(static_cast<size_t>(p.T));
  for (int64_t t = 0; t < p.T; ++t) xq[t] = act_roundtrip(p.type, p.x.data() + t * p.K, p.K);
  // Q4_1 / Q5_1 x Q8_1: ggml takes the min term as m * s with s = fp16(d * sum(q)) stored in the
  // Q8_1 block, not m * dx * sum(q); emulate that too.
  const bool q8_1 = act_type(p.type) == DType::Q8_1;
  std::vector<std::vector<BlockQ8_1>> xb(static_cast<size_t>(p.T));
  if (q8_1) {
    for (int64_t t = 0; t < p.T; ++t) {
      xb[t].resize(static_cast<size_t>(p.K / 32));
      quantize_q8_x86(DType::Q8_1, p.x.data() + t * p.K, xb[t].data(), p.K);
    }
  }
  for (int64_t n = 0; n < p.N; ++n) {
    dequantize_row(p.type, p.w.data() + rb * n, wrow.data(), p.K);
    for (int64_t t = 0; t < p.T; ++t) {
      double s = 0, m = 0, qe = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double v = static_cast<double>(wrow[k]) * xq[t][k];
        s += v;
        m += std::fabs(v);
        qe += std::fabs(static_cast<double>(wrow[k])) * std::fabs(static_cast<double>(p.x[t * p.K + k]) - xq[t][k]);
      }
      e.qerr[t * p.N + n] = qe;
      if (q8_1) {
        const uint8_t* wr = p.w.data() + rb * n;
        const size_t bb = traits(p.type).block_bytes;
        for (int64_t b = 0; b < p.K / 32; ++b) {
          uint16_t mh;  // the min sits right after d in both Q4_1 and Q5_1 blocks
          std::memcpy(&mh, wr + bb * b + 2, 2);
          int qsum = 0;
          for (int i = 0; i < 32; ++i) qsum += xb[t][b].qs[i];
          const double dx = fp16_to_fp32(xb[t][b].d);
          s += fp16_to_fp32(mh) * (fp16_to_fp32(xb[t][b].s) - dx * qsum);
        }
      }
      e.exact[t * p.N + n] = s;
      e.mag[t * p.N + n] = m;
    }
  }
  return e;
}

struct Shape {
  int64_t K, N;
};

// K: whole blocks only; several odd block counts. N: odd row counts around the panel size (16).
std::vector<Shape> shapes_for(DType t) {
  const int64_t B = traits(t).block_elems;
  if (B == 256) return {{256, 7}, {768, 33}, {1280, 17}};
  // 576 and 640 end in a short tail chunk (2 and 4 blocks past a whole 16-block chunk).
  if (B == 32) return {{32, 5}, {96, 19}, {416, 33}, {576, 7}, {640, 9}, {1056, 16}};
  return {{7, 3}, {67, 21}, {333, 17}, {1024, 16}};
}

class CpuMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(CpuMatmul, MatchesEmulationAndRef) {
  const DType type = GetParam();
  RefOps ref(RefNumerics::kExact), ref_llama(RefNumerics::kLlamaCpp);
  uint32_t seed = 1;
  for (const Shape& s : shapes_for(type)) {
    for (int64_t T : {1, 3, 17, 69}) {
      const Problem p = make_problem(type, s.K, s.N, T, seed++);
      const Expect e = emulate(p);
      const std::vector<float> want_ref = run_matmul(ref, p);
      const std::vector<float> want_llama = run_matmul(ref_llama, p);
      std::vector<std::vector<float>> got_by_level;
      for (CpuIsa isa : levels()) {
        auto ops = make_cpu_ops(2, isa);
        const std::vector<float> got = run_matmul(*ops, p);
        SCOPED_TRACE(std::string(dtype_name(type)) + " " + cpu_isa_name(isa) + " K=" + std::to_string(s.K) +
                     " N=" + std::to_string(s.N) + " T=" + std::to_string(T));
        int bad = 0;
        for (size_t i = 0; i < got.size() && bad < 5; ++i) {
          const double tol = 1e-5 * e.mag[i] + 1e-6;
          if (!(std::fabs(got[i] - e.exact[i]) <= tol)) {
            ++bad;
            ADD_FAILURE() << "exact emulation: out[" << i << "] = " << got[i] << ", want " << e.exact[i]
                          << " (tol " << tol << ")";
          }
          if (!(std::fabs(got[i] - want_llama[i]) <= tol)) {
            ++bad;
            ADD_FAILURE() << "vs RefOps(kLlamaCpp): out[" << i << "] = " << got[i] << ", want " << want_llama[i];
          }
          // Against unquantized activations: the activation rounding bounds the difference.
          const double qtol = e.qerr[i] + 1e-5 * e.mag[i] + 1e-5;
          if (!(std::fabs(got[i] - want_ref[i]) <= qtol)) {
            ++bad;
            ADD_FAILURE() << "vs RefOps: out[" << i << "] = " << got[i] << ", ref " << want_ref[i];
          }
        }
        got_by_level.push_back(got);
      }
      for (size_t l = 1; l < got_by_level.size(); ++l)
        for (size_t i = 0; i < got_by_level[l].size(); ++i)
          ASSERT_NEAR(got_by_level[l][i], got_by_level[0][i], 2e-5 * e.mag[i] + 1e-6)
              << dtype_name(type) << " level " << l << " vs scalar at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, CpuMatmul, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
// MXFP4 (gpt-oss's experts) at every level: scalar, AVX2, AVX2-VNNI, AVX-512 where the CPU has them.
INSTANTIATE_TEST_SUITE_P(ExpertWeightTypes, CpuMatmul, ::testing::ValuesIn(kExpertWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// Strided output and activations (views into wider buffers), as the model code passes rows(0, n).
TEST(CpuMatmul, StridedViews) {
  const int64_t K = 256, N = 9, T = 5, ld_x = 300, ld_o = 13;
  const Problem p = make_problem(DType::Q4_K, K, N, T, 77);
  std::vector<float> xb(static_cast<size_t>(ld_x * T), 0.f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) xb[t * ld_x + k] = p.x[t * K + k];
  TensorView xv = TensorView::make(DType::F32, xb.data(), K, T);
  xv.nb[1] = ld_x * sizeof(float);
  const Expect e = emulate(p);
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    std::vector<float> ob(static_cast<size_t>(ld_o * T), -1.f);
    TensorView ov = TensorView::make(DType::F32, ob.data(), N, T);
    ov.nb[1] = ld_o * sizeof(float);
    ops->matmul(TensorView::make(DType::Q4_K, const_cast<uint8_t*>(p.w.data()), K, N), xv, ov);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n)
        EXPECT_NEAR(ob[t * ld_o + n], e.exact[t * N + n], 1e-5 * e.mag[t * N + n] + 1e-6) << cpu_isa_name(isa);
      for (int64_t n = N; n < ld_o; ++n) EXPECT_EQ(ob[t * ld_o + n], -1.f) << "wrote past the row";
    }
  }
}

// matmul_many (q/k/v, gate/up): the same numbers as one matmul per weight, bit for bit (merged into one
// pool job for few tokens, sequential otherwise), with a strided output among them.
TEST(CpuMatmul, MatmulManyEqualsMatmuls) {
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    const int64_t K = 512;
    const int64_t Ns[3] = {300, 64, 64};
    for (int64_t T : {1, 3, 12}) {
      std::vector<Problem> ps;
      for (int i = 0; i < 3; ++i) ps.push_back(make_problem(type, K, Ns[i], T, 100 + 7 * i));
      TensorView x = TensorView::make(DType::F32, const_cast<float*>(ps[0].x.data()), K, T);
      for (CpuIsa isa : levels()) {
        auto ops = make_cpu_ops(3, isa);
        std::vector<TensorView> wv;
        std::vector<std::vector<float>> want(3), got(3);
        std::vector<TensorView> outs;
        for (int i = 0; i < 3; ++i) {
          wv.push_back(TensorView::make(type, const_cast<uint8_t*>(ps[i].w.data()), K, Ns[i]));
          want[i].assign(static_cast<size_t>(Ns[i] * T), NAN);
          ops->matmul(wv[i], x, TensorView::make(DType::F32, want[i].data(), Ns[i], T));
          const int64_t ld = i == 1 ? Ns[i] + 5 : Ns[i];  // one strided output
          got[i].assign(static_cast<size_t>(ld * T), -1.f);
          TensorView o = TensorView::make(DType::F32, got[i].data(), Ns[i], T);
          o.nb[1] = static_cast<size_t>(ld) * sizeof(float);
          outs.push_back(o);
        }
        const TensorView* wp[3] = {&wv[0], &wv[1], &wv[2]};
        ops->matmul_many(3, wp, x, outs.data());
        for (int i = 0; i < 3; ++i) {
          const int64_t ld = i == 1 ? Ns[i] + 5 : Ns[i];
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t r = 0; r < Ns[i]; ++r)
              ASSERT_EQ(got[i][t * ld + r], want[i][t * Ns[i] + r])
                  << dtype_name(type) << " " << cpu_isa_name(isa) << " T=" << T << " matrix " << i << " row " << r;
            for (int64_t r = Ns[i]; r < ld; ++r) ASSERT_EQ(got[i][t * ld + r], -1.f) << "wrote past the row";
          }
        }
      }
    }
  }
}

// matmul_acc (acc += W x, the add done by each task) equals matmul then add bit for bit, on the
// direct path (few tokens, pool split and inline), the panel path (prefill) and a strided acc.
TEST(CpuMatmul, MatmulAccEqualsMatmulThenAdd) {
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F16}) {
    for (int64_t N : {64, 1000}) {
      const int64_t K = 512;
      for (int64_t T : {1, 3, 26, 40}) {  // 26: the float panels' split tail groups (see IlGroups)
        Problem p = make_problem(type, K, N, T, 500 + static_cast<uint32_t>(N + T));
        TensorView w = TensorView::make(type, p.w.data(), K, N);
        TensorView x = TensorView::make(DType::F32, p.x.data(), K, T);
        std::vector<float> acc0(static_cast<size_t>(N * T));
        for (size_t i = 0; i < acc0.size(); ++i) acc0[i] = 0.25f * static_cast<float>(i % 17) - 2.f;
        for (CpuIsa isa : levels()) {
          auto ops = make_cpu_ops(2, isa);
          std::vector<float> tmp(acc0.size()), want = acc0;
          ops->matmul(w, x, TensorView::make(DType::F32, tmp.data(), N, T));
          ops->add(TensorView::make(DType::F32, want.data(), N, T), TensorView::make(DType::F32, tmp.data(), N, T),
                   TensorView::make(DType::F32, want.data(), N, T));
          const int64_t ld = N + 3;  // strided acc
          std::vector<float> got(static_cast<size_t>(ld * T), -7.f), tmp2(acc0.size());
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < N; ++r) got[t * ld + r] = acc0[t * N + r];
          TensorView acc = TensorView::make(DType::F32, got.data(), N, T);
          acc.nb[1] = static_cast<size_t>(ld) * sizeof(float);
          ops->matmul_acc(w, x, TensorView::make(DType::F32, tmp2.data(), N, T), acc);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t r = 0; r < N; ++r)
              ASSERT_EQ(got[t * ld + r], want[t * N + r])
                  << dtype_name(type) << " " << cpu_isa_name(isa) << " N=" << N << " T=" << T << " row " << r;
            for (int64_t r = N; r < ld; ++r) ASSERT_EQ(got[t * ld + r], -7.f) << "wrote past the row";
          }
        }
      }
    }
  }
}

// Prefill with many panels per thread (groups of up to 4 packed panels share each pass over the
// tokens), a partial last group and a partial last panel; token counts whose last float-panel column
// group would hold 1 or 2 columns (13, 20, 26: merged with the group before and split evenly).
TEST(CpuMatmul, PanelGroups) {
  uint32_t seed = 500;
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    for (int64_t T : {9, 13, 20, 26}) {
      const int64_t K = 512, N = 16 * 9 + 5;
      const Problem p = make_problem(type, K, N, T, seed++);
      const Expect e = emulate(p);
      for (CpuIsa isa : levels()) {
        for (int threads : {1, 2}) {
          auto ops = make_cpu_ops(threads, isa);
          const std::vector<float> got = run_matmul(*ops, p);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], e.exact[i], 1e-5 * e.mag[i] + 1e-6)
                << dtype_name(type) << " " << cpu_isa_name(isa) << " T=" << T << " threads=" << threads << " at " << i;
        }
      }
    }
  }
}

// K-quant blocks of extreme levels and scales (every byte of a block one of 0x00, 0xFF, 0x80, 0x7F, then a
// small d / dmin), against activations quantized to +-127: the panel kernels' int16 and int32 sums at
// their bounds (AVX2 sums up to 8 vpmaddubsw pairs in int16, and the Q3_K / Q6_K panels take the act as
// q + 128) must stay exact.
TEST(CpuMatmul, KquantPanelsExtremeLevels) {
  struct Fields {
    DType type;
    size_t d, dmin;  // byte offsets of the fp16 scales in the block (dmin: SIZE_MAX for none)
  };
  const Fields types[] = {
      {DType::Q2_K, offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)},
      {DType::Q3_K, offsetof(BlockQ3_K, d), SIZE_MAX},
      {DType::Q4_K, offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)},
      {DType::Q5_K, offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)},
      {DType::Q6_K, offsetof(BlockQ6_K, d), SIZE_MAX},
  };
  const uint8_t fills[] = {0x00, 0xFF, 0x80, 0x7F};
  for (const Fields& f : types) {
    const int64_t K = 768, N = 16 * 2 + 3, T = 17;
    Problem p{f.type, K, N, T, {}, {}};
    const size_t rb = row_bytes(f.type, K), bb = traits(f.type).block_bytes;
    p.w.resize(rb * static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t b = 0; b < K / 256; ++b) {
        uint8_t* blk = p.w.data() + rb * n + bb * b;
        std::memset(blk, fills[(n + b) % 4], bb);
        const uint16_t d = fp32_to_fp16(1.f / 4096), dmin = fp32_to_fp16(1.f / 8192);
        std::memcpy(blk + f.d, &d, 2);
        if (f.dmin != SIZE_MAX) std::memcpy(blk + f.dmin, &dmin, 2);
      }
    // Even tokens: every level -127; odd tokens: +127 after a first element of -1 (Q8_K's scale takes the
    // sign of the first largest |x|).
    p.x.resize(static_cast<size_t>(K * T));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) p.x[t * K + k] = t % 2 == 0 || k == 0 ? -1.f : 1.f;
    const Expect e = emulate(p);
    for (CpuIsa isa : levels()) {
      auto ops = make_cpu_ops(2, isa);
      const std::vector<float> got = run_matmul(*ops, p);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], e.exact[i], 1e-5 * e.mag[i] + 1e-6) << dtype_name(f.type) << " " << cpu_isa_name(isa) << " at " << i;
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
