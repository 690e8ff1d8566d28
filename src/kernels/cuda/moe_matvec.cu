// The expert matvec of a mixture-of-experts layer (ggml's mul_mat_id), for any token count, reading each
// routed expert's rows once per pass over its tokens: a block takes one work item of the plan (moe.cu:
// up to item_pairs (slot, token) pairs routed to one expert) and 8 warps x RPW rows of that expert's matrix,
// and runs the pairs through those rows NT (1 or 4) at a time. The rows' bytes come from DRAM on the first pass and
// from L1 / L2 on the next (an item of 32 pairs makes 8 passes of 4). Per row and pair the arithmetic is the
// v2 decode kernel's (matvec.cu: the same chunk decoders, 16-byte weight loads, lanes on consecutive chunks,
// dp4a against the Q8 activations or F32 FMAs for float weights), so a pair's result does not depend on
// which other pairs share its pass. Launched with a grid of the plan's largest item count: blocks past the
// plan's items return at once, so nothing is read back to the host.
#include "kernels/cuda/matvec_adapters.cuh"
#include "kernels/cuda/moe_mat.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMoeWarps = 8;
constexpr int kMoeThreads = kMoeWarps * kWarp;

// blockIdx: x = a tile of 8 * RPW rows, y = the plan's work item, z = the matrix of the set.
template <class A, int NT, int RPW, int U>
__global__ void __launch_bounds__(kMoeThreads, 2)
    moe_matvec_kernel(MoeMatvecSet set, int64_t K, typename A::Act act, MoeMatvecArgs a) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const MoePlanView plan{const_cast<int32_t*>(a.plan), a.shape};
  const int item = static_cast<int>(blockIdx.y);
  if (item >= a.plan[0]) return;
  const int64_t e = plan.item_expert()[item];
  const int q_begin = plan.item_begin()[item], q_end = plan.item_end()[item];
  const MoeMat m = moe_mat(set, static_cast<int>(blockIdx.z), e);
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kMoeWarps + warp) * RPW;
  if (n0 >= m.rows) return;  // whole warps: no block-level synchronization below
  const uint8_t* row[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) row[r] = m.w + min(n0 + r, m.rows - 1) * m.nb1;  // clamped rows are not stored
  const int n_chunks = static_cast<int>(K / A::kElems);
  const int32_t* pairs = plan.pairs();

  for (int q0 = q_begin; q0 < q_end; q0 += NT) {
    const int cnt = min(NT, q_end - q0);
    int pr[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) pr[t] = pairs[q0 + min(t, cnt - 1)];
    float acc[RPW][NT];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
    // As matvec_v2_kernel: U chunks of every row loaded before any is used; chunks past the row's end clamped
    // to its last one and their products dropped by a select.
    typename A::W w[U][RPW];
    int c0 = lane;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = min(c0 + u * kWarp, n_chunks - 1);
#pragma unroll
      for (int r = 0; r < RPW; ++r) A::load(row[r], K, c, w[u][r]);
    }
    for (;;) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < cnt) {  // uniform
          const typename A::Act at = A::act_row(act, a.shared_x ? pr[t] / a.k : pr[t]);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int c = min(c0 + u * kWarp, n_chunks - 1);
            const bool valid = c0 + u * kWarp < n_chunks;
            typename A::X x;
            A::load_x(c, at, 0, x);
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
              const float d = A::dot(w[u][r], c, x);
              acc[r][t] += valid ? d : 0.f;
            }
          }
        }
      }
      c0 += U * kWarp;
      if (c0 >= n_chunks) break;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = min(c0 + u * kWarp, n_chunks - 1);
#pragma unroll
        for (int r = 0; r < RPW; ++r) A::load(row[r], K, c, w[u][r]);
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < cnt) {
        const int p = pr[t];
        float* o = m.out + (p % a.k) * m.s1 + (p / a.k) * m.s2 + n0;
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          const float s = warp_sum(acc[r][t]);
          if (lane == 0 && n0 + r < m.rows) o[r] = s;
        }
      }
    }
  }
}

