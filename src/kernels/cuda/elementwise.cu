// Row-wise and elementwise kernels: rms_norm, add (with bias broadcast), scale, glu (silu / gelu-tanh /
// gpt-oss's clamped SwiGLU),
// rope (normal and NeoX, optional frequency factors) and kv_store (F32 -> F16 cache cells). All are
// memory-bound and tiny next to the matmuls; they favour simple indexing over cleverness. In-place use
// (out == input) is safe: each element is read and written by the same thread.
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------------

constexpr int kRopeThreads = 128;

// Sum of v over a block of 256 threads (every thread gets it).
__device__ __forceinline__ float block256_sum(float v) {
  v = warp_sum(v);
  __shared__ float part[256 / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < 256 / kWarp; ++i) total += part[i];
  return total;
}

// Long rows (>= 1024): one block of 256 threads per row.
__global__ void rms_norm_block_kernel(RowView x, const float* __restrict__ w, float eps, RowView out) {
  pdl_enter();  // launched with PDL (launch_ex): x comes from the previous kernel
  FERRY_EMPTY_SMALL_RETURN();
  const float* xr = reinterpret_cast<const float*>(x.row(blockIdx.x));
  float* yr = reinterpret_cast<float*>(out.row(blockIdx.x));
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < x.ne0; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  const float inv = rsqrtf(block256_sum(ss) / static_cast<float>(x.ne0) + eps);
  for (int64_t i = threadIdx.x; i < x.ne0; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

// Rows of up to 1024 * P floats, 16-byte aligned, ne0 % 4 == 0 (the model's hidden size): every thread
// loads its P float4 of x and of w before the reduction, so the loads of a row are all in flight at
// once (the scalar loop above waits for each load in turn: a decode step's norms are latency-bound).
// quantize_q8's arithmetic on 32 values held as float4 by 8 consecutive lanes (lane % 8 == block lane):
// the same max, scale, rounding and integer sum, so the result is bit for bit quantize_q8's.
__device__ __forceinline__ void quantize_q8_by8(float4 v, int8_t* xq4, float2* xds_blk, bool writer) {
  const unsigned mask = 0xFFu << (threadIdx.x & 24u);  // this lane's group of 8 (the others may be idle)
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const float d = amax / 127.f;
  const int q0 = amax > 0.f ? __float2int_rn(v.x / d) : 0;
  const int q1 = amax > 0.f ? __float2int_rn(v.y / d) : 0;
  const int q2 = amax > 0.f ? __float2int_rn(v.z / d) : 0;
  const int q3 = amax > 0.f ? __float2int_rn(v.w / d) : 0;
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(mask, sum, o);
  const uint32_t packed = (static_cast<uint32_t>(q0) & 0xFFu) | ((static_cast<uint32_t>(q1) & 0xFFu) << 8) |
                          ((static_cast<uint32_t>(q2) & 0xFFu) << 16) | ((static_cast<uint32_t>(q3) & 0xFFu) << 24);
  *reinterpret_cast<uint32_t*>(xq4) = packed;
  if (writer) *xds_blk = make_float2(d, d * static_cast<float>(sum));
}

template <int P>
__global__ void __launch_bounds__(256) rms_norm_vec_kernel(RowView x, const float* __restrict__ w, float eps,
                                                           RowView out, int8_t* __restrict__ xq,
                                                           float2* __restrict__ xds) {
  const float4* wr = reinterpret_cast<const float4*>(w);
  const int n4 = static_cast<int>(x.ne0 / 4);
  float4 xv[P], wv[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {  // the weights are no earlier kernel's output: loaded before the PDL wait
    const int i = threadIdx.x + j * 256;
    wv[j] = i < n4 ? wr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  pdl_enter();  // launched with PDL (launch_ex): x comes from the previous kernel
  FERRY_EMPTY_SMALL_RETURN();
  const float4* xr = reinterpret_cast<const float4*>(x.row(blockIdx.x));
  float4* yr = reinterpret_cast<float4*>(out.row(blockIdx.x));
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = threadIdx.x + j * 256;
    xv[j] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    ss = fmaf(xv[j].x, xv[j].x, ss);
    ss = fmaf(xv[j].y, xv[j].y, ss);
    ss = fmaf(xv[j].z, xv[j].z, ss);
    ss = fmaf(xv[j].w, xv[j].w, ss);
  }
  const float inv = rsqrtf(block256_sum(ss) / static_cast<float>(x.ne0) + eps);
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = threadIdx.x + j * 256;
    const float4 y = make_float4(xv[j].x * inv * wv[j].x, xv[j].y * inv * wv[j].y, xv[j].z * inv * wv[j].z,
                                 xv[j].w * inv * wv[j].w);
    if (i < n4) yr[i] = y;
    // n4 % 8 == 0 when quantizing, so the 8 lanes of a block agree on i < n4 (the shuffles stay in it).
    if (xq != nullptr && j * 256 < n4) {
      if (i < n4) {
        const int64_t t = blockIdx.x;
        quantize_q8_by8(y, xq + t * x.ne0 + 4 * i, xds + t * (x.ne0 / 32) + i / 8, threadIdx.x % 8 == 0);
      }
    }
  }
}

// Short rows (heads for q/k norms): one warp per row, 4 rows per block.
__global__ void rms_norm_warp_kernel(RowView x, const float* __restrict__ w, float eps, RowView out) {
  pdl_enter();  // launched with PDL (launch_ex): x comes from the previous kernel (the q / k norms)
  FERRY_EMPTY_SMALL_RETURN();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / kWarp;
  if (r >= x.nrows()) return;
  const int lane = threadIdx.x % kWarp;
  const float* xr = reinterpret_cast<const float*>(x.row(r));
  float* yr = reinterpret_cast<float*>(out.row(r));
  float ss = 0.f;
  for (int64_t i = lane; i < x.ne0; i += kWarp) ss = fmaf(xr[i], xr[i], ss);
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(x.ne0) + eps);
  for (int64_t i = lane; i < x.ne0; i += kWarp) yr[i] = xr[i] * inv * w[i];
}

__global__ void add_kernel(RowView a, RowView b, bool b_broadcast, RowView out, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / out.ne0, k = i % out.ne0;
  const float av = reinterpret_cast<const float*>(a.row(r))[k];
  const float bv = reinterpret_cast<const float*>(b.row(b_broadcast ? 0 : r))[k];
  reinterpret_cast<float*>(out.row(r))[k] = av + bv;
}

__global__ void scale_kernel(RowView x, float s, RowView out, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / out.ne0, k = i % out.ne0;
  reinterpret_cast<float*>(out.row(r))[k] = reinterpret_cast<const float*>(x.row(r))[k] * s;
}

// xq non-null: out.ne0 % 32 == 0 and total % 32 == 0, so each warp holds one whole 32-block of a row and
// quantizes it with quantize_q8's arithmetic (warp_max, the same rounding, warp_sum_int).
__global__ void glu_kernel(RowView gate, RowView up, int act, RowView out, int64_t total, int8_t* __restrict__ xq,
                           float2* __restrict__ xds) {
  pdl_enter();
  FERRY_EMPTY_SMALL_RETURN();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  // One token (decode): row 0, no 64-bit division.
  const int64_t r = i < out.ne0 ? 0 : i / out.ne0, k = i - r * out.ne0;
  const float g = reinterpret_cast<const float*>(gate.row(r))[k];
  const float u = reinterpret_cast<const float*>(up.row(r))[k];
  const float y = glu_value(g, u, act);
  reinterpret_cast<float*>(out.row(r))[k] = y;
  if (xq != nullptr) {
    quantize_q8_warp(y, xq + i, xds + i / 32, threadIdx.x % kWarp);  // i = r * ne0 + k: [T][K] contiguous
  }
}

// Grid (token, block): blocks [0, rot_blocks) rotate one (head, pair) per thread over the q heads then
// the x2 (k) heads; blocks after them copy v into the cache (rope_qk_store). Each thread computes its own
// angle in double (theta reaches 1e4-1e5 rad at long positions, where float would be off by ~1e-3 rad;
// RefOps is double too): theta_i = pos * freq_scale * base^(-2i / n_rot) / freq_factor[i]. A block per
// token with a loop over pairs was latency-bound (17 us a decode step's call: each pass waits for its
// loads); this way every load of the step is in flight at once.
// Pair i of a head at position p rotated: theta_i = p * freq_scale * base^(-2i / n_rot) / freq_factor[i]
// in double, then (x0, x1) -> (x0 c - x1 s, x0 s + x1 c) in float.
__device__ __forceinline__ float2 rope_rotate(const RopeArgs& a, double p, double log2_base, int i, float x0,
                                              float x1) {
  double theta = p * static_cast<double>(a.freq_scale) * exp2(-2.0 * i / a.n_rot * log2_base);
  if (a.freq_factors) theta /= static_cast<double>(a.freq_factors[i]);
  double mscale = a.attn_factor;
  if (a.ext_factor != 0.f) {  // YaRN: RefOps' blend of the interpolated and unscaled angles, in double
    const double extrap = theta / static_cast<double>(a.freq_scale);
    const double y = (static_cast<double>(i) - a.corr_dims[0]) / fmax(0.001, static_cast<double>(a.corr_dims[1] - a.corr_dims[0]));
    const double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * a.ext_factor;
    theta = theta * (1.0 - mix) + extrap * mix;
    mscale *= 1.0 + 0.1 * log(1.0 / static_cast<double>(a.freq_scale));
  }
  double sn, cn;
  sincos(theta, &sn, &cn);
  const float c = static_cast<float>(cn * mscale), s = static_cast<float>(sn * mscale);
  return make_float2(x0 * c - x1 * s, x0 * s + x1 * c);
}

// The blocks of the rope kernels past the rotating ones (blockIdx.y >= first): element e of token t's v
// into its cache column (rope_qk_store; skipped without a v cache or with the cell out of range).
__device__ __forceinline__ void rope_store_v(const RopeArgs& a, int t, int64_t cell, int first) {
  if (a.v_cache == nullptr || cell < 0 || cell >= a.n_cells) return;
  const int e = (static_cast<int>(blockIdx.y) - first) * kRopeThreads + threadIdx.x;
  if (e >= a.kv_dim) return;
  const float* vt = reinterpret_cast<const float*>(a.v + static_cast<int64_t>(t) * a.v_nb1);
  __half* vc = reinterpret_cast<__half*>(reinterpret_cast<char*>(a.v_cache) + cell * a.v_cache_stride);
  vc[e] = __float2half_rn(vt[e]);
}

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(RopeArgs a, int rot_blocks) {
  pdl_enter();
  FERRY_EMPTY_SMALL_RETURN();
  const int half = a.n_rot / 2;
  const int t = blockIdx.x;
  const int64_t cell = a.cell != nullptr ? a.cell[t] : -1;
  const bool cell_ok = cell >= 0 && cell < a.n_cells;
  if (static_cast<int>(blockIdx.y) >= rot_blocks) {  // v -> cache
    rope_store_v(a, t, cell, rot_blocks);
    return;
  }
  const int j = blockIdx.y * kRopeThreads + threadIdx.x;
  if (j >= half * (a.n_head + a.n_head2)) return;
  int h = j / half;
  const int i = j % half;
  float* x;
  if (h < a.n_head) {
    x = reinterpret_cast<float*>(a.x + static_cast<int64_t>(t) * a.nb2 + h * a.nb1);
  } else {
    h -= a.n_head;
    x = reinterpret_cast<float*>(a.x2 + static_cast<int64_t>(t) * a.nb2_2 + h * a.nb1_2);
  }
  const int i0 = a.neox ? i : 2 * i;
  const int i1 = a.neox ? i + half : 2 * i + 1;
  const float x0 = x[i0], x1 = x[i1];  // issued before the angle's arithmetic
  const double log2_base = log2(static_cast<double>(a.freq_base));
  const float2 y = rope_rotate(a, static_cast<double>(a.pos[t]), log2_base, i, x0, x1);
  const float y0 = y.x, y1 = y.y;
  x[i0] = y0;
  x[i1] = y1;
  if (a.k_cache != nullptr && j >= half * a.n_head && cell_ok) {  // a k head: its cache column too
    __half* kc = reinterpret_cast<__half*>(reinterpret_cast<char*>(a.k_cache) + cell * a.k_cache_stride) +
                 static_cast<int64_t>(h) * a.head_dim;
    kc[i0] = __float2half_rn(y0);
    kc[i1] = __float2half_rn(y1);
  }
}

// rope_kernel with the q / k RMS norms first (RopeArgs::q_norm): one warp per head, lane l holding the
// pairs (l + 32 m, l + 32 m + half), m < M, i.e. the elements l, l + 32, ... of the head in order, so the
// sum of squares is the warp norm kernel's, fma for fma, and the rotation is rope_kernel's. Blocks after
// head_blocks copy v into the cache.
template <int M>
__global__ void __launch_bounds__(kRopeThreads) rope_norm_kernel(RopeArgs a, int head_blocks) {
  pdl_enter();
  FERRY_EMPTY_SMALL_RETURN();
  constexpr int kHalf = 32 * M;
  const int t = blockIdx.x;
  const int64_t cell = a.cell != nullptr ? a.cell[t] : -1;
  const bool cell_ok = cell >= 0 && cell < a.n_cells;
  if (static_cast<int>(blockIdx.y) >= head_blocks) {  // v -> cache
    rope_store_v(a, t, cell, head_blocks);
    return;
  }
  const int lane = threadIdx.x % kWarp;
  int h = blockIdx.y * (kRopeThreads / kWarp) + threadIdx.x / kWarp;
  if (h >= a.n_head + a.n_head2) return;
  const bool is_k = h >= a.n_head;
  float* x;
  const float* w;
  if (!is_k) {
    x = reinterpret_cast<float*>(a.x + static_cast<int64_t>(t) * a.nb2 + h * a.nb1);
    w = a.q_norm;
  } else {
    h -= a.n_head;
    x = reinterpret_cast<float*>(a.x2 + static_cast<int64_t>(t) * a.nb2_2 + h * a.nb1_2);
    w = a.k_norm;
  }
  float x0[M], x1[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    x0[m] = x[lane + 32 * m];
    x1[m] = x[lane + 32 * m + kHalf];
  }
  float ss = 0.f;
#pragma unroll
  for (int m = 0; m < M; ++m) ss = fmaf(x0[m], x0[m], ss);
#pragma unroll
  for (int m = 0; m < M; ++m) ss = fmaf(x1[m], x1[m], ss);
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(2 * kHalf) + a.norm_eps);
  const double p = static_cast<double>(a.pos[t]);
  const double log2_base = log2(static_cast<double>(a.freq_base));
  __half* kc = nullptr;
  if (is_k && a.k_cache != nullptr && cell_ok)
    kc = reinterpret_cast<__half*>(reinterpret_cast<char*>(a.k_cache) + cell * a.k_cache_stride) +
         static_cast<int64_t>(h) * a.head_dim;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int i = lane + 32 * m;
    const float2 y = rope_rotate(a, p, log2_base, i, x0[m] * inv * w[i], x1[m] * inv * w[i + kHalf]);
    x[i] = y.x;
    x[i + kHalf] = y.y;
    if (kc != nullptr) {
      kc[i] = __float2half_rn(y.x);
      kc[i + kHalf] = __float2half_rn(y.y);
    }
  }
}

