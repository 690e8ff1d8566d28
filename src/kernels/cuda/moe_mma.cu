// The expert matmul of a mixture-of-experts layer at prefill token counts, on the int8 tensor cores
// (mma.m16n8k32): a block takes one work item of the plan (moe.cu: up to 32 (slot, token) pairs routed to
// one expert) and 64 rows of that expert's matrix. Per step of 8 groups of 32 along K its threads decode the
// rows' groups once into shared memory as int8 values with a scale and a min coefficient per (row, group)
// (quant_groups_i8.h; Q6_K: a scale per half) and copy the pairs' Q8 activations beside them; then each of the 4 warps multiplies
// its 16 rows by the pairs, 8 at a time. A weight is decoded once per item, not once per pair as in
// moe_matvec.cu, and the products run on the tensor cores. Per (row, pair, group) the integer dot product is
// exact, as dp4a's; the float terms are added group after group.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/moe_mat.cuh"
#include "kernels/cuda/quant_groups_i8.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kRows = 64;                  // rows of the expert's matrix a block takes: 16 per warp
constexpr int kPairs = 32;                 // pairs a block takes (the plan's item size)
constexpr int kStepGroups = 8;             // groups of 32 along K per shared-memory step
constexpr int kPitch = kStepGroups * 32 + 16;  // bytes of a row in shared memory: 68 words, so the 8 rows x
                                               // 4 words of a fragment load fall in 32 different banks
constexpr int kThreads = 128;

struct alignas(16) Tile {
  uint8_t w[kRows][kPitch];
  uint8_t x[kPairs][kPitch];
  float w_scale[kRows][kStepGroups];
  float w_min[kRows][kStepGroups];
  float2 x_ds[kPairs][kStepGroups];
};

// D (16 x 8, s32) += A (16 x 32, s8, row-major fragment a[4]) * B (32 x 8, s8, "col" fragment b0, b1).
// Fragment layouts (PTX ISA, mma.m16n8k32 with .s8), with g = lane / 4, q = lane % 4:
//   a0: A[g][4q..4q+3]  a1: A[g+8][4q..]  a2: A[g][16+4q..]  a3: A[g+8][16+4q..]
//   b0: B[4q..4q+3][g]  b1: B[16+4q..16+4q+3][g]
//   c0, c1: C[g][2q..2q+1]  c2, c3: C[g+8][2q..2q+1]
__device__ __forceinline__ void mma_s8(int* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the build targets sm_90 and its PTX: never compiled for older devices
#endif
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// blockIdx: x = a tile of kRows rows, y = the plan's work item, z = the matrix of the set.
template <DType T>
__global__ void __launch_bounds__(kThreads) moe_mma_kernel(MoeMatvecSet set, int64_t K, const int8_t* xq,
                                                            const float2* xds, MoeMatvecArgs a) {
  __shared__ Tile s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const MoePlanView plan{const_cast<int32_t*>(a.plan), a.shape};
  const int item = static_cast<int>(blockIdx.y);
  if (item >= a.plan[0]) return;
  const int64_t e = plan.item_expert()[item];
  const int q_begin = plan.item_begin()[item];
  const int cnt = plan.item_end()[item] - q_begin;  // 1..kPairs
  const MoeMat m = moe_mat(set, static_cast<int>(blockIdx.z), e);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  if (n0 >= m.rows) return;  // the whole block: no barrier below is skipped by part of it
  const int32_t* pairs = plan.pairs() + q_begin;
  const int groups = static_cast<int>(K / 32);

  // A thread decodes group `mine` of each step for rows tid / 8 + 16 j (j < 4): 8 consecutive threads read 8
  // consecutive groups of one row. It copies the same group of pairs tid / 8 + 16 j (j < 2); pairs past the
  // item's end repeat its last one (their results are not stored), rows past the matrix's end its last row.
  const int mine = tid % kStepGroups, first = tid / kStepGroups;
  const uint8_t* wrow[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t r = n0 + first + 16 * j;
    wrow[j] = m.w + (r < m.rows ? r : m.rows - 1) * m.nb1;
  }
  int64_t xrow[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int p = pairs[min(first + 16 * j, cnt - 1)];
    xrow[j] = a.shared_x ? p / a.k : p;
  }

  const int g = lane / 4, q = lane % 4;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int n_tiles = (cnt + 7) / 8;  // the same in every thread of the block
  float acc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;

  for (int g0 = 0; g0 < groups; g0 += kStepGroups) {
    const int ng = min(kStepGroups, groups - g0);
    if (mine < ng) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t v[8];
        float sc, mn;
        decode_group_i8<T>(wrow[j], g0 + mine, v, &sc, &mn);
        const int r = first + 16 * j;
        uint4* dst = reinterpret_cast<uint4*>(&s.w[r][mine * 32]);
        dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
        dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
        s.w_scale[r][mine] = sc;
        s.w_min[r][mine] = mn;
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4* src = reinterpret_cast<const uint4*>(xq + xrow[j] * K + static_cast<int64_t>(g0 + mine) * 32);
        uint4* dst = reinterpret_cast<uint4*>(&s.x[first + 16 * j][mine * 32]);
        dst[0] = src[0];
        dst[1] = src[1];
        s.x_ds[first + 16 * j][mine] = xds[xrow[j] * groups + g0 + mine];
      }
    }
    __syncthreads();
    for (int gi = 0; gi < ng; ++gi) {
      const int c0 = gi * 32 + 4 * q;
      const uint32_t af[4] = {lds32(&s.w[r0][c0]), lds32(&s.w[r1][c0]), lds32(&s.w[r0][c0 + 16]),
                              lds32(&s.w[r1][c0 + 16])};
      const float sc0 = s.w_scale[r0][gi], sc1 = s.w_scale[r1][gi];
      const float mn0 = s.w_min[r0][gi], mn1 = s.w_min[r1][gi];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        if (nt < n_tiles) {  // uniform: mma.sync needs the whole warp
          const int tb = nt * 8 + g;
          const uint32_t b0 = lds32(&s.x[tb][c0]), b1 = lds32(&s.x[tb][c0 + 16]);
          const float2 d0 = s.x_ds[nt * 8 + 2 * q][gi], d1 = s.x_ds[nt * 8 + 2 * q + 1][gi];
          int c[4] = {0, 0, 0, 0};
          if constexpr (group_i8_halves(T)) {
            // Scales per 16: the group's halves as two products, each with the other half's columns of A
            // zero (a0 / a1 hold columns 0..15, a2 / a3 columns 16..31); mn* is the second half's scale.
            const uint32_t lo[4] = {af[0], af[1], 0u, 0u}, hi[4] = {0u, 0u, af[2], af[3]};
            int h[4] = {0, 0, 0, 0};
            mma_s8(c, lo, b0, b1);
            mma_s8(h, hi, b0, b1);
            acc[nt][0] += d0.x * (sc0 * static_cast<float>(c[0]) + mn0 * static_cast<float>(h[0]));
            acc[nt][1] += d1.x * (sc0 * static_cast<float>(c[1]) + mn0 * static_cast<float>(h[1]));
            acc[nt][2] += d0.x * (sc1 * static_cast<float>(c[2]) + mn1 * static_cast<float>(h[2]));
            acc[nt][3] += d1.x * (sc1 * static_cast<float>(c[3]) + mn1 * static_cast<float>(h[3]));
          } else {
            mma_s8(c, af, b0, b1);
            acc[nt][0] += sc0 * d0.x * static_cast<float>(c[0]) + mn0 * d0.y;
            acc[nt][1] += sc0 * d1.x * static_cast<float>(c[1]) + mn0 * d1.y;
            acc[nt][2] += sc1 * d0.x * static_cast<float>(c[2]) + mn1 * d0.y;
            acc[nt][3] += sc1 * d1.x * static_cast<float>(c[3]) + mn1 * d1.y;
          }
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = nt * 8 + 2 * q + (i & 1);
      const int64_t r = n0 + (i < 2 ? r0 : r1);
      if (t < cnt && r < m.rows) {
        const int p = pairs[t];
        m.out[(p % a.k) * m.s1 + (p / a.k) * m.s2 + r] = acc[nt][i];
      }
    }
  }
}

