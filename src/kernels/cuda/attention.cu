// Attention over the F16 KV cache (ops.h semantics: a token sees the cells of its sequence with position
// <= its own, within the sliding window; GQA by n_head / n_kv_head; optional logit soft-capping).
// Two kernels, both flash-attention style (online softmax over KV tiles, nothing of size n_cells kept):
//   plain: one warp per (token, head), a lane per cell for the scores, lanes over head dims for P.V.
//          Any head_dim <= 256, any GPU; the reference the tensor-core kernel is checked against.
//   mma:   tensor cores (mma.sync m16n8k16, F16 in, F32 accumulate). A block holds 64 query rows =
//          (token, head) pairs of one KV head, so K/V tiles staged in shared memory serve the whole GQA
//          group; 4 warps x 16 rows. For decode (<= 16 rows per KV head) the 4 warps instead share 16
//          rows and split each 64-cell tile, merging their softmax states at the end.
// Both can split the cell range over blocks (flash-decoding) so a single decode token still fills the
// GPU; partial (m, l, O) go to scratch and a combine kernel merges them.
#include <algorithm>
#include <climits>
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kBC = 64;            // cells per KV tile (mma kernel)
constexpr int kInvalidRowSeq = -7; // sequence id of padding rows: matches no cell
constexpr int kInvalidCellSeq = -9;

__device__ __forceinline__ bool visible(int p, int s, int cp, int cs, int window) {
  return cs == s && cp >= 0 && cp <= p && (window == 0 || p - cp < window);
}

__device__ __forceinline__ float cap_logit(float s, float scale, float softcap) {
  s *= scale;
  return softcap > 0.f ? softcap * tanhf(s / softcap) : s;
}

// The factor a row's output takes, acc * attn_inv: its cells' maximum logit M and their sum L of
// exp(logit - M). Without a sink 1 / L. With head h's sink logit (gpt-oss: ggml_soft_max_add_sinks) the sink
// joins the max and the sum without a value row: weights rescaled from M to max(M, sink), the sum gaining
// exp(sink - max). No visible cell (M = -inf): 0 either way.
__device__ __forceinline__ float attn_inv(const float* sinks, int h, float M, float L) {
  if (sinks == nullptr) return L > 0.f ? 1.f / L : 0.f;
  const float sk = __ldg(sinks + h);
  const float Mn = fmaxf(M, sk);
  const float f = M == -INFINITY ? 0.f : __expf(M - Mn);
  return f / fmaf(L, f, __expf(sk - Mn));
}

// Timing builds only (-DFERRY_CUDA_ATTN_STAMPS; launch.h attention_stamps): thread 0 of each block of the
// tensor-core kernel records clock64() at the points ATTN_STAMP(0..6) mark, and %globaltimer at entry
// (slot 7), into g_attn_stamps[linear block id]. Normal builds compile the marks to nothing.
#ifdef FERRY_CUDA_ATTN_STAMPS
constexpr int kStampBlocks = 2048, kStamps = 8;
__device__ unsigned long long g_attn_stamps[kStampBlocks][kStamps];
__device__ __forceinline__ void attn_stamp(int i) {
  if (threadIdx.x != 0) return;
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (b >= kStampBlocks) return;
  unsigned long long v;
  if (i == 7) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
  } else {
    v = static_cast<unsigned long long>(clock64());
  }
  g_attn_stamps[b][i] = v;
}
#define ATTN_STAMP(i) attn_stamp(i)
#else
#define ATTN_STAMP(i) static_cast<void>(0)
#endif

struct Partials {
  float* o;    // [splits][rows][D]
  float2* ml;  // [splits][rows] {m, l}
};

__host__ __device__ inline int64_t partial_o_bytes(int64_t rows, int D, int splits) {
  return static_cast<int64_t>(splits) * rows * D * 4;
}

// ---- plain kernel ------------------------------------------------------------------------------------

constexpr int kPlainWarps = 4;

__global__ void __launch_bounds__(kPlainWarps * kWarp) attn_plain_kernel(AttnArgs a, int splits, Partials part) {
  pdl_enter();  // launched with PDL (launch_ex): q and the cache come from earlier kernels
  FERRY_EMPTY_SMALL_RETURN();
  __shared__ float qs[kPlainWarps][256];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPlainWarps + warp;  // token * n_head + head
  const int64_t n_rows = static_cast<int64_t>(a.n_tokens) * a.n_head;
  if (row >= n_rows) return;  // whole warps; no block-level sync below
  const int D = a.head_dim;
  const int t = static_cast<int>(row / a.n_head), h = static_cast<int>(row % a.n_head);
  const int kvh = h / (a.n_head / a.n_kv_head);
  const int p = a.pos[t], sq = a.seq[t];
  const float* q = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.q) + t * a.q_nb2 + h * a.q_nb1);
  for (int d = lane; d < D; d += kWarp) qs[warp][d] = q[d];
  __syncwarp();

  const int per_split = (a.n_cells + splits - 1) / splits;
  const int c_begin = blockIdx.y * per_split;
  const int c_end = min(a.n_cells, c_begin + per_split);
  const bool vec = (D % 8) == 0;
  float m = -INFINITY, l = 0.f;
  float o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = 0.f;

  for (int c0 = c_begin; c0 < c_end; c0 += kWarp) {
    const int c = c0 + lane;
    float s = -INFINITY;
    if (c < c_end && visible(p, sq, a.cell_pos[c], a.cell_seq[c], a.window)) {
      const __half* kr =
          reinterpret_cast<const __half*>(reinterpret_cast<const char*>(a.k) + c * a.k_stride) + kvh * D;
      float dot = 0.f;
      if (vec) {
        for (int d = 0; d < D; d += 8) {
          const uint4 u = *reinterpret_cast<const uint4*>(kr + d);
          const __half2* h2 = reinterpret_cast<const __half2*>(&u);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(h2[i]);
            dot = fmaf(f.x, qs[warp][d + 2 * i], dot);
            dot = fmaf(f.y, qs[warp][d + 2 * i + 1], dot);
          }
        }
      } else {
        for (int d = 0; d < D; ++d) dot = fmaf(__half2float(kr[d]), qs[warp][d], dot);
      }
      s = cap_logit(dot, a.scale, a.softcap);
    }
    const float tile_max = warp_max(s);
    if (tile_max == -INFINITY) continue;  // nothing visible in these 32 cells
    const float m_new = fmaxf(m, tile_max);
    const float alpha = __expf(m - m_new);
    const float pr = __expf(s - m_new);
    l = l * alpha + warp_sum(pr);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] *= alpha;
    m = m_new;
    const int n_here = min(kWarp, c_end - c0);
    for (int jj = 0; jj < n_here; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, pr, jj);
      if (pj == 0.f) continue;  // warp-uniform
      const __half* vr =
          reinterpret_cast<const __half*>(reinterpret_cast<const char*>(a.v) + (c0 + jj) * a.v_stride) + kvh * D;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d = lane + kWarp * j;
        if (d < D) o[j] = fmaf(pj, __half2float(vr[d]), o[j]);
      }
    }
  }

  if (splits == 1) {
    float* out = reinterpret_cast<float*>(reinterpret_cast<char*>(a.out) + t * a.out_nb1) + h * D;
    const float inv = attn_inv(a.sinks, h, m, l);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int d = lane + kWarp * j;
      if (d < D) out[d] = o[j] * inv;
    }
  } else {
    float* po = part.o + (static_cast<int64_t>(blockIdx.y) * n_rows + row) * D;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int d = lane + kWarp * j;
      if (d < D) po[d] = o[j];
    }
    if (lane == 0) part.ml[static_cast<int64_t>(blockIdx.y) * n_rows + row] = make_float2(m, l);
  }
}