__global__ void kv_store_kernel(RowView k, RowView v, const int32_t* __restrict__ cell, int64_t n_tokens,
                                __half* __restrict__ k_cache, __half* __restrict__ v_cache, int64_t k_stride,
                                int64_t v_stride, int64_t n_cells, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t t = i / k.ne0, e = i % k.ne0;
  const int32_t c = cell[t];
  if (c < 0 || c >= n_cells) return;
  reinterpret_cast<__half*>(reinterpret_cast<char*>(k_cache) + c * k_stride)[e] =
      __float2half_rn(reinterpret_cast<const float*>(k.row(t))[e]);
  reinterpret_cast<__half*>(reinterpret_cast<char*>(v_cache) + c * v_stride)[e] =
      __float2half_rn(reinterpret_cast<const float*>(v.row(t))[e]);
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------------

namespace {
// The float4 kernel (rms_norm_vec_kernel) takes the row.
bool rms_norm_vec_ok(const RowView& x, const float* w, const RowView& out) {
  return x.ne0 >= 1024 && x.ne0 % 4 == 0 && x.ne0 <= 8192 && aligned16(x.data) && aligned16(out.data) &&
         aligned16(w) && x.nb1 % 16 == 0 && x.nb2 % 16 == 0 && x.nb3 % 16 == 0 && out.nb1 % 16 == 0 &&
         out.nb2 % 16 == 0 && out.nb3 % 16 == 0;
}
}  // namespace

bool rms_norm_quantizes(const RowView& x, const float* w, const RowView& out) {
  return rms_norm_vec_ok(x, w, out) && x.ne0 % 32 == 0 && out.ne2 == 1 && out.ne3 == 1 && out.nb1 == x.ne0 * 4;
}

cudaError_t rms_norm(const RowView& x, const float* w, float eps, const RowView& out, cudaStream_t stream, int8_t* xq,
                     float2* xds) {
  const int64_t rows = x.nrows();
  if (rows <= 0) return cudaSuccess;
  if (xq != nullptr && !rms_norm_quantizes(x, w, out)) return cudaErrorInvalidValue;
  if (rms_norm_vec_ok(x, w, out)) {
    const dim3 g(static_cast<unsigned>(rows)), b(256);
    const bool pdl = pdl_default();
    if (x.ne0 <= 1024) return launch_ex(pdl, rms_norm_vec_kernel<1>, g, b, 0, stream, x, w, eps, out, xq, xds);
    if (x.ne0 <= 2048) return launch_ex(pdl, rms_norm_vec_kernel<2>, g, b, 0, stream, x, w, eps, out, xq, xds);
    if (x.ne0 <= 4096) return launch_ex(pdl, rms_norm_vec_kernel<4>, g, b, 0, stream, x, w, eps, out, xq, xds);
    return launch_ex(pdl, rms_norm_vec_kernel<8>, g, b, 0, stream, x, w, eps, out, xq, xds);
  }
  // The short-row kernels launch with PDL too, unless LaunchSettings say otherwise (the A/B of an
  // experiments build's FERRY_CUDA_NORM_PDL=0).
  const bool pdl = pdl_default() && launch_settings().norm_pdl;
  if (x.ne0 >= 1024) {
    return launch_ex(pdl, rms_norm_block_kernel, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream, x, w, eps,
                     out);
  }
  return launch_ex(pdl, rms_norm_warp_kernel, dim3(ceil_div(rows, 4)), dim3(4 * kWarp), 0, stream, x, w, eps, out);
}

cudaError_t add(const RowView& a, const RowView& b, bool b_broadcast, const RowView& out, cudaStream_t stream) {
  const int64_t total = out.ne0 * out.nrows();
  if (total <= 0) return cudaSuccess;
  add_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(a, b, b_broadcast, out, total);
  return cudaGetLastError();
}

cudaError_t scale(const RowView& x, float s, const RowView& out, cudaStream_t stream) {
  const int64_t total = out.ne0 * out.nrows();
  if (total <= 0) return cudaSuccess;
  scale_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(x, s, out, total);
  return cudaGetLastError();
}

cudaError_t glu(const RowView& gate, const RowView& up, int act, const RowView& out, cudaStream_t stream, int8_t* xq,
                float2* xds) {
  const int64_t total = out.ne0 * out.nrows();
  if (total <= 0) return cudaSuccess;
  if (xq != nullptr && (out.ne0 % 32 != 0 || out.ne2 != 1 || out.ne3 != 1 || out.nb1 != out.ne0 * 4)) {
    return cudaErrorInvalidValue;
  }
  return launch_ex(pdl_default(), glu_kernel, dim3(ceil_div(total, 256)), dim3(256), 0, stream, gate, up, act, out, total,
                   xq, xds);
}

bool rope_norms_supported(const RopeArgs& a) {
  return a.q_norm != nullptr && a.k_norm != nullptr && a.x2 != nullptr && a.neox && a.n_rot == a.head_dim &&
         (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256);
}

cudaError_t rope(const RopeArgs& a, cudaStream_t stream) {
  if (a.n_tokens <= 0 || a.n_rot <= 0) return cudaSuccess;
  if (a.k_cache != nullptr && (a.x2 == nullptr || a.n_rot != a.head_dim || a.cell == nullptr || a.v == nullptr ||
                               a.v_cache == nullptr || a.kv_dim != a.head_dim * a.n_head2)) {
    return cudaErrorInvalidValue;
  }
  if (a.q_norm != nullptr || a.k_norm != nullptr) {
    if (!rope_norms_supported(a)) return cudaErrorInvalidValue;
    constexpr int kHeadsPerBlock = kRopeThreads / kWarp;
    const int head_blocks = static_cast<int>(ceil_div(a.n_head + a.n_head2, kHeadsPerBlock));
    const int v_blocks = a.v_cache != nullptr ? static_cast<int>(ceil_div(a.kv_dim, kRopeThreads)) : 0;
    const dim3 grid(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(head_blocks + v_blocks));
    auto* kernel = a.head_dim == 64    ? rope_norm_kernel<1>
                   : a.head_dim == 128 ? rope_norm_kernel<2>
                                       : rope_norm_kernel<4>;
    return launch_ex(pdl_default(), kernel, grid, dim3(kRopeThreads), 0, stream, a, head_blocks);
  }
  const int pairs = a.n_rot / 2 * (a.n_head + a.n_head2);
  const int rot_blocks = static_cast<int>(ceil_div(pairs, kRopeThreads));
  const int v_blocks = a.v_cache != nullptr ? static_cast<int>(ceil_div(a.kv_dim, kRopeThreads)) : 0;
  return launch_ex(pdl_default(), rope_kernel,
                   dim3(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(rot_blocks + v_blocks)),
                   dim3(kRopeThreads), 0, stream, a, rot_blocks);
}

cudaError_t kv_store(const RowView& k, const RowView& v, const int32_t* cell, int64_t n_tokens, __half* k_cache,
                     __half* v_cache, int64_t k_stride, int64_t v_stride, int64_t n_cells, cudaStream_t stream) {
  const int64_t total = k.ne0 * n_tokens;
  if (total <= 0) return cudaSuccess;
  kv_store_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(k, v, cell, n_tokens, k_cache, v_cache, k_stride,
                                                            v_stride, n_cells, total);
  return cudaGetLastError();
}

}  // namespace ferry::kernels::cuda
