// The vision-language ops: rope_multi (qwen2vl M-RoPE, the vision tower's 2-D RoPE) and
// attention_segments, CpuOps at every dispatch level against RefOps, RefOps against the formulas, and
// M-RoPE with every stream at the token's position against plain rope, bit for bit (text tokens of a
// qwen2vl model must be exactly what qwen2 would compute).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"

namespace ferry::kernels {
namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (cpu_isa_supported(isa)) v.push_back(isa);
  return v;
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TensorView f32(std::vector<float>& v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  return TensorView::make(DType::F32, v.data(), ne0, ne1, ne2);
}
TensorView i32(std::vector<int32_t>& v) { return TensorView::make(DType::I32, v.data(), static_cast<int64_t>(v.size())); }

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i])) continue;
    ++bad;
    ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
  }
}

RopeParams text_mrope(int32_t n_rot) {
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = 1000000.f;
  p.neox = true;
  p.sections[0] = n_rot / 8;
  p.sections[1] = 3 * n_rot / 16;
  p.sections[2] = 3 * n_rot / 16;
  return p;
}

TEST(VisionOps, MropeOfTextPositionsIsPlainRopeBitForBit) {
  const int64_t hd = 64, n_head = 3, T = 37;
  std::vector<int32_t> pos(T), pos4(4 * T), seq(T, 0), cell(T);
  for (int64_t t = 0; t < T; ++t) {
    pos[t] = static_cast<int32_t>(5 + 3 * t);
    for (int s = 0; s < 4; ++s) pos4[s * T + t] = pos[t];
    cell[t] = static_cast<int32_t>(t);
  }
  BatchMeta b;
  b.n_tokens = static_cast<int32_t>(T);
  b.pos = i32(pos);
  b.seq = i32(seq);
  b.cell = i32(cell);
  const RopeParams p = text_mrope(static_cast<int32_t>(hd));
  RefOps ref(RefNumerics::kLlamaCpp);
  std::vector<Ops*> all = {&ref};
  std::vector<std::unique_ptr<Ops>> cpus;
  for (CpuIsa isa : levels()) all.push_back((cpus.emplace_back(make_cpu_ops(2, isa))).get());
  for (Ops* ops : all) {
    std::vector<float> a = randn(hd * n_head * T, 7), m = a;
    ops->rope(f32(a, hd, n_head, T), b, p);
    ops->rope_multi(f32(m, hd, n_head, T), i32(pos4), p);
    EXPECT_EQ(a, m) << ops->name();
  }
}

TEST(VisionOps, MropeCpuMatchesRef) {
  const int64_t hd = 64, n_head = 2, T = 29;
  std::vector<int32_t> pos4(4 * T);
  std::mt19937 rng(3);
  for (int32_t& v : pos4) v = static_cast<int32_t>(rng() % 500);
  for (int64_t t = 0; t < T; ++t) pos4[3 * T + t] = 0;
  RefOps ref(RefNumerics::kLlamaCpp), exact(RefNumerics::kExact);
  const RopeParams p = text_mrope(static_cast<int32_t>(hd));
  const std::vector<float> x = randn(hd * n_head * T, 11);
  std::vector<float> want = x, ex = x;
  ref.rope_multi(f32(want, hd, n_head, T), i32(pos4), p);
  exact.rope_multi(f32(ex, hd, n_head, T), i32(pos4), p);
  expect_close(want, ex, 2e-4, 2e-4, "ref llama vs exact");  // float angles of positions up to 500
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    std::vector<float> got = x;
    ops->rope_multi(f32(got, hd, n_head, T), i32(pos4), p);
    expect_close(got, want, 1e-6, 1e-6, std::string(cpu_isa_name(isa)) + " mrope");
  }
}