// ---- split combine ---------------------------------------------------------------------------------

// The splits' weights for one row, every lane of a warp: lane s (and s + 32) reads split s's {max, sum}
// (one round of loads for all splits; a loop over splits waited for each in turn: 14 us a decode step),
// w0 / w1 = exp(m - M) of splits lane / lane + 32, inv = 1 / sum of the weighted sums.
struct SplitWeights {
  float w0, w1, inv;
  // Split s's weight, from lane s % 32 (every lane of the warp must call it with the same s).
  __device__ __forceinline__ float of(int s) const { return __shfl_sync(0xffffffffu, s < kWarp ? w0 : w1, s % kWarp); }
};
__device__ __forceinline__ SplitWeights split_weights(const AttnArgs& a, int h, const Partials& part, int splits,
                                                      int64_t n_rows, int64_t row, int lane) {
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  if (lane < splits) {
    const float2 ml = part.ml[static_cast<int64_t>(lane) * n_rows + row];
    m0 = ml.x;
    l0 = ml.y;
  }
  if (lane + kWarp < splits) {
    const float2 ml = part.ml[static_cast<int64_t>(lane + kWarp) * n_rows + row];
    m1 = ml.x;
    l1 = ml.y;
  }
  const float M = warp_max(fmaxf(m0, m1));
  const float ref = M == -INFINITY ? 0.f : M;
  SplitWeights w;
  w.w0 = lane < splits ? __expf(m0 - ref) : 0.f;
  w.w1 = lane + kWarp < splits ? __expf(m1 - ref) : 0.f;
  const float L = warp_sum(w.w0 * l0 + w.w1 * l1);
  w.inv = attn_inv(a.sinks, h, M, L);  // the weights are relative to M (ref only when M = -inf, then 0)
  return w;
}

// Writes output element d = y of row (t, h) and, with a.xq, its Q8 image as quantize_q8 would: the warp's
// 32 lanes hold one whole 32-block of the row (D % 32 == 0; every lane must call it).
__device__ __forceinline__ void store_combined(const AttnArgs& a, int t, int h, int d, float y, int lane) {
  const int D = a.head_dim;
  float* out = reinterpret_cast<float*>(reinterpret_cast<char*>(a.out) + t * a.out_nb1) + h * D;
  if (d < D) out[d] = y;
  if (a.xq != nullptr) {
    const int64_t e = static_cast<int64_t>(t) * a.n_head * D + static_cast<int64_t>(h) * D + d;
    quantize_q8_warp(y, a.xq + e, a.xds + e / 32, lane);
  }
}

// Many splits (decode at depth: 33 at 4K cells): one block per row, thread d of the block owns output
// element d (blockDim = head_dim rounded up to whole warps). Each thread issues the loads of all its
// splits' partials before adding any, so a row costs one round of latency however many splits there are
// (one warp per row walking the splits in groups of 8 takes 6 rounds at 33 splits, and decode at depth
// is slower for it: bench/RESULTS.md). A prefill chunk split in 2 (many rows, few splits) runs faster on
// the warp kernel, hence the two.
// Both add the splits in split order: the same sums, bit for bit.
__global__ void attn_combine_block_kernel(AttnArgs a, int splits, Partials part) {
  pdl_enter();  // launched with PDL: the partials come from the attention kernel
  FERRY_EMPTY_SMALL_RETURN();
  const int lane = threadIdx.x % kWarp;
  const int row = static_cast<int>(blockIdx.x);  // 32-bit: one division by n_head, not a 64-bit one
  const int64_t n_rows = static_cast<int64_t>(a.n_tokens) * a.n_head;
  const int D = a.head_dim;
  const int d = threadIdx.x;
  const int t = row / a.n_head, h = row % a.n_head;
  // The partials first: they do not depend on the weights, so their loads overlap the metadata's.
  constexpr int kMaxSplits = 2 * kWarp;
  float v[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s)
    v[s] = s < splits && d < D ? part.o[(static_cast<int64_t>(s) * n_rows + row) * D + d] : 0.f;
  const SplitWeights w = split_weights(a, h, part, splits, n_rows, row, lane);
  float acc = 0.f;
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    if (s >= splits) break;  // uniform
    acc = fmaf(w.of(s), v[s], acc);
  }
  store_combined(a, t, h, d, acc * w.inv, lane);
}

// Few splits (<= 8, e.g. a prefill chunk split in 2), many rows: one warp per row, lane d = lane + 32 j
// (j < 8: head_dim <= 256); the loads of 8 splits are issued before any is used, then added in split order.
__global__ void attn_combine_warp_kernel(AttnArgs a, int splits, Partials part) {
  pdl_enter();  // launched with PDL: the partials come from the attention kernel
  FERRY_EMPTY_SMALL_RETURN();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int row = static_cast<int>(blockIdx.x) * 4 + warp;  // 32-bit, as in the block kernel
  const int64_t n_rows = static_cast<int64_t>(a.n_tokens) * a.n_head;
  if (row >= n_rows) return;
  const int D = a.head_dim;
  const int t = row / a.n_head, h = row % a.n_head;
  const SplitWeights w = split_weights(a, h, part, splits, n_rows, row, lane);
  constexpr int kGroup = 8;
  float acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kGroup) {
    float v[kGroup][8];
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int s = s0 + i;
      const float* po = part.o + (static_cast<int64_t>(s < splits ? s : 0) * n_rows + row) * D;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d = lane + kWarp * j;
        v[i][j] = s < splits && d < D ? po[d] : 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int s = s0 + i;
      const float ws = w.of(s);  // every lane: s0 is uniform
      if (s < splits) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int d = lane + kWarp * j;
          if (d < D) acc[j] = fmaf(ws, v[i][j], acc[j]);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if (kWarp * j >= D) break;  // uniform: the shuffles in store_combined need every lane
    store_combined(a, t, h, lane + kWarp * j, acc[j] * w.inv, lane);
  }
}

