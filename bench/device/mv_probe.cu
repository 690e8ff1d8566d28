// mv_probe: where the Q4 decode matvecs lose bandwidth (issue 4). One llama3-8b FFN-up-sized matrix
// (14336 x 4096) per launch, rotated over 8 copies so L2 (50 MB) never holds it, timed with events:
//   flat      every warp streams contiguous 16-byte loads over the buffer, XOR only: the read ceiling
//   v3/load   the v3 kernel's rows and loads (warp per row, rows warp, warp + W, ...), XOR only
//   v3/noscl  + the activations and the dp4a dot, without the scale arithmetic
//   v3/full   the decode chunks (ChunkDecQ4KWide and the lane pairs ChunkDecQ4KPair for Q4_K, ChunkDec<Q4_0> split
//             for Q4_0); `mv_probe N K pair` runs only the two pair forms and Q4_0 (for ncu)
// and each also with the warp's rows contiguous (warp w owns rows [wR, wR + R)) instead of strided.
// `mv_probe chain` / `chain2`: a whole llama3-8b step's Q4_0 matvecs (v3 pattern), with gaps / prefetchers;
// `mv_probe tma` / `tma1` / `chain3`: the weights brought to shared memory by the bulk-copy engine instead
// (tma_q40_kernel), standalone and as a PDL chain with a per-block trace.
// Prints GB/s of weight bytes and % of a device-to-device copy (read + write bytes / s). Not a test.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_chunks.h"

using namespace ferry::kernels::cuda;

namespace {

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

enum Mode { kLoad = 0, kNoScale = 1, kFull = 2 };

__global__ void flat_kernel(const uint4* __restrict__ p, int64_t n16, unsigned* sink) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  int64_t i = tid;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = p[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

template <class D>
__device__ __forceinline__ uint32_t xor_w(const typename D::W& w) {
  const uint32_t* p = reinterpret_cast<const uint32_t*>(&w);
  uint32_t a = 0;
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(w) / 4); ++i) a ^= p[i];
  return a;
}

// Where the kernel's activations come from (kFull): as matvec.cu loads them (right before each tile's dot
// products), a tile ahead (x-ahead: loaded with the next tile's weights, a second activation image in
// registers), or from the block's copy of xq in shared memory (staged once, behind the first weight tile;
// xds stay global: ld_xds is an __ldg).
// kXWhole: plain, for whole tiles only (n_chunks % (32 U) == 0): no clamp of the chunk index, so the
// compiler can see c % 32 == lane.
enum XMode { kXPlain = 0, kXAhead = 1, kXSmem = 2, kXWhole = 3 };

// The v3 kernel's structure (matvec.cu), one matrix, one token.
template <class D, int U, int MB, int MODE, bool CONTIG, int XM = kXPlain>
__global__ void __launch_bounds__(256, MB)
    v3_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t N, int64_t K, int64_t n_warps,
              const int8_t* __restrict__ xq, const XDs* __restrict__ xds, float* __restrict__ out) {
  extern __shared__ uint4 xs[];  // kXSmem: [K / 16] xq
  const int lane = threadIdx.x % kWarp;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / kWarp;
  const int64_t rpw = (N + n_warps - 1) / n_warps;
  int64_t n = CONTIG ? gw * rpw : gw;
  const int64_t n_end = CONTIG ? min(N, n + rpw) : N;
  const int64_t n_step = CONTIG ? 1 : n_warps;
  const bool active = gw < n_warps && n < n_end;
  const int n_chunks = static_cast<int>(K / D::kElems);
  constexpr int kTile = kWarp * U;
  const int rounds = (n_chunks + kTile - 1) / kTile;
  int round = 0;
  typename D::W wc[U], wn[U];
  constexpr int kXU = XM == kXAhead ? U : 1;
  typename D::X xc[kXU], xn[kXU];
  auto clampc = [&](int c) { return XM == kXWhole ? c : min(c, n_chunks - 1); };
  const uint8_t* r = w + n * row_bytes;
  if (active) {
#pragma unroll
    for (int u = 0; u < U; ++u) D::load(r, K, clampc(lane + u * kWarp), wc[u]);
  }
  if constexpr (XM == kXSmem) {  // every thread of the block, before any returns
    for (int i = threadIdx.x; i < K / 16; i += blockDim.x) xs[i] = reinterpret_cast<const uint4*>(xq)[i];
    __syncthreads();
    xq = reinterpret_cast<const int8_t*>(xs);
  }
  if (!active) return;
  if constexpr (XM == kXAhead) {
#pragma unroll
    for (int u = 0; u < U; ++u) D::load_x(clampc(lane + u * kWarp), xq, xds, xc[u]);
  }
  float acc = 0.f;
  uint32_t xacc = 0;
  for (;;) {
    int64_t n2 = n;
    int round2 = round + 1;
    if (round2 == rounds) {
      round2 = 0;
      n2 = n + n_step;
    }
    const bool more = n2 < n_end;
    const uint8_t* r2 = w + n2 * row_bytes;
    if (more) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c2 = clampc(round2 * kTile + lane + u * kWarp);
        D::load(r2, K, c2, wn[u]);
        if constexpr (XM == kXAhead) D::load_x(c2, xq, xds, xn[u]);
      }
    }
    const int c0 = round * kTile + lane;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = clampc(c0 + u * kWarp);
      if (MODE == kLoad) {
        xacc ^= xor_w<D>(wc[u]);
      } else {
        typename D::X x;
        if constexpr (XM == kXAhead) {
          x = xc[u];
        } else {
          D::load_x(c, xq, xds, x);
        }
        float d;
        if (MODE == kFull) {
          d = D::dot(wc[u], c, x);
        } else {  // the integer dot only: every q word against every x word
          const uint32_t* q = reinterpret_cast<const uint32_t*>(&wc[u]);
          const uint32_t* xv = reinterpret_cast<const uint32_t*>(&x);
          int s = 0;
#pragma unroll
          for (int i = 0; i < static_cast<int>(sizeof(x) / 4) - 4 && i < static_cast<int>(sizeof(wc[u]) / 4); ++i) {
            s = dp4a(static_cast<int>(q[i] & 0x0F0F0F0Fu), static_cast<int>(xv[i]), s);
            s = dp4a(static_cast<int>((q[i] >> 4) & 0x0F0F0F0Fu), static_cast<int>(xv[i]), s);
          }
          d = static_cast<float>(s);
        }
        acc += XM == kXWhole || c0 + u * kWarp < n_chunks ? d : 0.f;
      }
    }
    if (round == rounds - 1) {
      const float v = warp_sum(acc) + static_cast<float>(xacc & 1u);
      if (lane == 0) out[n] = v;
      acc = 0.f;
    }
    if (!more) break;
#pragma unroll
    for (int u = 0; u < U; ++u) wc[u] = wn[u];
    if constexpr (XM == kXAhead) {
#pragma unroll
      for (int u = 0; u < U; ++u) xc[u] = xn[u];
    }
    n = n2;
    round = round2;
  }
}

// ---- chain: a whole llama3-8b decode step's matvecs (what a persistent decode kernel would buy) -------------

struct ChainMat {
  const uint8_t* w;
  int64_t N, K, row_bytes;
};

