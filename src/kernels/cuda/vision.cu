// The vision-language ops on the GPU: rope_multi (qwen2vl's M-RoPE, the vision tower's 2-D RoPE) and
// attention_segments (bidirectional attention within contiguous segments, no cache: the vision tower's
// windows and its full-attention blocks). Both are written for clarity over speed: they run once per
// image, next to GEMMs that dominate the encoder's time. Plain launches (no PDL): each waits for the
// kernel before it.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kRopeMultiThreads = 128;

// One thread per (head, pair) of one token (grid.x = token). Pair i rotates elements (i, i + n_pairs) by
// theta = pos[s] * freq_scale * base^(-2 j / n_rot) / freq_factor[i], in double like rope_kernel: s is the
// position stream of the pair's sector (i % sum(sections)), j the pair's index counted from where its
// angle recurrence starts (the sector's first pair in vision mode, else 0).
__global__ void __launch_bounds__(kRopeMultiThreads) rope_multi_kernel(RopeMultiArgs a, int n_pairs, int sect_dims) {
  const int t = blockIdx.x;
  const int j = blockIdx.y * kRopeMultiThreads + threadIdx.x;
  if (j >= n_pairs * a.n_head) return;
  const int h = j / n_pairs, i = j % n_pairs;
  const int sector = i % sect_dims;
  const int start1 = a.sections[0], start2 = start1 + a.sections[1], start3 = start2 + a.sections[2];
  const int s = sector < start1 ? 0 : sector < start2 ? 1 : sector < start3 ? 2 : 3;
  const int start = s == 0 ? 0 : s == 1 ? start1 : s == 2 ? start2 : start3;
  const int jj = a.vision ? sector - start : i;
  float* x = reinterpret_cast<float*>(a.x + static_cast<int64_t>(t) * a.nb2 + h * a.nb1);
  const float x0 = x[i], x1 = x[i + n_pairs];
  const double p = static_cast<double>(a.pos[static_cast<int64_t>(s) * a.n_tokens + t]);
  double theta = p * static_cast<double>(a.freq_scale) *
                 exp2(-2.0 * jj / a.n_rot * log2(static_cast<double>(a.freq_base)));
  if (a.freq_factors) theta /= static_cast<double>(a.freq_factors[i]);
  double sn, cn;
  sincos(theta, &sn, &cn);
  const float c = static_cast<float>(cn), sv = static_cast<float>(sn);
  x[i] = x0 * c - x1 * sv;
  x[i + n_pairs] = x0 * sv + x1 * c;
}

// ---- attention_segments -------------------------------------------------------------------------------
// A block of kSegWarps warps takes kSegQueries consecutive tokens of one head (kSegPerWarp per warp). Its
// keys are the union of those tokens' segments (contiguous: segments are ascending ranges), walked in
// tiles of 32 keys that the block stages in shared memory. Each warp keeps, per query, an online
// softmax (running max m, running sum l) and its output row spread over the lanes (lane + 32 d); a
// lane scores one key of the tile against the warp's queries, keys outside a query's own segment score
// -inf. Everything is F32; no buffer depends on the segment length.
constexpr int kSegWarps = 4;
constexpr int kSegPerWarp = 4;
constexpr int kSegQueries = kSegWarps * kSegPerWarp;
constexpr int kSegTile = 32;

// The segment holding token t: the largest s with bounds[s] <= t (bounds ascending, bounds[0] = 0).
__device__ __forceinline__ int segment_of(const int32_t* bounds, int n_seg, int t) {
  int lo = 0, hi = n_seg - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (bounds[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// D = output floats per lane (head_dim <= 32 D).
template <int D>
__global__ void __launch_bounds__(kSegWarps * kWarp) attention_segments_kernel(SegAttnArgs a) {
  extern __shared__ float smem[];
  const int hd = a.head_dim;
  const int k_ld = hd % 2 == 0 ? hd + 1 : hd;  // odd row stride: lane l's key row starts in bank l * k_ld % 32
  float* sk = smem;                            // [kSegTile][k_ld]
  float* sv = sk + kSegTile * k_ld;            // [kSegTile][hd]
  float* sq = sv + kSegTile * hd;              // [kSegQueries][hd]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, kvh = h / (a.n_head / a.n_kv_head);
  const int t_begin = blockIdx.x * kSegQueries;
  const int t_end = min(a.n_tokens, t_begin + kSegQueries);

  // Keys of the block: from its first token's segment start to its last token's segment end.
  const int key_lo = a.bounds[segment_of(a.bounds, a.n_seg, t_begin)];
  const int key_hi = a.bounds[segment_of(a.bounds, a.n_seg, t_end - 1) + 1];

  // The block's queries into shared memory; each warp's own segment bounds per query.
  for (int e = threadIdx.x; e < kSegQueries * hd; e += blockDim.x) {
    const int qi = e / hd, d = e % hd, t = t_begin + qi;
    sq[e] = t < t_end ? reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.q) + t * a.q_nb2 + h * a.q_nb1)[d]
                      : 0.f;
  }
  int seg_lo[kSegPerWarp], seg_hi[kSegPerWarp];
  bool valid[kSegPerWarp];
#pragma unroll
  for (int i = 0; i < kSegPerWarp; ++i) {
    const int t = t_begin + warp * kSegPerWarp + i;
    valid[i] = t < t_end;
    const int s = segment_of(a.bounds, a.n_seg, valid[i] ? t : t_end - 1);
    seg_lo[i] = a.bounds[s];
    seg_hi[i] = a.bounds[s + 1];
  }
  float m[kSegPerWarp], l[kSegPerWarp], acc[kSegPerWarp][D];
#pragma unroll
  for (int i = 0; i < kSegPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int d = 0; d < D; ++d) acc[i][d] = 0.f;
  }
  const float* my_q = sq + warp * kSegPerWarp * hd;

  for (int j0 = key_lo; j0 < key_hi; j0 += kSegTile) {
    __syncthreads();  // the previous tile is no longer read
    const int nk = min(kSegTile, key_hi - j0);
    for (int e = threadIdx.x; e < kSegTile * hd; e += blockDim.x) {
      const int r = e / hd, d = e % hd;
      float kv = 0.f, vv = 0.f;
      if (r < nk) {
        kv = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.k) + (j0 + r) * a.k_nb2 + kvh * a.k_nb1)[d];
        vv = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.v) + (j0 + r) * a.v_nb2 + kvh * a.v_nb1)[d];
      }
      sk[r * k_ld + d] = kv;
      sv[r * hd + d] = vv;
    }
    __syncthreads();

    // Lane l scores key j0 + l against the warp's queries.
    float s[kSegPerWarp];