// ---- tensor-core kernel ------------------------------------------------------------------------------

// D (16x8, F32) += A (16x16, F16, row-major fragment a[4]) * B (16x8, F16, "col" fragment b0, b1).
// Fragment layouts (PTX ISA, mma.m16n8k16): with g = lane / 4, q = lane % 4,
//   a0: A[g][2q..2q+1]  a1: A[g+8][2q..]  a2: A[g][2q+8..]  a3: A[g+8][2q+8..]
//   b0: B[2q..2q+1][g]  b1: B[2q+8..2q+9][g]
//   c0,c1: C[g][2q..2q+1]  c2,c3: C[g+8][2q..2q+1]
// Before sm_80 the same product is two m16n8k8 (sm_75 has those, with the matching halves of a and b).
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}

// Four 8x8 b16 matrices, transposed: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same, not transposed: thread (g, q) of matrix i gets row g, columns 2q and 2q + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t lds32(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Shared memory: Q tile, then two stages of (K tile, V tile) so the next tile's copy (cp.async) runs
// while this one is computed, then the stages' cell positions / sequences and the rows' ones.
template <int D, bool SPLITW>
struct MmaCfg {
  static constexpr int kRows = SPLITW ? 16 : 64;    // query rows per block
  static constexpr int kCellsW = SPLITW ? 16 : kBC; // cells per warp per tile
  static constexpr int kSK = D + 8;                 // smem row pitch (halves): 16-byte rows, no bank conflicts
  static constexpr int kStages = 2;
  static constexpr int kSmem = (kRows + 2 * kStages * kBC) * kSK * 2 + 2 * kStages * kBC * 4 + 2 * kRows * 4;
  // Q fragments live in registers for the whole block when they fit next to O (head_dim <= 128).
  static constexpr bool kQInRegs = D <= 128;
  // The split-warp merge reuses the K/V tiles for 4 x 16 x (D + 8) floats of O (padded rows) plus m, l.
  static_assert(!SPLITW || 2 * kStages * kBC * kSK * 2 >= 4 * 16 * (D + 8) * 4, "merge buffer");
};