// Every block of a co-resident grid waits here until all have arrived (sense by generation: the generation is
// read before arriving, and only the last arriver resets the count and moves the generation on).
__device__ void grid_barrier(unsigned* count, unsigned* gen) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned g = atomicAdd(gen, 0u);
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(gen, 1u);
    } else {
      while (atomicAdd(gen, 0u) == g) __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

// The GPU's nanosecond clock (%globaltimer).
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void spin_ns(int64_t ns) {
  const uint64_t t0 = now_ns();
  while (static_cast<int64_t>(now_ns() - t0) < ns) {
  }
}

__global__ void gap_kernel(int64_t ns) { spin_ns(ns); }

// A gap that also asks L2 to fetch [pf, pf + bytes) (the next matrix's first bytes) while it spins: every
// lane of every block issues bulk L2 prefetches (cp.async.bulk.prefetch, sm_90) of 64 KiB pieces.
__global__ void gap_pf_kernel(int64_t ns, const uint8_t* pf, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 64 << 10;
  const int64_t lanes = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPiece; o < bytes; o += lanes * kPiece) {
    const uint32_t n = static_cast<uint32_t>(min(kPiece, bytes - o));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf + o), "r"(n) : "memory");
  }
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0) spin_ns(ns);
}

// One cooperative kernel for every matrix of the step, Q4_0 split rows, 2 chunks a tile: warp gw owns rows
// gw, gw + W, ... of each matrix in turn (the v3 pattern) and a grid barrier ends each matrix. PREFETCH: the
// first tile of matrix m + 1 is loaded before that barrier (weights never depend on the last result), so
// the weight stream does not stop at it. gap_ns > 0: block 0 then spins that long and a second barrier
// follows, a stand-in for the small kernels between the matvecs.
template <bool PREFETCH>
__global__ void __launch_bounds__(256, 4)
    chain_kernel(const ChainMat* __restrict__ mats, int n_mats, const int8_t* __restrict__ xq,
                 const XDs* __restrict__ xds, float* __restrict__ out, unsigned* bar, int64_t gap_ns) {
  using D = ChunkDec<ferry::DType::Q4_0>;
  constexpr int U = 2, kTile = kWarp * U;
  const int lane = threadIdx.x % kWarp;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / kWarp;
  const int64_t W = static_cast<int64_t>(gridDim.x) * 8;
  typename D::W w[U], wn[U];
  auto load_tile = [&](const ChainMat& M, int64_t n, int round, typename D::W* dst) {
    const int n_chunks = static_cast<int>(M.K / D::kElems);
    const uint8_t* r = M.w + n * M.row_bytes;
#pragma unroll
    for (int u = 0; u < U; ++u) D::load(r, M.K, min(round * kTile + lane + u * kWarp, n_chunks - 1), dst[u]);
  };
  bool have = false;  // w holds the first tile of matrix m
  for (int m = 0; m < n_mats; ++m) {
    const ChainMat M = mats[m];
    const bool next_rows = PREFETCH && m + 1 < n_mats && gw < mats[m + 1].N;
    if (gw < M.N) {
      const int n_chunks = static_cast<int>(M.K / D::kElems);
      const int rounds = (n_chunks + kTile - 1) / kTile;
      int64_t n = gw;
      int round = 0;
      if (!have) load_tile(M, n, 0, w);
      float acc = 0.f;
      for (;;) {
        int64_t n2 = n;
        int round2 = round + 1;
        if (round2 == rounds) {
          round2 = 0;
          n2 = n + W;
        }
        const bool more = n2 < M.N;
        if (more) load_tile(M, n2, round2, wn);
        else if (next_rows) load_tile(mats[m + 1], gw, 0, wn);
        const int c0 = round * kTile + lane;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = min(c0 + u * kWarp, n_chunks - 1);
          typename D::X x;
          D::load_x(c, xq, xds, x);
          const float d = D::dot(w[u], c, x);
          acc += c0 + u * kWarp < n_chunks ? d : 0.f;
        }
        if (round == rounds - 1) {
          const float v = warp_sum(acc);
          if (lane == 0) out[n] = v;
          acc = 0.f;
        }
        if (!more) break;
#pragma unroll
        for (int u = 0; u < U; ++u) w[u] = wn[u];
        n = n2;
        round = round2;
      }
      if (next_rows) {
#pragma unroll
        for (int u = 0; u < U; ++u) w[u] = wn[u];
      }
    } else if (next_rows) {
      load_tile(mats[m + 1], gw, 0, w);
    }
    have = next_rows;
    grid_barrier(bar, bar + 1);
    if (gap_ns > 0) {
      if (blockIdx.x == 0 && threadIdx.x == 0) spin_ns(gap_ns);
      grid_barrier(bar, bar + 1);
    }
  }
}

// ---- chain2: can a side prefetcher keep DRAM busy under the attention gap? -------------------------------
// The attention stand-in of layer L: `gridDim.x` blocks spin ns; block 0 first publishes L + 1.
__global__ void attn_gap_kernel(int64_t ns, unsigned* progress, unsigned layer) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    atomicExch(progress, layer + 1);
    __threadfence();
  }
  spin_ns(ns);
}

// Runs beside the chain (a forked graph branch) on its own few blocks: for layer L, waits until the chain's
// attention stand-in of L has started, then has L2 fetch `bytes` from starts[L] (the weights read after it):
// MODE 0 bulk prefetches (cp.async.bulk.prefetch.L2, 16 KiB pieces), 1 prefetch.global.L2 per 128-byte line,
// 2 real 16-byte loads (XOR, discarded). Gives up after 20 ms without progress (never hangs the probe).
template <int MODE>
__global__ void prefetcher_kernel(const uint8_t* const* __restrict__ starts, int n_layers, int64_t bytes,
                                  unsigned* progress, unsigned* sink) {
  __shared__ int go;
  uint32_t acc = 0;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t lanes = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int L = 0; L < n_layers; ++L) {
    if (threadIdx.x == 0) {
      const uint64_t t0 = now_ns();
      go = 1;
      while (*reinterpret_cast<volatile unsigned*>(progress) < static_cast<unsigned>(L + 1)) {
        __nanosleep(100);
        if (now_ns() - t0 > 20000000ull) {
          go = 0;
          break;
        }
      }
    }
    __syncthreads();
    if (!go) return;
    const uint8_t* p = starts[L];
    if (MODE == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      constexpr int64_t kPiece = 16 << 10;
      for (int64_t o = tid * kPiece; o < bytes; o += lanes * kPiece) {
        const uint32_t n = static_cast<uint32_t>(min(kPiece, bytes - o));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
      }
#endif
    } else if (MODE == 1) {
      for (int64_t o = tid * 128; o < bytes; o += lanes * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
    } else {
      const uint4* q = reinterpret_cast<const uint4*>(p);
      const int64_t n16 = bytes / 16;
      int64_t i = tid;
      for (; i + 3 * lanes < n16; i += 4 * lanes) {
        const uint4 a = q[i], b = q[i + lanes], c = q[i + 2 * lanes], d = q[i + 3 * lanes];
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
      }
      for (; i < n16; i += lanes) acc ^= q[i].x;
    }
    __syncthreads();
  }
  if (acc == 0x12345678u) *sink = acc;
}

__global__ void fill_kernel(uint8_t* p, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n / 4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15;
    reinterpret_cast<uint32_t*>(p)[i] = h * 2246822519u;
  }
}

// ---- tma: the weights copied to shared memory by the bulk-copy engine (cp.async.bulk, sm_90) --------------
// One block per SM (or BPS), rows [b N / G, (b + 1) N / G) of a Q4_0 split-row matrix. A producer warp keeps S
// stages of R contiguous rows in flight (one bulk copy a stage, completion counted on the stage's `full`
// mbarrier); NW consumer warps compute each stage's rows from shared memory (warps split a row's chunks when
// R < NW), write partial sums and arrive on the stage's `empty` mbarrier; the producer sums the partials into
// out and refills the stage. The first S stages are issued before griddepcontrol.wait (weights never depend
// on the previous kernel), so with PDL a kernel's weights stream in during whatever runs before it.
struct TmaGeom {
  int R = 8, S = 4, NW = 8;
  int split = 1;    // warps per row (NW / R when R < NW)
  int two = 0;      // NW 8 only: registers for two blocks per SM (the next matvec beside this one)
  int compute = 1;  // 0: the consumers only wait for each stage and release it (the copy engine's rate)
  int64_t stage_bytes = 0, x_off = 0, part_off = 0, stage_off = 0, smem = 0;
  unsigned long long* stamps = nullptr;  // trace: [idx][block][4] globaltimer (entry, after wait, stage 0 in, end)
  int idx = 0;
};