// Vision mode against the formula: head of 2 * n_rot, pairs (i, i + n_rot); pair i < n_rot / 2 rotates by
// y * 10000^(-2i / n_rot), pair i >= n_rot / 2 by x * 10000^(-2(i - n_rot/2) / n_rot).
TEST(VisionOps, VisionRopeFormula) {
  const int64_t hd = 16, n_rot = 8, n_head = 2, T = 6;
  RopeParams p;
  p.n_rot = static_cast<int32_t>(n_rot);
  p.freq_base = 10000.f;
  p.vision = true;
  for (int s = 0; s < 4; ++s) p.sections[s] = static_cast<int32_t>(hd / 4);
  std::vector<int32_t> pos4(4 * T);
  for (int64_t t = 0; t < T; ++t) {
    pos4[t] = static_cast<int32_t>(t / 2);          // y
    pos4[T + t] = static_cast<int32_t>(t % 2 + 3);  // x
    pos4[2 * T + t] = pos4[t];
    pos4[3 * T + t] = pos4[T + t];
  }
  const std::vector<float> x = randn(hd * n_head * T, 5);
  std::vector<float> want = x;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = want.data() + (t * n_head + h) * hd;
      for (int64_t i = 0; i < n_rot; ++i) {
        const bool first = i < n_rot / 2;
        const double pos = first ? pos4[t] : pos4[T + t];
        const double j = first ? i : i - n_rot / 2;
        const double th = pos * std::pow(10000.0, -2.0 * j / n_rot);
        const double a = v[i], b = v[i + n_rot];
        v[i] = static_cast<float>(a * std::cos(th) - b * std::sin(th));
        v[i + n_rot] = static_cast<float>(a * std::sin(th) + b * std::cos(th));
      }
    }
  RefOps exact(RefNumerics::kExact), ref(RefNumerics::kLlamaCpp);
  std::vector<float> e = x, r = x;
  exact.rope_multi(f32(e, hd, n_head, T), i32(pos4), p);
  ref.rope_multi(f32(r, hd, n_head, T), i32(pos4), p);
  expect_close(e, want, 1e-6, 1e-6, "exact vs formula");
  expect_close(r, want, 1e-5, 1e-5, "llama numerics vs formula");
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    std::vector<float> got = x;
    ops->rope_multi(f32(got, hd, n_head, T), i32(pos4), p);
    expect_close(got, r, 1e-6, 1e-6, std::string(cpu_isa_name(isa)) + " vision rope");
  }
}

// Segments shorter and longer than the CPU's key tile (128), one token alone, GQA.
TEST(VisionOps, AttentionSegmentsCpuMatchesRef) {
  const int64_t hd = 40, n_head = 4;
  RefOps ref(RefNumerics::kExact);
  for (int64_t n_kv : {4, 2}) {
    for (const std::vector<int32_t>& bounds :
         {std::vector<int32_t>{0, 300}, std::vector<int32_t>{0, 64, 65, 129, 300}, std::vector<int32_t>{0, 1}}) {
      const int64_t n = bounds.back();
      const int32_t n_seg = static_cast<int32_t>(bounds.size()) - 1;
      std::vector<float> q = randn(hd * n_head * n, 1), k = randn(hd * n_kv * n, 2), v = randn(hd * n_kv * n, 3);
      for (float& x : q) x *= 2.f;  // sharper softmax
      std::vector<float> want(hd * n_head * n);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      ref.attention_segments(f32(q, hd, n_head, n), f32(k, hd, n_kv, n), f32(v, hd, n_kv, n), bounds.data(), n_seg,
                             scale, f32(want, hd * n_head, n));
      for (CpuIsa isa : levels()) {
        auto ops = make_cpu_ops(2, isa);
        std::vector<float> got(want.size(), NAN);
        ops->attention_segments(f32(q, hd, n_head, n), f32(k, hd, n_kv, n), f32(v, hd, n_kv, n), bounds.data(),
                                n_seg, scale, f32(got, hd * n_head, n));
        expect_close(got, want, 2e-5, 2e-5, std::string(cpu_isa_name(isa)) + " n=" + std::to_string(n));
      }
      if (n_seg == 4) {  // a token alone in its segment returns its own value row
        for (int64_t h = 0; h < n_head; ++h)
          for (int64_t i = 0; i < hd; ++i)
            EXPECT_NEAR(want[64 * hd * n_head + h * hd + i], v[64 * hd * n_kv + (h / (n_head / n_kv)) * hd + i], 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