template <int D, bool SPLITW>
__global__ void __launch_bounds__(128) attn_mma_kernel(AttnArgs a, int splits, Partials part) {
  ATTN_STAMP(7);
  ATTN_STAMP(0);
  pdl_enter();  // launched with PDL (launch_ex): q and the cache come from earlier kernels
  ATTN_STAMP(1);
  FERRY_EMPTY_SMALL_RETURN();
  using Cfg = MmaCfg<D, SPLITW>;
  constexpr int R = Cfg::kRows, SK = Cfg::kSK, NCW = Cfg::kCellsW;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* Qs = reinterpret_cast<__half*>(smem_raw);
  __half* Kst = Qs + R * SK;             // [stage][kBC][SK]
  __half* Vst = Kst + 2 * kBC * SK;      // [stage][kBC][SK]
  int* cpos_st = reinterpret_cast<int*>(Vst + 2 * kBC * SK);  // [stage][kBC]
  int* cseq_st = cpos_st + 2 * kBC;
  int* rpos = cseq_st + 2 * kBC;
  int* rseq = rpos + R;

  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane >> 2, tq = lane & 3;
  const int G = a.n_head / a.n_kv_head;
  const int kvh = blockIdx.y;
  // Row indices in 32 bits (n_tokens * G is far below 2^31): the divisions by G below are 32-bit ones,
  // not the 64-bit subroutine that made a one-token block's merge loop alone take ~1 us (stamps build).
  const int rows_kvh = a.n_tokens * G;
  const int row0 = static_cast<int>(blockIdx.x) * R;

  const int per_split = ((a.n_cells + splits - 1) / splits + kBC - 1) / kBC * kBC;
  const int c_begin = blockIdx.z * per_split;
  const int c_end = min(a.n_cells, c_begin + per_split);

  // Issues the copies of the tile at c0 into stage st (cells past c_end: zeros, position INT_MAX).
  auto load_tile = [&](int c0, int st) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per cell row
    __half* Ks = Kst + st * kBC * SK;
    __half* Vs = Vst + st * kBC * SK;
    for (int i = tid; i < kBC * kChunks; i += blockDim.x) {
      const int r = i / kChunks, ch = i % kChunks;
      const int c = c0 + r;
      const bool ok = c < c_end;
      const int64_t off = (static_cast<int64_t>(kvh) * D + ch * 8) * 2;
      const char* kp = reinterpret_cast<const char*>(a.k) + (ok ? c * a.k_stride + off : 0);
      const char* vp = reinterpret_cast<const char*>(a.v) + (ok ? c * a.v_stride + off : 0);
      cp_async16(Ks + r * SK + ch * 8, kp, ok);
      cp_async16(Vs + r * SK + ch * 8, vp, ok);
    }
    for (int r = tid; r < kBC; r += blockDim.x) {
      const int c = c0 + r;
      cpos_st[st * kBC + r] = c < c_end ? a.cell_pos[c] : INT_MAX;
      cseq_st[st * kBC + r] = c < c_end ? a.cell_seq[c] : kInvalidCellSeq;
    }
  };
  if (c_begin < c_end) load_tile(c_begin, 0);  // in flight while Q is staged
  cp_async_commit();

  // Q tile (F16) and the rows' positions / sequences. Eight loads in flight per thread before any store
  // (blockDim is 128; R * D is a multiple of 1024).
  static_assert(R * D % (128 * 8) == 0, "Q staging");
  for (int i0 = tid; i0 < R * D; i0 += 128 * 8) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + 128 * j, r = i / D, d = i % D;
      const int gr = row0 + r;
      v[j] = 0.f;
      if (gr < rows_kvh) {
        const int t = gr / G, h = kvh * G + gr % G;
        v[j] = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.q) + t * a.q_nb2 + h * a.q_nb1)[d];
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + 128 * j;
      Qs[(i / D) * SK + i % D] = __float2half_rn(v[j]);
    }
  }
  for (int r = tid; r < R; r += blockDim.x) {
    const int gr = row0 + r;
    const bool ok = gr < rows_kvh;
    rpos[r] = ok ? a.pos[gr / G] : 0;
    rseq[r] = ok ? a.seq[gr / G] : kInvalidRowSeq;
  }
  __syncthreads();
  ATTN_STAMP(2);

  const int wr0 = SPLITW ? 0 : 16 * warp;  // first row of this warp in the block
  const int rA = wr0 + g, rB = rA + 8;
  const int posA = rpos[rA], seqA = rseq[rA], posB = rpos[rB], seqB = rseq[rB];
  // The warp's Q as mma A fragments, for every 16-wide slice of D (registers when they fit).
  constexpr int kQF = Cfg::kQInRegs ? D / 16 : 1;
  uint32_t qf[kQF][4];
  auto q_frag = [&](int ks, uint32_t* af) {
    af[0] = lds32(Qs + rA * SK + ks * 16 + 2 * tq);
    af[1] = lds32(Qs + rB * SK + ks * 16 + 2 * tq);
    af[2] = lds32(Qs + rA * SK + ks * 16 + 2 * tq + 8);
    af[3] = lds32(Qs + rB * SK + ks * 16 + 2 * tq + 8);
  };
  if constexpr (Cfg::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) q_frag(ks, qf[ks]);
  }
  // Warp-wide bounds for skipping tiles nobody in the warp can see, and for tiles everyone sees whole.
  int pmax = INT_MIN, pmin = INT_MAX;
  bool seq_uniform = true;
  const int seq0 = rseq[wr0];
  {
    const int r = wr0 + (lane & 15);
    const bool ok = rseq[r] != kInvalidRowSeq;
    int lo = ok ? rpos[r] : INT_MAX, hi = ok ? rpos[r] : INT_MIN;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    pmin = lo;
    pmax = hi;
    seq_uniform = __all_sync(0xffffffffu, !ok || rseq[r] == seq0);
  }
  const int cw0 = SPLITW ? 16 * warp : 0;  // this warp's cells inside a tile

  float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

  int st = 0;
  for (int c0 = c_begin; c0 < c_end; c0 += kBC, st ^= 1) {
    // The other stage was read by every warp in the previous iteration (barrier at its end): refill it.
    if (c0 + kBC < c_end) load_tile(c0 + kBC, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this thread's copies of the tile at c0 have landed
    __syncthreads();     // ... and everyone else's
    if (c0 == c_begin) ATTN_STAMP(3);
    const __half* Ks = Kst + st * kBC * SK;
    const __half* Vs = Vst + st * kBC * SK;
    const int* cpos = cpos_st + st * kBC;
    const int* cseq = cseq_st + st * kBC;

    bool any = false, full = seq_uniform;
    for (int j = lane; j < NCW; j += kWarp) {
      const int cp = cpos[cw0 + j], cs = cseq[cw0 + j];
      const bool seq_ok = seq_uniform ? cs == seq0 : cs >= 0;
      any |= seq_ok && cp <= pmax && (a.window == 0 || cp > pmin - a.window);
      full &= cs == seq0 && cp >= 0 && cp <= pmin && (a.window == 0 || cp > pmax - a.window);
    }
    any = __any_sync(0xffffffffu, any);
    full = __all_sync(0xffffffffu, full);  // every cell visible to every (real) row of the warp
    if (any) {
      // S = Q K^T for the warp's 16 rows x NCW cells; K fragments of two 8-cell groups per ldmatrix.
      float s[NCW / 8][4];
#pragma unroll
      for (int nb = 0; nb < NCW / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t af_smem[4];
        const uint32_t* af = af_smem;
        if constexpr (Cfg::kQInRegs) {
          af = qf[ks];
        } else {
          q_frag(ks, af_smem);
        }
#pragma unroll
        for (int nb = 0; nb < NCW / 8; nb += 2) {
          uint32_t kb[4];
          ldmatrix_x4(kb, Ks + (cw0 + (nb + (lane >> 4)) * 8 + (lane & 7)) * SK + ks * 16 + ((lane >> 3) & 1) * 8);
          mma16816(s[nb], af, kb[0], kb[1]);
          mma16816(s[nb + 1], af, kb[2], kb[3]);
        }
      }

      // Scale, cap, mask; row maxima (the 4 lanes of a row group hold its 2 * NCW / 8 values each).
      float mxA = -INFINITY, mxB = -INFINITY;
      if (full) {  // warp-uniform: no per-cell visibility test
#pragma unroll
        for (int nb = 0; nb < NCW / 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nb][e] = cap_logit(s[nb][e], a.scale, a.softcap);
          mxA = fmaxf(mxA, fmaxf(s[nb][0], s[nb][1]));
          mxB = fmaxf(mxB, fmaxf(s[nb][2], s[nb][3]));
        }
      } else {
#pragma unroll
        for (int nb = 0; nb < NCW / 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = cw0 + nb * 8 + 2 * tq + (e & 1);
            const bool rowA = e < 2;
            const bool vis = visible(rowA ? posA : posB, rowA ? seqA : seqB, cpos[col], cseq[col], a.window);
            const float v = vis ? cap_logit(s[nb][e], a.scale, a.softcap) : -INFINITY;
            s[nb][e] = v;
            if (rowA) {
              mxA = fmaxf(mxA, v);
            } else {
              mxB = fmaxf(mxB, v);
            }
          }
        }
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, off));
        mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, off));
      }
      const float mnA = fmaxf(mA, mxA), mnB = fmaxf(mB, mxB);
      const float refA = mnA == -INFINITY ? 0.f : mnA, refB = mnB == -INFINITY ? 0.f : mnB;
      const float alphaA = __expf(mA - refA), alphaB = __expf(mB - refB);
      mA = mnA;
      mB = mnB;
      float sumA = 0.f, sumB = 0.f;