__device__ __forceinline__ void stamp(unsigned long long* p) { *p = now_ns(); }

TmaGeom tma_geom(int64_t K, int64_t row_bytes, int64_t smem_budget, int64_t stage_target, int nw = 8) {
  TmaGeom g;
  g.NW = nw;
  const int64_t fit = stage_target / row_bytes;
  g.R = 1;
  while (g.R * 2 <= fit && g.R < 32) g.R *= 2;
  g.stage_bytes = (g.R * row_bytes + 127) / 128 * 128;
  // [full 16][empty 16] mbarriers | part [16][R][NW / R or 1] floats | xa [K/32][16] xb [K/32][16] xds [K/32] | stages
  const int split = g.split = g.R >= g.NW ? 1 : g.NW / g.R;
  g.part_off = 16 * 8 * 2;
  g.x_off = g.part_off + (16 * g.R * split * 4 + 127) / 128 * 128;
  g.stage_off = g.x_off + (K + K / 32 * 8 + 127) / 128 * 128;
  g.S = static_cast<int>((smem_budget - g.stage_off) / g.stage_bytes);
  g.S = g.S > 16 ? 16 : g.S;
  g.smem = g.stage_off + g.S * g.stage_bytes;
  return g;
}

[[maybe_unused]] __device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
[[maybe_unused]] __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
// Expect `bytes` on bar (this thread's arrival) and have the bulk-copy engine move them there.
[[maybe_unused]] __device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

template <int NW, int MINB>
__global__ void __launch_bounds__((NW + 1) * 32, MINB)
    tma_q40_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t N, int64_t K, TmaGeom g,
                   const int8_t* __restrict__ xq, const XDs* __restrict__ xds, float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t sm[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * N / gridDim.x;
  const int64_t r1 = static_cast<int64_t>(blockIdx.x + 1) * N / gridDim.x;
  const int T = static_cast<int>((r1 - r0 + g.R - 1) / g.R);
  const uint32_t bars = smem_u32(sm);
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (16 + s); };
  float* part = reinterpret_cast<float*>(sm + g.part_off);
  const int split = g.split;
  if (threadIdx.x == 0) {
    for (int s = 0; s < g.S; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), g.NW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto stage_rows = [&](int t) { return static_cast<int>(min(static_cast<int64_t>(g.R), r1 - r0 - static_cast<int64_t>(t) * g.R)); };
  auto issue = [&](int t) {
    const int s = t % g.S;
    bulk_load(smem_u32(sm + g.stage_off + s * g.stage_bytes), w + (r0 + static_cast<int64_t>(t) * g.R) * row_bytes,
              static_cast<uint32_t>(stage_rows(t) * row_bytes), full(s));
  };
  const int n_chunks = static_cast<int>(K / 32);
  unsigned long long* my_st = g.stamps ? g.stamps + (static_cast<int64_t>(g.idx) * gridDim.x + blockIdx.x) * 4 : nullptr;
  if (my_st && threadIdx.x == 0) stamp(my_st);
  if (warp == g.NW) {  // producer
    if (lane == 0)
      for (int t = 0; t < T && t < g.S; ++t) issue(t);
    allow_dependents();
    grid_dependency_wait();
    if (my_st && lane == 0) stamp(my_st + 1);
    for (int t = 0; t < T; ++t) {
      const int s = t % g.S;
      mbar_wait(empty(s), (t / g.S) & 1);
      const int rows = stage_rows(t);
      if (split > 1 && lane < rows) {
        float v = 0.f;
        for (int j = 0; j < split; ++j) v += part[(s * g.R + lane) * split + j];
        out[r0 + static_cast<int64_t>(t) * g.R + lane] = v;
      }
      __syncwarp();
      if (lane == 0 && t + g.S < T) issue(t + g.S);
    }
    if (my_st && lane == 0) stamp(my_st + 3);
    return;
  }
  // consumers: the token's activations into shared memory (xa / xb planes: lanes read 16 contiguous bytes)
  grid_dependency_wait();
  uint4* xa = reinterpret_cast<uint4*>(sm + g.x_off);
  uint4* xb = xa + n_chunks;
  XDs* xd = reinterpret_cast<XDs*>(xb + n_chunks);
  for (int c = threadIdx.x; c < n_chunks; c += g.NW * kWarp) {
    xa[c] = reinterpret_cast<const uint4*>(xq)[2 * c];
    xb[c] = reinterpret_cast<const uint4*>(xq)[2 * c + 1];
    xd[c] = xds[c];
  }
  asm volatile("bar.sync 1, %0;" ::"r"(g.NW * kWarp) : "memory");
  using D = ChunkDec<ferry::DType::Q4_0>;
  const int my_row = split > 1 ? warp / split : warp;
  const int slice = split > 1 ? warp % split : 0;
  // A row's sum (every lane has it): a partial for the producer when warps split rows, else out directly.
  auto row_done = [&](float acc, int s, int t, int r) {
    if (lane != 0) return;
    if (split > 1) {
      part[(s * g.R + r) * split + slice] = acc;
    } else {
      out[r0 + static_cast<int64_t>(t) * g.R + r] = acc;
    }
  };
  // compute == 2: this warp's chunks are (slice + split i) 32 + lane, i < 4 (n_chunks <= 128 split): their
  // activations stay in registers for the whole kernel, and a row's weights are loaded before any dot.
  constexpr int kCpl = 4;
  D::X xr[kCpl];
  if (g.compute == 2) {
#pragma unroll
    for (int i = 0; i < kCpl; ++i) {
      const int c = min((slice + split * i) * kWarp + lane, n_chunks - 1);
      const uint4 a = xa[c], b = xb[c];
      xr[i].a = Q16{{a.x, a.y, a.z, a.w}};
      xr[i].b = Q16{{b.x, b.y, b.z, b.w}};
      xr[i].ds = xd[c];
    }
  }
  for (int t = 0; t < T; ++t) {
    const int s = t % g.S;
    mbar_wait(full(s), (t / g.S) & 1);
    if (my_st && t == 0 && threadIdx.x == 0) stamp(my_st + 2);
    const int rows = stage_rows(t);
    const uint8_t* st = sm + g.stage_off + s * g.stage_bytes;
    if (g.compute == 2) {
      for (int r = my_row; r < rows; r += split > 1 ? g.R : g.NW) {
        const uint8_t* row = st + r * row_bytes;
        D::W wv[kCpl];
#pragma unroll
        for (int i = 0; i < kCpl; ++i) {
          const int c = min((slice + split * i) * kWarp + lane, n_chunks - 1);
          wv[i].q = *reinterpret_cast<const Q16*>(row + 16 * c);
          wv[i].d = *reinterpret_cast<const uint16_t*>(row + K / 2 + 2 * c);
        }
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < kCpl; ++i) {
          const float d = D::dot(wv[i], 0, xr[i]);
          acc += (slice + split * i) * kWarp + lane < n_chunks ? d : 0.f;
        }
        row_done(warp_sum(acc), s, t, r);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty(s));
      continue;
    }
    for (int r = my_row; g.compute && r < rows; r += split > 1 ? g.R : g.NW) {
      const uint8_t* row = st + r * row_bytes;
      float acc = 0.f;
#pragma unroll 4
      for (int c = slice * kWarp + lane; c < n_chunks; c += split * kWarp) {
        D::W wv;
        wv.q = *reinterpret_cast<const Q16*>(row + 16 * c);
        wv.d = *reinterpret_cast<const uint16_t*>(row + K / 2 + 2 * c);
        D::X x;
        const uint4 a = xa[c], b = xb[c];
        x.a = Q16{{a.x, a.y, a.z, a.w}};
        x.b = Q16{{b.x, b.y, b.z, b.w}};
        x.ds = xd[c];
        acc += D::dot(wv, c, x);
      }
      row_done(warp_sum(acc), s, t, r);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));
  }