template <DType T>
cudaError_t launch(const MoeMatvecSet& set, int64_t K, const int8_t* xq, const float2* xds, const MoeMatvecArgs& a,
                   cudaStream_t stream) {
  int64_t rows = 0;
  for (int m = 0; m < set.n; ++m) rows = set.rows[m] > rows ? set.rows[m] : rows;
  const dim3 grid(static_cast<unsigned>((rows + kRows - 1) / kRows), static_cast<unsigned>(a.shape.max_items()),
                  static_cast<unsigned>(set.n));
  moe_mma_kernel<T><<<grid, kThreads, 0, stream>>>(set, K, xq, xds, a);
  return cudaGetLastError();
}

}  // namespace

bool moe_mma_supported(DType type, Layout layout, int64_t K, const int8_t* xq) {
  return group_i8_supported(type) && layout == Layout::kGgml && K > 0 && K % traits(type).block_elems == 0 &&
         K % 32 == 0 && aligned16(xq) && kPairs == MoePlanShape{}.item_pairs;
}

cudaError_t moe_mma_quant(DType type, const MoeMatvecSet& set, int64_t K, const int8_t* xq, const float2* xds,
                          const MoeMatvecArgs& a, cudaStream_t stream) {
  if (a.shape.item_pairs != kPairs) return cudaErrorInvalidValue;
  switch (type) {
    case DType::Q4_0: return launch<DType::Q4_0>(set, K, xq, xds, a, stream);
    case DType::Q4_1: return launch<DType::Q4_1>(set, K, xq, xds, a, stream);
    case DType::Q5_0: return launch<DType::Q5_0>(set, K, xq, xds, a, stream);
    case DType::Q5_1: return launch<DType::Q5_1>(set, K, xq, xds, a, stream);
    case DType::Q8_0: return launch<DType::Q8_0>(set, K, xq, xds, a, stream);
    case DType::Q4_K: return launch<DType::Q4_K>(set, K, xq, xds, a, stream);
    case DType::Q5_K: return launch<DType::Q5_K>(set, K, xq, xds, a, stream);
    case DType::MXFP4: return launch<DType::MXFP4>(set, K, xq, xds, a, stream);
    case DType::Q6_K: return launch<DType::Q6_K>(set, K, xq, xds, a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ferry::kernels::cuda