#pragma unroll
      for (int nb = 0; nb < NCW / 8; ++nb) {
        s[nb][0] = __expf(s[nb][0] - refA);
        s[nb][1] = __expf(s[nb][1] - refA);
        s[nb][2] = __expf(s[nb][2] - refB);
        s[nb][3] = __expf(s[nb][3] - refB);
        sumA += s[nb][0] + s[nb][1];
        sumB += s[nb][2] + s[nb][3];
      }
      lA = lA * alphaA + sumA;  // per-lane partial sums; reduced across the row group at the end
      lB = lB * alphaB + sumB;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        o[nd][0] *= alphaA;
        o[nd][1] *= alphaA;
        o[nd][2] *= alphaB;
        o[nd][3] *= alphaB;
      }

      // O += P V: P's C fragments are exactly the A fragments of the next mma (FA2's register reuse).
#pragma unroll
      for (int kk = 0; kk < NCW / 16; ++kk) {
        uint32_t pf[4];
        pf[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
        pf[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
        pf[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pf[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const int vrow = cw0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int nd = 0; nd < D / 8; nd += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, Vs + vrow * SK + nd * 8 + (lane >> 4) * 8);
          mma16816(o[nd], pf, vb[0], vb[1]);
          mma16816(o[nd + 1], pf, vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // everyone is done with this stage before the next iteration refills it
  }
  cp_async_wait<0>();  // nothing may still be landing in shared memory the merge below reuses
  ATTN_STAMP(4);

  lA += __shfl_xor_sync(0xffffffffu, lA, 1);
  lA += __shfl_xor_sync(0xffffffffu, lA, 2);
  lB += __shfl_xor_sync(0xffffffffu, lB, 1);
  lB += __shfl_xor_sync(0xffffffffu, lB, 2);

  const int64_t n_rows = static_cast<int64_t>(a.n_tokens) * a.n_head;
  // Writes row r (block-local) of the result: final (normalized) or a partial of this split.
  auto row_target = [&](int r, int64_t* row_index, int* token, int* head) {
    const int gr = row0 + r;
    if (gr >= rows_kvh) return false;
    *token = gr / G;
    *head = kvh * G + gr % G;
    *row_index = static_cast<int64_t>(*token) * a.n_head + *head;
    return true;
  };

  if constexpr (SPLITW) {
    // Merge the 4 warps' states for the same 16 rows through shared memory (the K/V tiles are free now).
    __syncthreads();
    // [4][16][kP]: rows padded by 8 floats, so a half-warp's 8-byte stores (g 0-3, tq 0-3) hit 16
    // different bank pairs (a pitch of D put a warp's 8 row groups on the same banks: 8-way conflicts).
    constexpr int kP = D + 8;
    float* red_o = reinterpret_cast<float*>(Kst);
    __shared__ float red_m[4][16], red_l[4][16];
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      const int d = nd * 8 + 2 * tq;
      *reinterpret_cast<float2*>(red_o + (warp * 16 + g) * kP + d) = make_float2(o[nd][0], o[nd][1]);
      *reinterpret_cast<float2*>(red_o + (warp * 16 + g + 8) * kP + d) = make_float2(o[nd][2], o[nd][3]);
    }
    if (tq == 0) {
      red_m[warp][g] = mA;
      red_l[warp][g] = lA;
      red_m[warp][g + 8] = mB;
      red_l[warp][g + 8] = lB;
    }
    __syncthreads();
    ATTN_STAMP(5);
    const int real_rows = min(16, rows_kvh - row0);  // a decode token's G rows: the rest are padding
    for (int i = tid; i < real_rows * D; i += blockDim.x) {
      const int r = i / D, d = i % D;
      int64_t ri;
      int t, h;
      if (!row_target(r, &ri, &t, &h)) continue;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < 4; ++w) M = fmaxf(M, red_m[w][r]);
      const float ref = M == -INFINITY ? 0.f : M;
      float L = 0.f, acc = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float f = __expf(red_m[w][r] - ref);
        L += f * red_l[w][r];
        acc += f * red_o[(w * 16 + r) * kP + d];
      }
      if (splits == 1) {
        float* out = reinterpret_cast<float*>(reinterpret_cast<char*>(a.out) + t * a.out_nb1) + h * D;
        out[d] = a.sinks == nullptr ? (L > 0.f ? acc / L : 0.f) : acc * attn_inv(a.sinks, h, M, L);
      } else {
        part.o[(static_cast<int64_t>(blockIdx.z) * n_rows + ri) * D + d] = acc;
        if (d == 0) part.ml[static_cast<int64_t>(blockIdx.z) * n_rows + ri] = make_float2(M, L);
      }
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = half == 0 ? rA : rB;
      const float m = half == 0 ? mA : mB;
      const float l = half == 0 ? lA : lB;
      int64_t ri;
      int t, h;
      if (!row_target(r, &ri, &t, &h)) continue;
      if (splits == 1) {
        float* out = reinterpret_cast<float*>(reinterpret_cast<char*>(a.out) + t * a.out_nb1) + h * D;
        const float inv = attn_inv(a.sinks, h, m, l);
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
          const int d = nd * 8 + 2 * tq;
          out[d] = o[nd][2 * half] * inv;
          out[d + 1] = o[nd][2 * half + 1] * inv;
        }
      } else {
        float* po = part.o + (static_cast<int64_t>(blockIdx.z) * n_rows + ri) * D;
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
          const int d = nd * 8 + 2 * tq;
          po[d] = o[nd][2 * half];
          po[d + 1] = o[nd][2 * half + 1];
        }
        if (tq == 0) part.ml[static_cast<int64_t>(blockIdx.z) * n_rows + ri] = make_float2(m, l);
      }
    }
  }
  ATTN_STAMP(6);
}

// ---- one-token decode kernel -------------------------------------------------------------------------
// One token (decode of one sequence), the G query heads of one KV head per block, a range of cells per
// split. No tensor cores and no shared-memory tiles: lane (r, dc) of a warp loads 16 bytes (dims 8 dc ..
// 8 dc + 7) of K and V rows straight into registers, kNJ rows each a round, with the next round's loads
// (K, V, the cells' positions and sequences) issued before this round's arithmetic. Scores in F32 (neither
// q nor P is rounded to F16), reduced over a row's kLPR lanes by shuffles; each lane keeps an online softmax
// over its own cells, merged across the warp's row groups, then across the block's warps through shared
// memory; the block's (m, l, O) are a split's partial for the combine kernel, or the result when splits ==
// 1. Few cells a split (32 by default: two rounds of each of the 4 warps) keep many warps on a short cache:
// both attention kernels are issue-latency bound at one warp per scheduler. It pays for short caches only (CudaOps::attention uses it up to 1024 cells): per cell it
// issues several times the tensor-core kernel's instructions.
template <int D, int G>
struct DecCfg {
  static constexpr int kLPR = D / 8;            // lanes per cell row
  static constexpr int kCPL = kWarp / kLPR;     // cells per warp load: 4, 2, 1 for D = 64, 128, 256
  static constexpr int kNJ = 2;                 // rows of K (and of V) per lane per round
  static constexpr int kCellsW = kNJ * kCPL;    // cells per warp round
  static constexpr int kWarps = 4;
};