#endif
}

// Launch with or without programmatic dependent launch.
void launch_tma(cudaStream_t st, bool pdl, unsigned grid, const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K,
                const TmaGeom& g, const int8_t* xq, const XDs* xds, float* out) {
  auto kern = g.NW == 16 ? tma_q40_kernel<16, 1> : g.two ? tma_q40_kernel<8, 2> : tma_q40_kernel<8, 1>;
  CK(launch_ex(pdl, kern, dim3(grid), dim3((g.NW + 1) * kWarp), static_cast<size_t>(g.smem), st, w, row_bytes, N, K,
               g, xq, xds, out));
}

// The attention stand-in for PDL chains: waits for the kernel before it, lets the next one go, spins.
// early: let the next kernel go before waiting (its blocks then load while this one's predecessor runs).
__global__ void pdl_gap_kernel(int64_t ns, int early, unsigned long long* st) {
  if (early) allow_dependents();
  grid_dependency_wait();
  allow_dependents();
  if (st && blockIdx.x == 0 && threadIdx.x == 0) stamp(st);
  spin_ns(ns);
  if (st && blockIdx.x == 0 && threadIdx.x == 0) stamp(st + 1);
}
void launch_pdl_gap(cudaStream_t st, int64_t ns, int early = 0, unsigned long long* stamps = nullptr) {
  CK(launch_ex(true, pdl_gap_kernel, dim3(64), dim3(128), 0, st, ns, early, stamps));
}

// Max dynamic shared memory, and (carve) the max-shared carveout for these and the stand-in, so a matvec's
// block can sit beside another kernel's on an SM.
void tma_smem_attr(bool carve = false) {
  const int pc = carve ? cudaSharedmemCarveoutMaxShared : cudaSharedmemCarveoutDefault;
  CK(cudaFuncSetAttribute(tma_q40_kernel<8, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  CK(cudaFuncSetAttribute(tma_q40_kernel<8, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  CK(cudaFuncSetAttribute(tma_q40_kernel<16, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  CK(cudaFuncSetAttribute(tma_q40_kernel<8, 1>, cudaFuncAttributePreferredSharedMemoryCarveout, pc));
  CK(cudaFuncSetAttribute(tma_q40_kernel<8, 2>, cudaFuncAttributePreferredSharedMemoryCarveout, pc));
  CK(cudaFuncSetAttribute(tma_q40_kernel<16, 1>, cudaFuncAttributePreferredSharedMemoryCarveout, pc));
  CK(cudaFuncSetAttribute(pdl_gap_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pc));
}


struct Env {
  int sms = 132;
  double copy_gbps = 0;
  cudaEvent_t a, b;
};

template <class F>
double time_ms(Env& e, int iters, const F& launch) {
  for (int i = 0; i < 8; ++i) launch(i);
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(e.a));
  for (int i = 0; i < iters; ++i) launch(i);
  CK(cudaEventRecord(e.b));
  CK(cudaEventSynchronize(e.b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e.a, e.b));
  return ms / iters;
}

// ms per replay of the graph that enqueue(stream) records.
template <class F>
double time_graph(Env& e, const F& enqueue) {
  cudaStream_t cs;
  CK(cudaStreamCreate(&cs));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
  enqueue(cs);
  CK(cudaStreamEndCapture(cs, &graph));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, graph, 0));
  const double ms = time_ms(e, 5, [&](int) { CK(cudaGraphLaunch(ge, cs)); });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(cs));
  return ms;
}

template <class D, int U, int MB, int MODE, bool CONTIG, int XM = kXPlain>
void run_v3(Env& e, const char* name, uint8_t* const* bufs, int64_t row_bytes, int64_t N, int64_t K,
            const int8_t* xq, const XDs* xds, float* out) {
  auto kern = v3_kernel<D, U, MB, MODE, CONTIG, XM>;
  const int smem = XM == kXSmem ? static_cast<int>(K) : 0;
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kern, 256, smem));
  const int64_t max_warps = static_cast<int64_t>(e.sms) * 8 * bps;
  const int64_t rpw = (N + max_warps - 1) / max_warps;
  const int64_t n_warps = (N + rpw - 1) / rpw;
  const unsigned grid = static_cast<unsigned>((n_warps + 7) / 8);
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, kern));
  const double ms = time_ms(e, 64, [&](int i) {
    kern<<<grid, 256, smem>>>(bufs[i % 8], row_bytes, N, K, n_warps, xq, xds, out);
  });
  CK(cudaGetLastError());
  const double gbps = static_cast<double>(N * row_bytes) / (ms * 1e6);
  static const char* const kX[] = {"", " x-ahead", " x-smem", " whole"};
  std::printf("%-28s %s%s  regs %3d  local %3d  blocks/SM %d  %7.2f us  %6.0f GB/s  %5.1f %% of copy\n", name,
              CONTIG ? "contig " : "strided", kX[XM], fa.numRegs, static_cast<int>(fa.localSizeBytes), bps, ms * 1e3,
              gbps, 100.0 * gbps / e.copy_gbps);
}

}  // namespace

// A llama3-8b decode step's 129 matrices (32 x QKV 6144 x 4096, O 4096 x 4096, gate + up 28672 x 4096,
// down 4096 x 14336, then the 128256 x 4096 head) as Q4_0 split rows, one allocation in reading order
// (*base, *total bytes), filled with hashed bytes.
std::vector<ChainMat> llama3_step(uint8_t** base, int64_t* total) {
  std::vector<ChainMat> mats;
  auto add = [&](int64_t N, int64_t K) { mats.push_back(ChainMat{nullptr, N, K, K / 2 + K / 16}); };
  for (int l = 0; l < 32; ++l) {
    add(6144, 4096);
    add(4096, 4096);
    add(28672, 4096);
    add(4096, 14336);
  }
  add(128256, 4096);
  *total = 0;
  for (const ChainMat& m : mats) *total += m.N * m.row_bytes;
  CK(cudaMalloc(base, *total));
  fill_kernel<<<1024, 256>>>(*base, *total);
  int64_t off = 0;
  for (ChainMat& m : mats) {
    m.w = *base + off;
    off += m.N * m.row_bytes;
  }
  return mats;
}

// The chain probes' token activations (K up to 14336, constant bytes: timing only) and output (head rows).
void chain_act(int8_t** xq, XDs** xds, float** out) {
  const int64_t kmax = 14336;
  CK(cudaMalloc(xq, kmax));
  CK(cudaMemset(*xq, 3, kmax));
  CK(cudaMalloc(xds, kmax / 32 * sizeof(XDs)));
  CK(cudaMemset(*xds, 0, kmax / 32 * sizeof(XDs)));
  CK(cudaMalloc(out, 128256 * sizeof(float)));
}