#pragma unroll
    for (int i = 0; i < kSegPerWarp; ++i) s[i] = 0.f;
    const float* kr = sk + lane * k_ld;
    for (int d = 0; d < hd; ++d) {
      const float kd = kr[d];
#pragma unroll
      for (int i = 0; i < kSegPerWarp; ++i) s[i] = fmaf(my_q[i * hd + d], kd, s[i]);
    }
    const int j = j0 + lane;
#pragma unroll
    for (int i = 0; i < kSegPerWarp; ++i) {
      const bool in = valid[i] && lane < nk && j >= seg_lo[i] && j < seg_hi[i];
      s[i] = in ? s[i] * a.scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s[i]));
      if (m_new == -INFINITY) continue;  // no key of this query's segment seen yet (warp-uniform)
      const float p = in ? expf(s[i] - m_new) : 0.f;
      const float corr = expf(m[i] - m_new);  // 0 on the first keys (m = -inf)
      l[i] = l[i] * corr + warp_sum(p);
      m[i] = m_new;
#pragma unroll
      for (int d = 0; d < D; ++d) acc[i][d] *= corr;
      for (int r = 0; r < nk; ++r) {
        const float pr = __shfl_sync(0xffffffffu, p, r);
#pragma unroll
        for (int d = 0; d < D; ++d) {
          const int c = lane + kWarp * d;
          if (c < hd) acc[i][d] = fmaf(pr, sv[r * hd + c], acc[i][d]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kSegPerWarp; ++i) {
    if (!valid[i]) continue;
    const int t = t_begin + warp * kSegPerWarp + i;
    float* o = reinterpret_cast<float*>(reinterpret_cast<char*>(a.out) + t * a.out_nb1) + h * hd;
    const float inv = 1.f / l[i];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = lane + kWarp * d;
      if (c < hd) o[c] = acc[i][d] * inv;
    }
  }
}

}  // namespace

cudaError_t rope_multi(const RopeMultiArgs& a, cudaStream_t stream) {
  if (a.n_tokens <= 0 || a.n_rot <= 0 || a.n_head <= 0) return cudaSuccess;
  const int sect_dims = a.sections[0] + a.sections[1] + a.sections[2] + a.sections[3];
  const int n_pairs = a.vision ? a.n_rot : a.n_rot / 2;
  if (sect_dims <= 0 || a.sections[0] < 0 || a.sections[1] < 0 || a.sections[2] < 0 || a.sections[3] < 0 ||
      a.n_rot % 2 != 0 || (a.vision ? a.head_dim != 2 * a.n_rot : a.n_rot > a.head_dim))
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.n_tokens), ceil_div(static_cast<int64_t>(n_pairs) * a.n_head, kRopeMultiThreads));
  rope_multi_kernel<<<grid, kRopeMultiThreads, 0, stream>>>(a, n_pairs, sect_dims);
  return cudaGetLastError();
}

uint64_t attention_segments_smem_bytes(int head_dim) {
  const int k_ld = head_dim % 2 == 0 ? head_dim + 1 : head_dim;
  return sizeof(float) * static_cast<uint64_t>(kSegTile * k_ld + kSegTile * head_dim + kSegQueries * head_dim);
}

cudaError_t attention_segments(const SegAttnArgs& a, cudaStream_t stream) {
  if (a.n_tokens <= 0) return cudaSuccess;
  if (a.head_dim <= 0 || a.head_dim > kSegMaxHeadDim || a.n_seg < 1 || a.n_kv_head <= 0 ||
      a.n_head % a.n_kv_head != 0)
    return cudaErrorInvalidValue;
  const uint64_t smem = attention_segments_smem_bytes(a.head_dim);  // <= 40.5 KiB: no opt-in needed
  const dim3 grid(ceil_div(a.n_tokens, kSegQueries), static_cast<unsigned>(a.n_head));
  const dim3 block(kSegWarps * kWarp);
  switch ((a.head_dim + kWarp - 1) / kWarp) {
    case 1: attention_segments_kernel<1><<<grid, block, smem, stream>>>(a); break;
    case 2: attention_segments_kernel<2><<<grid, block, smem, stream>>>(a); break;
    case 3: attention_segments_kernel<3><<<grid, block, smem, stream>>>(a); break;
    default: attention_segments_kernel<4><<<grid, block, smem, stream>>>(a); break;
  }
  return cudaGetLastError();
}

}  // namespace ferry::kernels::cuda