__device__ __forceinline__ void halves8(const uint4& u, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

template <int D, int G>
__global__ void __launch_bounds__(128) attn_decode_kernel(AttnArgs a, int splits, int per_split, Partials part) {
  pdl_enter();  // launched with PDL: q and the new cell come from the rope kernel
  FERRY_EMPTY_SMALL_RETURN();
  using C = DecCfg<D, G>;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int r = lane / C::kLPR, dc = lane % C::kLPR;
  const int kvh = blockIdx.y;
  const int c_begin = static_cast<int>(blockIdx.x) * per_split;
  const int c_end = min(a.n_cells, c_begin + per_split);
  const int tpos = a.pos[0], tseq = a.seq[0];

  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float4* qp = reinterpret_cast<const float4*>(reinterpret_cast<const char*>(a.q) +
                                                       static_cast<int64_t>(kvh * G + g) * a.q_nb1) + 2 * dc;
    const float4 x0 = qp[0], x1 = qp[1];
    q[g][0] = x0.x, q[g][1] = x0.y, q[g][2] = x0.z, q[g][3] = x0.w;
    q[g][4] = x1.x, q[g][5] = x1.y, q[g][6] = x1.z, q[g][7] = x1.w;
  }
  float m[G], l[G], o[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.f;
  }

  const int64_t col = (static_cast<int64_t>(kvh) * D + dc * 8) * 2;  // bytes into a cache row
  struct Round {
    uint4 k[C::kNJ], v[C::kNJ];
    int cp[C::kNJ], cs[C::kNJ];
  };
  auto load_round = [&](int base, Round& rd) {
#pragma unroll
    for (int j = 0; j < C::kNJ; ++j) {
      const int c = base + j * C::kCPL + r;
      rd.k[j] = rd.v[j] = make_uint4(0, 0, 0, 0);
      rd.cp[j] = INT_MAX;
      rd.cs[j] = kInvalidCellSeq;
      if (c < c_end) {
        rd.k[j] = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(a.k) + c * a.k_stride + col));
        rd.v[j] = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(a.v) + c * a.v_stride + col));
        rd.cp[j] = a.cell_pos[c];
        rd.cs[j] = a.cell_seq[c];
      }
    }
  };
  // The warp's rounds, the next one's loads issued before this one is computed.
  constexpr int kStep = C::kWarps * C::kCellsW;
  Round cur, nxt;
  int base = c_begin + warp * C::kCellsW;
  if (base < c_end) load_round(base, cur);
  for (; base < c_end; base += kStep) {
    const bool more = base + kStep < c_end;  // warp-uniform
    if (more) load_round(base + kStep, nxt);
    const uint4* kr = cur.k;
    const uint4* vr = cur.v;
    const int* cp = cur.cp;
    const int* cs = cur.cs;
    float s[C::kNJ][G];
#pragma unroll
    for (int j = 0; j < C::kNJ; ++j) {
      float kf[8];
      halves8(kr[j], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc = fmaf(q[g][e], kf[e], acc);
        s[j][g] = acc;
      }
    }
#pragma unroll
    for (int off = 1; off < C::kLPR; off <<= 1) {
#pragma unroll
      for (int j = 0; j < C::kNJ; ++j) {
#pragma unroll
        for (int g = 0; g < G; ++g) s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], off);
      }
    }
#pragma unroll
    for (int j = 0; j < C::kNJ; ++j) {
      const bool vis = visible(tpos, tseq, cp[j], cs[j], a.window);
#pragma unroll
      for (int g = 0; g < G; ++g) s[j][g] = vis ? cap_logit(s[j][g], a.scale, a.softcap) : -INFINITY;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < C::kNJ; ++j) mx = fmaxf(mx, s[j][g]);
      const float mn = fmaxf(m[g], mx);
      const float ref = mn == -INFINITY ? 0.f : mn;
      const float alpha = __expf(m[g] - ref);
      m[g] = mn;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < C::kNJ; ++j) {
        s[j][g] = __expf(s[j][g] - ref);
        sum += s[j][g];
      }
      l[g] = l[g] * alpha + sum;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < C::kNJ; ++j) {
      float vf[8];
      halves8(vr[j], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] = fmaf(s[j][g], vf[e], o[g][e]);
      }
    }
    if (more) cur = nxt;
  }

  // The warp's row groups (lanes r = 0 .. kCPL - 1 with the same dc) hold states of different cells.
#pragma unroll
  for (int off = C::kLPR; off < kWarp; off <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mn = fmaxf(m[g], mo);
      const float ref = mn == -INFINITY ? 0.f : mn;
      const float fa = __expf(m[g] - ref), fb = __expf(mo - ref);
      m[g] = mn;
      l[g] = l[g] * fa + lo * fb;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float oo = __shfl_xor_sync(0xffffffffu, o[g][e], off);
        o[g][e] = o[g][e] * fa + oo * fb;
      }
    }
  }

  // The block's warps, through shared memory.
  __shared__ __align__(16) float red_o[C::kWarps][G][D];
  __shared__ float red_m[C::kWarps][G], red_l[C::kWarps][G];
  if (r == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float4* dst = reinterpret_cast<float4*>(&red_o[warp][g][dc * 8]);
      dst[0] = make_float4(o[g][0], o[g][1], o[g][2], o[g][3]);
      dst[1] = make_float4(o[g][4], o[g][5], o[g][6], o[g][7]);
      if (dc == 0) {
        red_m[warp][g] = m[g];
        red_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();
  const int64_t n_rows = a.n_head;  // one token
  static_assert(G * D % kWarp == 0, "whole warps per output pass");
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {  // uniform per warp: G * D % 32 == 0
    const int g = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) M = fmaxf(M, red_m[w][g]);
    const float ref = M == -INFINITY ? 0.f : M;
    float L = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) {
      const float f = __expf(red_m[w][g] - ref);
      L += f * red_l[w][g];
      acc += f * red_o[w][g][d];
    }
    const int h = kvh * G + g;
    if (splits == 1) {
      store_combined(a, 0, h, d, a.sinks == nullptr ? (L > 0.f ? acc / L : 0.f) : acc * attn_inv(a.sinks, h, M, L),
                     lane);
    } else {
      part.o[(static_cast<int64_t>(blockIdx.x) * n_rows + h) * D + d] = acc;
      if (d == 0) part.ml[static_cast<int64_t>(blockIdx.x) * n_rows + h] = make_float2(M, L);
    }
  }
}