// `mv_probe chain`: a llama3-8b decode step's 129 matvecs (32 x QKV 6144 x 4096, O 4096 x 4096, gate + up
// 28672 x 4096, down 4096 x 14336, then the 128256 x 4096 head), Q4_0 split rows (4.22 GB), three ways:
// one launch per matrix (the v3 pattern: what the decode chain does), one cooperative kernel with a grid
// barrier per matrix, and that kernel with the next matrix's first tile loaded before each barrier; each
// with no gap, and with 2 us of serial work between matrices (a gap kernel / block 0 spinning).
void run_chain(Env& e) {
  uint8_t* base;
  int64_t total;
  std::vector<ChainMat> mats = llama3_step(&base, &total);
  ChainMat* dmats;
  CK(cudaMalloc(&dmats, mats.size() * sizeof(ChainMat)));
  CK(cudaMemcpy(dmats, mats.data(), mats.size() * sizeof(ChainMat), cudaMemcpyHostToDevice));
  int8_t* xq;
  XDs* xds;
  float* out;
  chain_act(&xq, &xds, &out);
  unsigned* bar;
  CK(cudaMalloc(&bar, 2 * sizeof(unsigned)));
  CK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
  CK(cudaDeviceSynchronize());
  std::printf("-- chain: %zu matrices, %.2f GB of Q4_0 weights per step --\n", mats.size(), total / 1e9);
  using Q40 = ChunkDec<ferry::DType::Q4_0>;
  auto vk = v3_kernel<Q40, 2, 4, kFull, false>;
  int bps_v3 = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps_v3, vk, 256, 0));
  auto launch_v3 = [&](cudaStream_t st, const ChainMat& m) {  // sized as ferry's launch_v3 sizes it
    const int64_t max_warps = static_cast<int64_t>(e.sms) * 8 * bps_v3;
    const int64_t rpw = (m.N + max_warps - 1) / max_warps;
    const int64_t n_warps = (m.N + rpw - 1) / rpw;
    vk<<<static_cast<unsigned>((n_warps + 7) / 8), 256, 0, st>>>(m.w, m.row_bytes, m.N, m.K, n_warps, xq, xds, out);
  };
  for (int64_t gap : {int64_t{0}, int64_t{2000}}) {
    auto enqueue = [&](cudaStream_t st) {
      for (const ChainMat& m : mats) {
        launch_v3(st, m);
        if (gap > 0) gap_kernel<<<1, 32, 0, st>>>(gap);
      }
    };
    const double ms_launch = time_ms(e, 5, [&](int) { enqueue(nullptr); });
    CK(cudaGetLastError());
    std::printf("launch per matrix, gap %5lld ns: %7.3f ms/step  %6.0f GB/s  %5.1f %% of copy\n",
                static_cast<long long>(gap), ms_launch, total / (ms_launch * 1e6), 100.0 * total / (ms_launch * 1e6) / e.copy_gbps);
    const double ms_graph = time_graph(e, enqueue);  // the same launches replayed from a CUDA graph (ferry's step)
    std::printf("launch per matrix, CUDA graph, gap %5lld ns: %7.3f ms/step  %6.0f GB/s  %5.1f %% of copy\n",
                static_cast<long long>(gap), ms_graph, total / (ms_graph * 1e6),
                100.0 * total / (ms_graph * 1e6) / e.copy_gbps);
    for (int pf = 0; pf < 2; ++pf) {
      void (*kern)(const ChainMat*, int, const int8_t*, const XDs*, float*, unsigned*, int64_t) =
          pf ? chain_kernel<true> : chain_kernel<false>;
      int bps = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kern, 256, 0));
      const dim3 grid(static_cast<unsigned>(e.sms * bps));
      int n_mats = static_cast<int>(mats.size());
      int64_t g = gap;
      void* args[] = {&dmats, &n_mats, &xq, &xds, &out, &bar, &g};
      const double ms = time_ms(e, 5, [&](int) {
        CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kern), grid, dim3(256), args, 0, nullptr));
      });
      std::printf("persistent%s, %d blocks/SM, gap %5lld ns: %7.3f ms/step  %6.0f GB/s  %5.1f %% of copy\n",
                  pf ? " + prefetch across barriers" : "", bps, static_cast<long long>(gap), ms, total / (ms * 1e6),
                  100.0 * total / (ms * 1e6) / e.copy_gbps);
    }
  }
  // L2 prefetch in the gaps: the gap before matrix m asks L2 for m's first pf bytes (all of it when pf
  // covers it), from `gb` blocks of 32 lanes; CUDA graph replay, as ferry's decode step.
  for (int64_t gap : {int64_t{2000}, int64_t{5000}}) {
    for (int64_t pf : {int64_t{0}, int64_t{4} << 20, int64_t{8} << 20, int64_t{16} << 20, int64_t{32} << 20}) {
      for (int gb : {1, 16}) {
        if (pf == 0 && gb > 1) continue;
        const double ms = time_graph(e, [&](cudaStream_t st) {
          for (const ChainMat& m : mats) {
            gap_pf_kernel<<<gb, 32, 0, st>>>(gap, m.w, std::min<int64_t>(pf, m.N * m.row_bytes));
            launch_v3(st, m);
          }
        });
        std::printf("graph, gap %5lld ns + L2 prefetch %2lld MiB from %2d blocks: %7.3f ms/step  %6.0f GB/s  %5.1f %% of copy\n",
                    static_cast<long long>(gap), static_cast<long long>(pf >> 20), gb, ms, total / (ms * 1e6),
                    100.0 * total / (ms * 1e6) / e.copy_gbps);
      }
    }
  }
  CK(cudaFree(base));
}

// `mv_probe chain2`: the llama3-8b step's matvecs with an attention stand-in of gap_ns (64 blocks x 128) after
// each layer's QKV, CUDA graph replay; with and without a side prefetcher (forked branch, P blocks) that
// fetches the next `bytes` of weights (O, then gate / up ...) into L2 as each layer's gap starts.
void run_chain2(Env& e) {
  uint8_t* base;
  int64_t total;
  std::vector<ChainMat> mats = llama3_step(&base, &total);
  std::vector<const uint8_t*> starts(32);
  for (int l = 0; l < 32; ++l) starts[l] = mats[4 * l + 1].w;  // O of layer l, then its gate / up, down
  const uint8_t** dstarts;
  CK(cudaMalloc(&dstarts, 32 * sizeof(void*)));
  CK(cudaMemcpy(dstarts, starts.data(), 32 * sizeof(void*), cudaMemcpyHostToDevice));
  int8_t* xq;
  XDs* xds;
  float* out;
  chain_act(&xq, &xds, &out);
  unsigned *progress, *sink;
  CK(cudaMalloc(&progress, 4));
  CK(cudaMalloc(&sink, 4));
  CK(cudaDeviceSynchronize());
  std::printf("-- chain2: %zu matrices, %.2f GB of Q4_0 weights per step, attention stand-in after each QKV --\n",
              mats.size(), total / 1e9);
  using Q40 = ChunkDec<ferry::DType::Q4_0>;
  auto vk = v3_kernel<Q40, 2, 4, kFull, false>;
  int bps_v3 = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps_v3, vk, 256, 0));
  auto launch_v3 = [&](cudaStream_t st, const ChainMat& m, int sms) {
    const int64_t max_warps = static_cast<int64_t>(sms) * 8 * bps_v3;
    const int64_t rpw = (m.N + max_warps - 1) / max_warps;
    const int64_t n_warps = (m.N + rpw - 1) / rpw;
    vk<<<static_cast<unsigned>((n_warps + 7) / 8), 256, 0, st>>>(m.w, m.row_bytes, m.N, m.K, n_warps, xq, xds, out);
  };
  cudaStream_t side;
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  struct Cfg {
    int64_t gap;
    int mode;  // -1: no prefetcher
    int blocks;
    int64_t mib;
    int reserve;  // SMs the matvecs leave out
  };
  const std::vector<Cfg> cfgs = {{0, -1, 0, 0, 0},       {10000, -1, 0, 0, 0},  {5000, -1, 0, 0, 0},
                                 {10000, 0, 16, 16, 0},  {10000, 0, 16, 32, 0}, {10000, 0, 32, 32, 0},
                                 {10000, 1, 16, 16, 0},  {10000, 1, 16, 32, 0}, {10000, 1, 32, 32, 0},
                                 {10000, 2, 16, 16, 0},  {10000, 2, 16, 32, 0}, {10000, 2, 32, 32, 0},
                                 {10000, 0, 16, 32, 16}, {10000, 1, 16, 32, 16}, {10000, 2, 16, 32, 16},
                                 {10000, -1, 0, 0, 16},  {0, 1, 16, 32, 0},     {5000, 1, 16, 16, 0},
                                 {10000, 0, 8, 12, 0},   {10000, 1, 8, 12, 0},  {10000, 2, 64, 32, 0}};
  for (int rep = 0; rep < 2; ++rep) {
    for (const Cfg& c : cfgs) {
      const double ms = time_graph(e, [&](cudaStream_t st) {
        CK(cudaMemsetAsync(progress, 0, 4, st));
        if (c.mode >= 0) {
          CK(cudaEventRecord(fork, st));
          CK(cudaStreamWaitEvent(side, fork, 0));
          const int64_t bytes = c.mib << 20;
          auto pk = c.mode == 0 ? prefetcher_kernel<0> : c.mode == 1 ? prefetcher_kernel<1> : prefetcher_kernel<2>;
          pk<<<c.blocks, 256, 0, side>>>(dstarts, 32, bytes, progress, sink);
          CK(cudaEventRecord(join, side));
        }
        for (size_t i = 0; i < mats.size(); ++i) {
          launch_v3(st, mats[i], e.sms - c.reserve);
          if (c.gap > 0 && i % 4 == 0 && i / 4 < 32)
            attn_gap_kernel<<<64, 128, 0, st>>>(c.gap, progress, static_cast<unsigned>(i / 4));
        }
        if (c.mode >= 0) CK(cudaStreamWaitEvent(st, join, 0));
      });
      CK(cudaGetLastError());
      const double gap_ms = 32.0 * c.gap / 1e6;
      std::printf("gap %5lld ns  pf %-4s %2d blocks %2lld MiB  matvec SMs %3d: %7.3f ms/step (%.3f less the gaps)  %6.0f GB/s  %5.1f %% of copy\n",
                  static_cast<long long>(c.gap), c.mode < 0 ? "none" : c.mode == 0 ? "bulk" : c.mode == 1 ? "line" : "load",
                  c.blocks, static_cast<long long>(c.mib), e.sms - c.reserve, ms, ms - gap_ms, total / (ms * 1e6),
                  100.0 * total / (ms * 1e6) / e.copy_gbps);
    }
  }
  CK(cudaFree(base));
}

