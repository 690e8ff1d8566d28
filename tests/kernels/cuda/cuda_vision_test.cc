// test_cuda_ops, vision-language ops: CudaOps::rope_multi (qwen2vl M-RoPE with and without unrotated
// dimensions, the vision tower's 2-D RoPE, positions up to 30000) and CudaOps::attention_segments (head
// dims 40 / 64 / 80 / 128, GQA, segments of 1 to 2000 tokens, windows that straddle the kernel's query
// blocks) against RefOps on random inputs, outputs poisoned before each run. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ref/ref_ops.h"

namespace ferry::cudatest {
namespace {

using kernels::RefNumerics;
using kernels::RefOps;
using kernels::RopeParams;

Env* gpu() {
  std::string why;
  return env(&why);
}

#define REQUIRE_GPU()  \
  Env* E = gpu();      \
  if (E == nullptr) GTEST_SKIP() << "no usable CUDA GPU"

#define SYNC()                                           \
  do {                                                   \
    const Status sync_st_ = E->sync();                   \
    EXPECT_TRUE(sync_st_.is_ok()) << sync_st_.message(); \
  } while (0)

HostTensor random_f32(std::mt19937& rng, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  HostTensor t(DType::F32, ne0, ne1, ne2);
  fill_uniform(rng, t.data<float>(), t.n(), -1.f, 1.f);
  return t;
}

HostTensor i32(const std::vector<int32_t>& v) {
  HostTensor t(DType::I32, static_cast<int64_t>(v.size()));
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}

// A host copy whose view points at its own bytes.
HostTensor copy_of(const HostTensor& h) {
  HostTensor c = h;
  c.view.data = c.bytes.data();
  return c;
}

void expect_close(const HostTensor& got, const HostTensor& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.n(), ref.n());
  const ErrStats s = compare(got.data<float>(), ref.data<float>(), got.n());
  EXPECT_EQ(s.non_finite, 0) << what << ": " << describe(s);
  EXPECT_LE(s.nrmse, tol) << what << ": " << describe(s);
  EXPECT_LE(s.max_abs, 8 * tol * std::max(s.ref_max, 1e-3)) << what << ": " << describe(s);
}

struct RopeCase {
  const char* name;
  int64_t hd, n_head;
  int32_t n_rot;
  int32_t sections[4];
  bool vision;
};

TEST(CudaVision, RopeMultiMatchesRef) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  RefOps ref(RefNumerics::kExact);  // angles in double, as the kernel computes them
  const RopeCase cases[] = {
      {"qwen2vl mrope d128", 128, 4, 128, {16, 24, 24, 0}, false},
      {"mrope partial rotation", 128, 3, 64, {8, 12, 12, 0}, false},
      {"vision 2-D d80", 80, 5, 40, {10, 10, 10, 10}, true},
      {"vision 2-D d64", 64, 2, 32, {8, 8, 8, 8}, true},
  };
  for (const RopeCase& c : cases) {
    for (int64_t T : {1, 17, 100}) {
      std::vector<int32_t> pos(4 * T);
      for (int64_t i = 0; i < 4 * T; ++i) pos[i] = static_cast<int32_t>((i * 7919) % (i % 3 ? 64 : 30000));
      HostTensor hpos = i32(pos);
      DevTensor dpos(*E, hpos);
      RopeParams p;
      p.n_rot = c.n_rot;
      p.freq_base = c.vision ? 10000.f : 1000000.f;
      p.vision = c.vision;
      for (int s = 0; s < 4; ++s) p.sections[s] = c.sections[s];
      HostTensor x = random_f32(rng, c.hd, c.n_head, T);
      HostTensor want = copy_of(x);
      ref.rope_multi(want.view, hpos.view, p);
      DevTensor dx(*E, x);
      E->ops->rope_multi(dx.view, dpos.view, p);
      SYNC();
      expect_close(dx.download(), want, 1e-6, std::string(c.name) + " T=" + std::to_string(T));
    }
  }
}

struct SegCase {
  const char* name;
  int64_t hd, n_head, n_kv;
  std::vector<int32_t> bounds;
};

// Window-like bounds: segments of `w` tokens, the last one shorter.
std::vector<int32_t> windows(int32_t n, int32_t w) {
  std::vector<int32_t> b;
  for (int32_t t = 0; t < n; t += w) b.push_back(t);
  b.push_back(n);
  return b;
}

TEST(CudaVision, AttentionSegmentsMatchesRef) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  RefOps ref(RefNumerics::kExact);
  const SegCase cases[] = {
      {"one segment d40", 40, 4, 4, {0, 300}},
      {"mixed segments gqa2", 40, 4, 2, {0, 64, 65, 129, 300}},
      {"single token", 64, 2, 2, {0, 1}},
      {"windows of 64 d80", 80, 3, 3, windows(1000, 64)},
      {"windows of 20 d128", 128, 2, 1, windows(257, 20)},
      {"full image d80", 80, 2, 2, {0, 2000}},
  };
  for (const SegCase& c : cases) {
    const int64_t n = c.bounds.back();
    HostTensor q = random_f32(rng, c.hd, c.n_head, n), k = random_f32(rng, c.hd, c.n_kv, n),
               v = random_f32(rng, c.hd, c.n_kv, n);
    for (int64_t i = 0; i < q.n(); ++i) q.data<float>()[i] *= 3.f;  // sharper softmax
    HostTensor hb = i32(c.bounds);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    HostTensor want(DType::F32, c.hd * c.n_head, n);
    ref.attention_segments(q.view, k.view, v.view, hb.view, scale, want.view);
    DevTensor dq(*E, q), dk(*E, k), dv(*E, v), db(*E, hb), dout(*E, DType::F32, c.hd * c.n_head, n);
    dout.poison();
    E->ops->attention_segments(dq.view, dk.view, dv.view, db.view, scale, dout.view);
    SYNC();
    expect_close(dout.download(), want, 2e-6, c.name);
  }
}

}  // namespace
}  // namespace ferry::cudatest