template <class A, int NT, int RPW, int U>
cudaError_t launch_moe(const MoeMatvecSet& set, int64_t K, const typename A::Act& act, const MoeMatvecArgs& a,
                       cudaStream_t stream) {
  int64_t rows = 0;
  for (int m = 0; m < set.n; ++m) rows = set.rows[m] > rows ? set.rows[m] : rows;
  const dim3 grid(ceil_div(rows, kMoeWarps * RPW), static_cast<unsigned>(a.shape.max_items()),
                  static_cast<unsigned>(set.n));
  moe_matvec_kernel<A, NT, RPW, U><<<grid, kMoeThreads, 0, stream>>>(set, K, act, a);
  return cudaGetLastError();
}

// Variants: one token per pass where no expert can have more than one pair (decode), else 4 (8 spill the
// k-quants' registers at 2 blocks per SM); rows that one warp load covers (32 chunks or fewer) take 4 rows per
// warp, longer ones 2 rows x 2 chunks a lane: either way 4 weight loads in flight per lane.
template <class A>
cudaError_t moe_with(const MoeMatvecSet& set, int64_t K, const typename A::Act& act, const MoeMatvecArgs& a,
                     cudaStream_t stream) {
  const bool one_round = K / A::kElems <= kWarp;
  if (a.max_per_expert <= 1) {
    return one_round ? launch_moe<A, 1, 4, 1>(set, K, act, a, stream) : launch_moe<A, 1, 2, 2>(set, K, act, a, stream);
  }
  return one_round ? launch_moe<A, 4, 4, 1>(set, K, act, a, stream) : launch_moe<A, 4, 2, 2>(set, K, act, a, stream);
}

bool args_ok(const MoeMatvecSet& set, const MoeMatvecArgs& a) {
  if (set.n < 1 || set.n > kMatvecMaxMats || a.plan == nullptr || a.k < 1 || a.shape.max_items() > 65535) return false;
  for (int m = 0; m < set.n; ++m)
    if (set.rows[m] <= 0 || set.w[m] == nullptr || set.out[m] == nullptr) return false;
  return true;
}

}  // namespace

namespace {

// The chunk decoders read these stacks (16-byte loads); other quantized ggml-layout stacks go through slices.
bool chunked(DType type, Layout layout, const void* w, int64_t nb1, int64_t nb2, int64_t K) {
  return matvec_v2_supported(type, layout, w, nb1, K) && nb2 % 16 == 0 && (!traits(type).quantized || K % 64 == 0);
}

bool sliced(DType type, Layout layout, int64_t K) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::MXFP4:
      return layout == Layout::kGgml && K > 0 && K % traits(type).block_elems == 0 && K % 32 == 0;
    default:
      return false;
  }
}

template <DType Q>
cudaError_t moe_sliced(const MoeMatvecSet& set, int64_t K, const int8_t* xq, const float2* xds, const MoeMatvecArgs& a,
                       cudaStream_t stream) {
  return moe_with<SliceAdapter<Q>>(set, K, {xq, xds, K}, a, stream);
}

}  // namespace

bool moe_matvec_supported(DType type, Layout layout, const void* w, int64_t nb1, int64_t nb2, int64_t K) {
  return chunked(type, layout, w, nb1, nb2, K) || sliced(type, layout, K);
}