// ---- launch helpers ----------------------------------------------------------------------------------

// Blocks per SM the split count aims for (LaunchSettings; an experiments build's FERRY_CUDA_ATTN_SPLIT_SM).
int split_blocks_per_sm() { return launch_settings().attention_split_blocks_per_sm; }

int pick_splits(int64_t base_blocks, int n_cells, int cells_per_step, int sm_count) {
  const int64_t want = static_cast<int64_t>(split_blocks_per_sm()) * (sm_count > 0 ? sm_count : 100);
  if (base_blocks >= want) return 1;
  int64_t s = (want + base_blocks - 1) / base_blocks;
  // At least one step of cells per split: a decode step over a short cache is latency-bound, and more
  // splits (one tile each) put more SMs on it.
  const int64_t max_by_cells = (n_cells + cells_per_step - 1) / cells_per_step;
  if (s > max_by_cells) s = max_by_cells;
  if (s > 64) s = 64;
  return s < 1 ? 1 : static_cast<int>(s);
}

Partials carve(void* scratch, int64_t rows, int D, int splits) {
  Partials p;
  p.o = static_cast<float*>(scratch);
  const int64_t off = (partial_o_bytes(rows, D, splits) + 255) / 256 * 256;
  p.ml = reinterpret_cast<float2*>(static_cast<char*>(scratch) + off);
  return p;
}

template <int D, bool SPLITW>
cudaError_t launch_mma(const AttnArgs& a, int splits, Partials part, cudaStream_t stream) {
  using Cfg = MmaCfg<D, SPLITW>;
  const auto kernel = attn_mma_kernel<D, SPLITW>;
  const int64_t rows_kvh = static_cast<int64_t>(a.n_tokens) * (a.n_head / a.n_kv_head);
  const dim3 grid(ceil_div(rows_kvh, Cfg::kRows), static_cast<unsigned>(a.n_kv_head), static_cast<unsigned>(splits));
  return launch_ex(pdl_default(), kernel, grid, dim3(128), Cfg::kSmem, stream, a, splits, part);
}

// The split combine: a warp per row up to 8 splits, a block per row beyond.
cudaError_t launch_combine(const AttnArgs& a, int splits, Partials part, int64_t n_rows, cudaStream_t stream) {
  if (splits <= 8) {
    return launch_ex(pdl_default(), attn_combine_warp_kernel, dim3(ceil_div(n_rows, 4)), dim3(4 * kWarp), 0, stream, a,
                     splits, part);
  }
  return launch_ex(pdl_default(), attn_combine_block_kernel, dim3(static_cast<unsigned>(n_rows)),
                   dim3(static_cast<unsigned>((a.head_dim + kWarp - 1) / kWarp * kWarp)), 0, stream, a, splits, part);
}

template <int D, int G>
cudaError_t launch_decode(const AttnArgs& a, int splits, int per_split, Partials part, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.n_kv_head));
  return launch_ex(pdl_default(), attn_decode_kernel<D, G>, grid, dim3(DecCfg<D, G>::kWarps * kWarp), 0, stream, a,
                   splits, per_split, part);
}

template <int D>
cudaError_t launch_decode_d(const AttnArgs& a, int G, int splits, int per_split, Partials part, cudaStream_t stream) {
  switch (G) {
    case 1: return launch_decode<D, 1>(a, splits, per_split, part, stream);
    case 2: return launch_decode<D, 2>(a, splits, per_split, part, stream);
    case 4: return launch_decode<D, 4>(a, splits, per_split, part, stream);
    default: return launch_decode<D, 8>(a, splits, per_split, part, stream);
  }
}

// Cells a warp takes per round in the decode kernel (DecCfg::kCellsW), 0 when it does not take the shape.
int decode_cells_w(const AttnArgs& a) {
  const int D = a.head_dim, G = a.n_head / a.n_kv_head;
  if (a.n_tokens != 1 || (D != 64 && D != 128 && D != 256) || (G != 1 && G != 2 && G != 4 && G != 8)) return 0;
  if (a.q_nb1 % 16 != 0 || reinterpret_cast<uintptr_t>(a.q) % 16 != 0) return 0;
  constexpr int kNJ = DecCfg<128, 4>::kNJ;  // the same for every D and G
  return kNJ * (kWarp / (D / 8));
}

// Cells a split of the decode kernel aims for: two rounds of every warp, which decodes faster after 512
// tokens than one (bench/RESULTS.md); LaunchSettings (an experiments build's FERRY_CUDA_ATTN_DEC_CELLS)
// may set another count.
int decode_cells_per_split(int cells_w) {
  const int v = launch_settings().attention_decode_cells;
  return v > 0 ? v : 8 * cells_w;
}

template <int D>
int mma_smem(bool splitw) {
  return splitw ? MmaCfg<D, true>::kSmem : MmaCfg<D, false>::kSmem;
}

// Raises the dynamic shared memory limit of one mma variant when it needs more than 48 KiB and the
// device allows it (attention() falls back to the plain kernel otherwise).
template <int D, bool SPLITW>
cudaError_t prepare_mma(int max_smem) {
  using Cfg = MmaCfg<D, SPLITW>;
  if (Cfg::kSmem <= 48 * 1024 || Cfg::kSmem > max_smem) return cudaSuccess;
  return cudaFuncSetAttribute(attn_mma_kernel<D, SPLITW>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem);
}

}  // namespace

cudaError_t attention_stamps_clear() {
#ifdef FERRY_CUDA_ATTN_STAMPS
  void* p = nullptr;
  const cudaError_t e = cudaGetSymbolAddress(&p, g_attn_stamps);
  return e != cudaSuccess ? e : cudaMemset(p, 0, sizeof(g_attn_stamps));
#else
  return cudaSuccess;
#endif
}

int attention_stamps(uint64_t* out, int max_blocks) {
#ifdef FERRY_CUDA_ATTN_STAMPS
  const int n = max_blocks < kStampBlocks ? max_blocks : kStampBlocks;
  if (n <= 0) return 0;
  if (cudaMemcpyFromSymbol(out, g_attn_stamps, static_cast<size_t>(n) * kStamps * sizeof(uint64_t)) != cudaSuccess)
    return -1;
  return n;
#else
  static_cast<void>(out);
  static_cast<void>(max_blocks);
  return 0;
#endif
}