// `mv_probe tma`: the bulk-copy matvec (tma_q40_kernel) on one matrix against the v3 Q4_0 kernel: its
// result (rows with sane scales), then % of copy for the shapes of a llama3-8b layer, plain launches and
// PDL launches (the next matrix's first stages load during the last one's tail), per smem budget / stage.
void run_tma(Env& e, bool one) {
  cudaStream_t cs;
  CK(cudaStreamCreate(&cs));
  using Q40 = ChunkDec<ferry::DType::Q4_0>;
  struct Shape {
    int64_t N, K;
  };
  std::vector<Shape> shapes = {Shape{4096, 4096}, Shape{6144, 4096}, Shape{14336, 4096}, Shape{4096, 14336}};
  if (one) shapes = {Shape{14336, 4096}};
  for (const Shape sh : shapes) {
    const int64_t N = sh.N, K = sh.K, rb = K / 2 + K / 16, mat = N * rb;
    std::vector<uint8_t*> bufs(8);
    std::vector<uint8_t> host(mat);
    uint32_t s = 777;
    for (int64_t i = 0; i < mat; ++i) host[i] = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
    for (int64_t r = 0; r < N; ++r)  // scales in [2^-8, 2^-1]
      for (int64_t c = 0; c < K / 32; ++c) {
        const uint16_t h = static_cast<uint16_t>(0x1C00 + ((s = s * 1664525u + 1013904223u) >> 20) % 0x1C00);
        std::memcpy(&host[r * rb + K / 2 + 2 * c], &h, 2);
      }
    for (auto& b : bufs) {
      CK(cudaMalloc(&b, mat));
      CK(cudaMemcpy(b, host.data(), mat, cudaMemcpyHostToDevice));
    }
    int8_t* xq;
    XDs* xds;
    float *out, *ref;
    CK(cudaMalloc(&xq, K));
    CK(cudaMalloc(&xds, K / 32 * sizeof(XDs)));
    CK(cudaMalloc(&out, N * sizeof(float)));
    CK(cudaMalloc(&ref, N * sizeof(float)));
    std::vector<int8_t> hx(K);
    std::vector<XDs> hd(K / 32);
    for (auto& v : hx) v = static_cast<int8_t>((s = s * 1664525u + 1013904223u) >> 25);
    for (size_t c = 0; c < hd.size(); ++c) {
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += hx[32 * c + j];
      hd[c] = make_float2(0.01f, 0.01f * sum);
    }
    CK(cudaMemcpy(xq, hx.data(), K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xds, hd.data(), hd.size() * sizeof(XDs), cudaMemcpyHostToDevice));
    std::printf("-- tma: %lld x %lld Q4_0 split rows, %.1f MB --\n", static_cast<long long>(N), static_cast<long long>(K),
                mat / 1e6);
    run_v3<Q40, 2, 4, kFull, false>(e, "Q4_0 v3 full U2 MB4 (default)", bufs.data(), rb, N, K, xq, xds, ref);
    std::vector<float> hr(N), ho(N);
    CK(cudaMemcpy(hr.data(), ref, N * 4, cudaMemcpyDeviceToHost));
    tma_smem_attr();
    struct Cfg {
      int64_t budget, stage;
      int bps, nw;
    };
    std::vector<Cfg> cfgs = {Cfg{100 << 10, 40 << 10, 1, 16}, Cfg{200 << 10, 40 << 10, 1, 16}, Cfg{100 << 10, 20 << 10, 1, 8}};
    if (one) cfgs = {Cfg{100 << 10, 40 << 10, 1, 16}};
    for (const Cfg c : cfgs)
    for (int cm = 2; cm >= 1; --cm) {
      TmaGeom g = tma_geom(K, rb, c.budget, c.stage, c.nw);
      g.compute = cm;
      if (cm == 2 && K / 32 > 128 * g.split) continue;
      const unsigned grid = static_cast<unsigned>(e.sms * c.bps);
      CK(cudaMemset(out, 0, N * 4));
      launch_tma(cs, false, grid, bufs[0], rb, N, K, g, xq, xds, out);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(ho.data(), out, N * 4, cudaMemcpyDeviceToHost));
      double md = 0, mr = 0;
      for (int64_t i = 0; i < N; ++i) {
        md = std::max(md, static_cast<double>(std::fabs(ho[i] - hr[i])));
        mr = std::max(mr, static_cast<double>(std::fabs(hr[i])));
      }
      for (int pdl = 0; pdl < 2; ++pdl) {
        const double ms = time_ms(e, 64, [&](int i) { launch_tma(cs, pdl, grid, bufs[i % 8], rb, N, K, g, xq, xds, out); });
        CK(cudaGetLastError());
        const double gbps = mat / (ms * 1e6);
        std::printf("tma %s NW %2d R %2d S %2d smem %6lld bps %d %s: max |diff| %.2e of %.2e  %7.2f us  %6.0f GB/s  %5.1f %% of copy\n",
                    cm == 2 ? "x-regs" : "x-smem", g.NW, g.R, g.S, static_cast<long long>(g.smem), c.bps, pdl ? "pdl  " : "plain", md, mr, ms * 1e3, gbps,
                    100.0 * gbps / e.copy_gbps);
      }
    }
    for (auto& b : bufs) CK(cudaFree(b));
    CK(cudaFree(xq));
    CK(cudaFree(xds));
    CK(cudaFree(out));
    CK(cudaFree(ref));
  }
}