cudaError_t moe_matvec_quant(DType type, Layout layout, const MoeMatvecSet& set, int64_t K, const int8_t* xq,
                             const float2* xds, const MoeMatvecArgs& a, cudaStream_t stream) {
  if (!args_ok(set, a) || K % 32 != 0) return cudaErrorInvalidValue;
  if (a.shape.n_pairs == 0 || ablated("matvec")) return cudaSuccess;
  if (a.shape.n_pairs >= kMoeMmaMinPairs * a.shape.n_expert && a.mma &&
      moe_mma_supported(type, layout, K, xq))
    return moe_mma_quant(type, set, K, xq, xds, a, stream);
  bool chunks = K % 64 == 0;
  for (int m = 0; m < set.n; ++m)
    chunks = chunks && chunked(type, layout, set.w[m], set.w_nb1[m], set.w_nb2[m], K);
  if (!chunks) {
    if (!sliced(type, layout, K)) return cudaErrorInvalidValue;
    switch (type) {
      case DType::Q4_0: return moe_sliced<DType::Q4_0>(set, K, xq, xds, a, stream);
      case DType::Q4_1: return moe_sliced<DType::Q4_1>(set, K, xq, xds, a, stream);
      case DType::Q5_0: return moe_sliced<DType::Q5_0>(set, K, xq, xds, a, stream);
      case DType::Q5_1: return moe_sliced<DType::Q5_1>(set, K, xq, xds, a, stream);
      case DType::Q8_0: return moe_sliced<DType::Q8_0>(set, K, xq, xds, a, stream);
      case DType::Q2_K: return moe_sliced<DType::Q2_K>(set, K, xq, xds, a, stream);
      case DType::Q3_K: return moe_sliced<DType::Q3_K>(set, K, xq, xds, a, stream);
      case DType::Q4_K: return moe_sliced<DType::Q4_K>(set, K, xq, xds, a, stream);
      case DType::Q5_K: return moe_sliced<DType::Q5_K>(set, K, xq, xds, a, stream);
      case DType::Q6_K: return moe_sliced<DType::Q6_K>(set, K, xq, xds, a, stream);
      case DType::MXFP4: return moe_sliced<DType::MXFP4>(set, K, xq, xds, a, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (type) {
    case DType::Q4_0: return moe_with<QuantAdapter<DType::Q4_0>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q4_1: return moe_with<QuantAdapter<DType::Q4_1>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q5_0: return moe_with<QuantAdapter<DType::Q5_0>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q5_1: return moe_with<QuantAdapter<DType::Q5_1>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q8_0: return moe_with<QuantAdapter<DType::Q8_0>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q2_K: return moe_with<QuantAdapter<DType::Q2_K>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q3_K: return moe_with<QuantAdapter<DType::Q3_K>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q5_K: return moe_with<QuantAdapter<DType::Q5_K>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q6_K: return moe_with<QuantAdapter<DType::Q6_K>>(set, K, {xq, xds, K}, a, stream);
    case DType::Q4_K:
      // The 32-byte chunks where a row still fills a warp load (K >= 2048), else the 16-byte ones: more lanes busy.
      if (K / WideQ4KAdapter::kElems >= kWarp) return moe_with<WideQ4KAdapter>(set, K, {xq, xds, K}, a, stream);
      return moe_with<QuantAdapter<DType::Q4_K>>(set, K, {xq, xds, K}, a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t moe_matvec_float(DType type, const MoeMatvecSet& set, int64_t K, const float* x, int64_t x_stride,
                             const MoeMatvecArgs& a, cudaStream_t stream) {
  if (!args_ok(set, a) || !aligned16(x) || (x_stride * 4) % 16 != 0) return cudaErrorInvalidValue;
  if (a.shape.n_pairs == 0 || ablated("matvec")) return cudaSuccess;
  switch (type) {
    case DType::F32:
      if (K % 4 != 0) return cudaErrorInvalidValue;
      return moe_with<FloatAdapter<float>>(set, K, {x, x_stride}, a, stream);
    case DType::F16:
      if (K % 8 != 0) return cudaErrorInvalidValue;
      return moe_with<FloatAdapter<__half>>(set, K, {x, x_stride}, a, stream);
    case DType::BF16:
      if (K % 8 != 0) return cudaErrorInvalidValue;
      return moe_with<FloatAdapter<uint16_t>>(set, K, {x, x_stride}, a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ferry::kernels::cuda