bool attention_mma_supported(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

int64_t attention_scratch_bytes(int n_tokens, int n_head, int head_dim, int splits) {
  const int64_t rows = static_cast<int64_t>(n_tokens) * n_head;
  return (partial_o_bytes(rows, head_dim, splits) + 255) / 256 * 256 + static_cast<int64_t>(splits) * rows * 8;
}

cudaError_t attention_prepare(int device, int* max_smem_optin) {
  int max_smem = 0;
  cudaError_t e = cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return e;
  *max_smem_optin = max_smem;
  for (cudaError_t r : {prepare_mma<64, false>(max_smem), prepare_mma<64, true>(max_smem),
                        prepare_mma<128, false>(max_smem), prepare_mma<128, true>(max_smem),
                        prepare_mma<256, false>(max_smem), prepare_mma<256, true>(max_smem)}) {
    if (r != cudaSuccess) return r;
  }
  return cudaSuccess;
}

cudaError_t attention(const AttnArgs& a_in, int kernel, int splits, int sm_count, int max_smem_optin, void* scratch,
                      int64_t scratch_bytes, cudaStream_t stream, bool* quantized) {
  if (quantized != nullptr) *quantized = false;
  AttnArgs a = a_in;
  if (a.xq != nullptr && (a.head_dim % 32 != 0 || a.out_nb1 != static_cast<int64_t>(a.n_head) * a.head_dim * 4)) {
    a.xq = nullptr;
    a.xds = nullptr;
  }
  if (a.n_tokens <= 0) return cudaSuccess;
  if (a.head_dim > 256 || a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0) return cudaErrorInvalidValue;
  const int D = a.head_dim;
  const int G = a.n_head / a.n_kv_head;
  const int64_t n_rows = static_cast<int64_t>(a.n_tokens) * a.n_head;
  const bool splitw = static_cast<int64_t>(a.n_tokens) * G <= 16;

  if (kernel == 2) {
    const int cells_w = decode_cells_w(a);
    if (cells_w > 0) {
      if (splits <= 0) {
        // decode_cells_per_split cells a split, at most 2 blocks per SM in all (~150 registers: 3 fit).
        const int64_t by_cells = ceil_div(a.n_cells > 0 ? a.n_cells : 1, decode_cells_per_split(cells_w));
        const int64_t by_sms = std::max<int64_t>(1, 2 * static_cast<int64_t>(sm_count > 0 ? sm_count : 100) / a.n_kv_head);
        splits = static_cast<int>(std::min(by_cells, by_sms));
      }
      if (splits > 2 * kWarp) splits = 2 * kWarp;  // the combine kernel holds two splits per lane
      while (splits > 1 && attention_scratch_bytes(1, a.n_head, D, splits) > scratch_bytes) --splits;
      if (a.n_cells <= 0) splits = 1;
      // Whole warp rounds per split, and no empty split.
      const int per_split = splits == 1 ? (a.n_cells > 0 ? a.n_cells : 1)
                                        : static_cast<int>(ceil_div(ceil_div(a.n_cells, splits), cells_w)) * cells_w;
      if (splits > 1) splits = static_cast<int>(ceil_div(a.n_cells, per_split));
      const Partials part = carve(scratch, n_rows, D, splits);
      cudaError_t e;
      if (D == 64) {
        e = launch_decode_d<64>(a, G, splits, per_split, part, stream);
      } else if (D == 128) {
        e = launch_decode_d<128>(a, G, splits, per_split, part, stream);
      } else {
        e = launch_decode_d<256>(a, G, splits, per_split, part, stream);
      }
      if (e == cudaSuccess && splits > 1 && !ablated("combine")) e = launch_combine(a, splits, part, n_rows, stream);
      if (e == cudaSuccess && quantized != nullptr) *quantized = a.xq != nullptr;
      return e;
    }
    kernel = 1;
  }

  if (kernel == 1 && attention_mma_supported(D)) {
    const int need = D == 64 ? mma_smem<64>(splitw) : (D == 128 ? mma_smem<128>(splitw) : mma_smem<256>(splitw));
    if (need > max_smem_optin) kernel = 0;  // e.g. head_dim 256 on a 64 KiB-smem card: plain kernel
  } else {
    kernel = 0;
  }

  const int64_t rows_per_block = kernel == 1 ? (splitw ? 16 : 64) : kPlainWarps;
  const int64_t base = kernel == 1 ? static_cast<int64_t>(ceil_div(static_cast<int64_t>(a.n_tokens) * G, rows_per_block)) * a.n_kv_head
                                   : static_cast<int64_t>(ceil_div(n_rows, kPlainWarps));
  if (splits <= 0) splits = pick_splits(base, a.n_cells, kernel == 1 ? kBC : kWarp, sm_count);
  if (splits > 2 * kWarp) splits = 2 * kWarp;  // the combine kernel holds two splits per lane
  while (splits > 1 && attention_scratch_bytes(a.n_tokens, a.n_head, D, splits) > scratch_bytes) --splits;
  if (a.n_cells <= 0) splits = 1;
  const Partials part = carve(scratch, n_rows, D, splits);

  cudaError_t e;
  if (kernel == 1) {
    if (D == 64) {
      e = splitw ? launch_mma<64, true>(a, splits, part, stream) : launch_mma<64, false>(a, splits, part, stream);
    } else if (D == 128) {
      e = splitw ? launch_mma<128, true>(a, splits, part, stream) : launch_mma<128, false>(a, splits, part, stream);
    } else {
      e = splitw ? launch_mma<256, true>(a, splits, part, stream) : launch_mma<256, false>(a, splits, part, stream);
    }
  } else {
    const dim3 grid(ceil_div(n_rows, kPlainWarps), static_cast<unsigned>(splits));
    e = launch_ex(pdl_default(), attn_plain_kernel, grid, dim3(kPlainWarps * kWarp), 0, stream, a, splits, part);
  }
  if (e != cudaSuccess || splits == 1) return e;
  if (ablated("combine")) {
    if (quantized != nullptr) *quantized = a.xq != nullptr;
    return e;
  }
  e = launch_combine(a, splits, part, n_rows, stream);
  if (e == cudaSuccess && quantized != nullptr) *quantized = a.xq != nullptr;
  return e;
}

}  // namespace ferry::kernels::cuda