// `mv_probe chain3`: the llama3-8b step's 129 matvecs as bulk-copy matvecs launched with PDL (each loads its
// first stages during whatever runs before it), CUDA graph replay, with an attention stand-in (64 blocks x
// 128, PDL: it lets the O projection go as it starts) of 0 / 5 / 10 us after each QKV.
void run_chain3(Env& e) {
  uint8_t* base;
  int64_t total;
  std::vector<ChainMat> mats = llama3_step(&base, &total);
  int8_t* xq;
  XDs* xds;
  float* out;
  chain_act(&xq, &xds, &out);
  tma_smem_attr();
  std::printf("-- chain3: %zu bulk-copy matvecs with PDL, %.2f GB of Q4_0 weights per step --\n", mats.size(), total / 1e9);
  struct Cfg {
    int64_t budget, stage;
    int bps, nw, two, carve;
  };
  for (int rep = 0; rep < 2; ++rep)
    for (const Cfg c : {Cfg{100 << 10, 40 << 10, 1, 16, 0, 0}, Cfg{100 << 10, 20 << 10, 1, 8, 1, 1},
                        Cfg{110 << 10, 20 << 10, 1, 8, 1, 1}, Cfg{110 << 10, 20 << 10, 1, 8, 0, 1}})
      for (int gm = 0; gm < 3; ++gm)  // 0: no gap; 1: 10 us gap, trigger after its wait; 2: trigger first
        for (int compute = 2; compute >= 0; --compute) {
          const int64_t gap = gm ? 10000 : 0;
          // x-regs needs <= 4 chunks a lane: K = 14336 split over >= 4 warps (16 warps, or 8 with 2-row stages)
          if (compute == 2 && c.nw == 8 && c.stage > (20 << 10)) continue;
          tma_smem_attr(c.carve);
          const double ms = time_graph(e, [&](cudaStream_t st) {
            for (size_t i = 0; i < mats.size(); ++i) {
              const ChainMat& m = mats[i];
              TmaGeom g = tma_geom(m.K, m.row_bytes, c.budget, c.stage, c.nw);
              g.compute = compute;
              g.two = c.two;
              launch_tma(st, true, static_cast<unsigned>(e.sms * c.bps), m.w, m.row_bytes, m.N, m.K, g, xq, xds, out);
              if (gap > 0 && i % 4 == 0 && i / 4 < 32) launch_pdl_gap(st, gap, gm == 2);
            }
          });
          CK(cudaGetLastError());
          const double gap_ms = 32.0 * gap / 1e6;
          std::printf("budget %6lld stage %6lld NW %2d%s%s gap %5lld ns %s: %7.3f ms/step (%.3f less the gaps)  %6.0f GB/s  %5.1f %% of copy\n",
                      static_cast<long long>(c.budget), static_cast<long long>(c.stage), c.nw, c.two ? " 2/SM" : "",
                      c.carve ? " carve" : "", static_cast<long long>(gap),
                      compute == 2 ? (gm == 2 ? "x in regs early" : "x in regs      ") : compute ? (gm == 2 ? "compute   early" : "compute        ") : (gm == 2 ? "copy only early" : "copy only      "), ms, ms - gap_ms, total / (ms * 1e6),
                      100.0 * total / (ms * 1e6) / e.copy_gbps);
        }
  // Trace: one replay's globaltimer stamps of layer 10's kernels, for two configurations with 10 us gaps.
  unsigned long long* stamps;
  const size_t n_st = mats.size() * 264 * 4 + 64;
  CK(cudaMalloc(&stamps, n_st * 8));
  for (int cfg = 0; cfg < 2; ++cfg) {
    const Cfg c = cfg == 0 ? Cfg{110 << 10, 20 << 10, 1, 8, 1, 1} : Cfg{110 << 10, 20 << 10, 1, 8, 1, 1};
    const int compute = cfg == 0 ? 0 : 2;
    tma_smem_attr(c.carve);
    CK(cudaMemset(stamps, 0, n_st * 8));
    time_graph(e, [&](cudaStream_t st) {
      for (size_t i = 0; i < mats.size(); ++i) {
        const ChainMat& m = mats[i];
        TmaGeom g = tma_geom(m.K, m.row_bytes, c.budget, c.stage, c.nw);
        g.compute = compute;
        g.two = c.two;
        g.stamps = stamps;
        g.idx = static_cast<int>(i);
        launch_tma(st, true, static_cast<unsigned>(e.sms * c.bps), m.w, m.row_bytes, m.N, m.K, g, xq, xds, out);
        if (i % 4 == 0 && i / 4 < 32) launch_pdl_gap(st, 10000, 0, stamps + n_st - 64 + 2 * (i / 4 % 32 == 10 ? 0 : 1));
      }
    });
    std::vector<unsigned long long> h(n_st);
    CK(cudaMemcpy(h.data(), stamps, n_st * 8, cudaMemcpyDeviceToHost));
    const int G = e.sms * c.bps;
    const unsigned long long t0 = h[n_st - 64];  // layer 10's gap start
    std::printf("-- trace (%s): layer 10, us from its gap's start; gap ends at %+.2f --\n",
                cfg == 0 ? "NW 8 2/SM carve 110 KiB, copy only" : "NW 8 2/SM carve 110 KiB, x in regs", (h[n_st - 63] - t0) / 1e3);
    static const char* const kNames[] = {"QKV", "O", "gate+up", "down", "next QKV"};
    for (int k = 0; k < 5; ++k) {
      const size_t i = 40 + k;
      double mn[4] = {1e30, 1e30, 1e30, 1e30}, mx[4] = {-1e30, -1e30, -1e30, -1e30};
      for (int b = 0; b < G; ++b)
        for (int j = 0; j < 4; ++j) {
          const unsigned long long v = h[(i * G + b) * 4 + j];
          if (!v) continue;
          const double d = (static_cast<double>(v) - static_cast<double>(t0)) / 1e3;
          mn[j] = std::min(mn[j], d);
          mx[j] = std::max(mx[j], d);
        }
      std::printf("%-8s entry %+8.2f .. %+8.2f  after wait %+8.2f .. %+8.2f  stage 0 in %+8.2f .. %+8.2f  end %+8.2f .. %+8.2f\n",
                  kNames[k], mn[0], mx[0], mn[1], mx[1], mn[2], mx[2], mn[3], mx[3]);
    }
  }
  CK(cudaFree(base));
}

int main(int argc, char** argv) {
  Env e;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&e.sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaEventCreate(&e.a));
  CK(cudaEventCreate(&e.b));
  const bool chain = argc > 1 && std::strcmp(argv[1], "chain") == 0;
  const bool chain2 = argc > 1 && std::strcmp(argv[1], "chain2") == 0;
  const bool tma1 = argc > 1 && std::strcmp(argv[1], "tma1") == 0;
  const bool tma = tma1 || (argc > 1 && std::strcmp(argv[1], "tma") == 0);
  const bool chain3 = argc > 1 && std::strcmp(argv[1], "chain3") == 0;
  const int64_t N = argc > 1 && !chain && !chain2 && !tma && !chain3 ? std::atoll(argv[1]) : 14336, K = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t row_bytes = K / 256 * 144;  // Q4_K; the Q4_0 split row is the same size (K/2 + K/16)
  const int64_t mat = N * row_bytes;
  std::vector<uint8_t*> bufs(8);
  std::vector<uint8_t> host(mat);
  uint32_t s = 12345;
  for (int64_t i = 0; i < mat; ++i) {
    s = s * 1664525u + 1013904223u;
    host[i] = static_cast<uint8_t>(s >> 24);
  }
  for (int64_t b = 0; b < mat; b += 144) {  // Q4_K headers: finite d, dmin
    host[b + 1] = static_cast<uint8_t>(host[b + 1] & 0x3B);
    host[b + 3] = static_cast<uint8_t>(host[b + 3] & 0x3B);
  }
  for (auto& b : bufs) {
    CK(cudaMalloc(&b, mat));
    CK(cudaMemcpy(b, host.data(), mat, cudaMemcpyHostToDevice));
  }
  int8_t* xq;
  XDs* xds;
  float* out;
  unsigned* sink;
  CK(cudaMalloc(&xq, K));
  CK(cudaMalloc(&xds, K / 32 * sizeof(XDs)));
  CK(cudaMalloc(&out, N * sizeof(float)));
  CK(cudaMalloc(&sink, 4));
  std::vector<int8_t> hx(K);
  std::vector<XDs> hd(K / 32);
  for (auto& v : hx) v = static_cast<int8_t>((s = s * 1664525u + 1013904223u) >> 25);
  for (auto& v : hd) v = make_float2(0.01f, 0.5f);
  CK(cudaMemcpy(xq, hx.data(), K, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(xds, hd.data(), hd.size() * sizeof(XDs), cudaMemcpyHostToDevice));

  {  // copy: 1 GiB, read + write
    const size_t n = size_t{1} << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    const double ms = time_ms(e, 10, [&](int i) { CK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice)); });
    e.copy_gbps = 2.0 * static_cast<double>(n) / (ms * 1e6);
    std::printf("copy d2d: %.0f GB/s read+write; matrix %lld x %lld, %.1f MB\n", e.copy_gbps,
                static_cast<long long>(N), static_cast<long long>(K), mat / 1e6);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  if (chain) {
    run_chain(e);
    return 0;
  }
  if (chain2) {
    run_chain2(e);
    return 0;
  }
  if (tma) {
    run_tma(e, tma1);
    return 0;
  }
  if (chain3) {
    run_chain3(e);
    return 0;
  }
  for (int bps : {2, 4, 8}) {
    const unsigned grid = static_cast<unsigned>(e.sms * bps);
    const double ms = time_ms(e, 64, [&](int i) {
      flat_kernel<<<grid, 256>>>(reinterpret_cast<const uint4*>(bufs[i % 8]), mat / 16, sink);
    });
    const double gbps = mat / (ms * 1e6);
    std::printf("flat XOR, %d blocks/SM          %7.2f us  %6.0f GB/s  %5.1f %% of copy\n", bps, ms * 1e3, gbps,
                100.0 * gbps / e.copy_gbps);
  }
  {  // one launch over all 8 copies (a 264 MB matrix): in-kernel steady state without launch ramps
    const unsigned grid = static_cast<unsigned>(e.sms * 4);
    uint8_t* big;
    CK(cudaMalloc(&big, 8 * mat));
    const double ms = time_ms(e, 8, [&](int) {
      flat_kernel<<<grid, 256>>>(reinterpret_cast<const uint4*>(big), 8 * mat / 16, sink);
    });
    const double gbps = 8 * mat / (ms * 1e6);
    std::printf("flat XOR, 264 MB in one launch   %7.2f us  %6.0f GB/s  %5.1f %% of copy\n", ms * 1e3, gbps,
                100.0 * gbps / e.copy_gbps);
    CK(cudaFree(big));
  }
  if (argc > 3 && std::strcmp(argv[3], "pair") == 0) {  // the lane-pair Q4_K decoders and Q4_0 only (ncu runs)
    uint8_t* const* B = bufs.data();
    run_v3<ChunkDecQ4KPair<false>, 1, 4, kFull, false>(e, "Q4_K pair (s15) U1 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDecQ4KPair<true>, 1, 4, kFull, false>(e, "Q4_K pair int-scale U1 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 2, 4, kFull, false>(e, "Q4_0 full U2 MB4", B, row_bytes, N, K, xq, xds, out);
    if (argc > 4) return 0;  // ncu runs: the three above only
    run_v3<ChunkDecQ4KPair<true>, 1, 4, kFull, false, kXWhole>(e, "Q4_K pair int-scale U1 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 2, 4, kFull, false, kXWhole>(e, "Q4_0 full U2 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDecQ4KPair<true>, 1, 4, kFull, false, kXSmem>(e, "Q4_K pair int-scale U1 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 2, 4, kFull, false, kXSmem>(e, "Q4_0 full U2 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDecQ4KPair<true>, 1, 4, kFull, false, kXAhead>(e, "Q4_K pair int-scale U1 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDecQ4KPair<true>, 1, 3, kFull, false, kXAhead>(e, "Q4_K pair int-scale U1 MB3", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDecQ4KPair<true>, 1, 2, kFull, false, kXAhead>(e, "Q4_K pair int-scale U1 MB2", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 2, 4, kFull, false, kXAhead>(e, "Q4_0 full U2 MB4", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 2, 3, kFull, false, kXAhead>(e, "Q4_0 full U2 MB3", B, row_bytes, N, K, xq, xds, out);
    run_v3<ChunkDec<ferry::DType::Q4_0>, 1, 4, kFull, false, kXAhead>(e, "Q4_0 full U1 MB4", B, row_bytes, N, K, xq, xds, out);
    return 0;
  }
  using Q4K = ChunkDecQ4KWide;
  using Q40 = ChunkDec<ferry::DType::Q4_0>;
  uint8_t* const* B = bufs.data();
  std::printf("-- Q4_K (ggml layout, 32-byte chunks) --\n");
  run_v3<Q4K, 1, 4, kLoad, false>(e, "Q4_K load U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 4, kLoad, true>(e, "Q4_K load U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 2, 4, kLoad, false>(e, "Q4_K load U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 2, 2, kLoad, false>(e, "Q4_K load U2 MB2", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 4, kNoScale, false>(e, "Q4_K noscale U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 4, kFull, false>(e, "Q4_K wide U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<ChunkDecQ4KPair<false>, 1, 4, kLoad, false>(e, "Q4_K pair load U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<ChunkDecQ4KPair<false>, 1, 4, kNoScale, false>(e, "Q4_K pair noscale U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<ChunkDecQ4KPair<false>, 1, 4, kFull, false>(e, "Q4_K pair (s15) U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<ChunkDecQ4KPair<true>, 1, 4, kFull, false>(e, "Q4_K pair int-scale (default)", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 4, kFull, true>(e, "Q4_K wide U1 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 5, kFull, false>(e, "Q4_K wide U1 MB5", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 1, 6, kFull, false>(e, "Q4_K wide U1 MB6", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 2, 4, kFull, false>(e, "Q4_K wide U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 2, 3, kFull, false>(e, "Q4_K wide U2 MB3", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q4K, 2, 2, kFull, false>(e, "Q4_K wide U2 MB2", B, row_bytes, N, K, xq, xds, out);
  std::printf("-- Q4_0 (split layout) --\n");
  run_v3<Q40, 2, 4, kLoad, false>(e, "Q4_0 load U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 4, kLoad, true>(e, "Q4_0 load U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 4, kNoScale, false>(e, "Q4_0 noscale U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 4, kFull, false>(e, "Q4_0 full U2 MB4 (default)", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 4, kFull, true>(e, "Q4_0 full U2 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 5, kFull, false>(e, "Q4_0 full U2 MB5", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 2, 6, kFull, false>(e, "Q4_0 full U2 MB6", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 4, 4, kFull, false>(e, "Q4_0 full U4 MB4", B, row_bytes, N, K, xq, xds, out);
  run_v3<Q40, 4, 2, kFull, false>(e, "Q4_0 full U4 MB2", B, row_bytes, N, K, xq, xds, out);
  return 0;
}
