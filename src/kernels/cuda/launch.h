// Launchers of the CUDA kernels (internal to kernels_cuda; includes CUDA headers). Each launcher takes an
// explicit stream, checks its arguments' invariants, launches, and returns cudaGetLastError() so the
// caller can record a failure. Shapes follow ops.h (ggml order, ne[0] innermost); row strides in bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch_settings.h"  // launch_settings(), ablated()
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace ferry::kernels::cuda {

// Rows of a tensor whose ne[0] elements are contiguous; rows are indexed by (i1, i2, i3).
struct RowView {
  char* data = nullptr;
  int64_t ne0 = 0, ne1 = 1, ne2 = 1, ne3 = 1;
  int64_t nb1 = 0, nb2 = 0, nb3 = 0;
  __host__ __device__ int64_t nrows() const { return ne1 * ne2 * ne3; }
  __host__ __device__ char* row(int64_t r) const {
    const int64_t i1 = r % ne1;
    const int64_t rest = r / ne1;
    const int64_t i2 = rest % ne2;
    const int64_t i3 = rest / ne2;
    return data + i1 * nb1 + i2 * nb2 + i3 * nb3;
  }
};

// ---- matmul ----------------------------------------------------------------------------------------
// Activations x [K, T] F32 (row stride x_stride floats) -> Q8: xq int8 [T][K], xds float2 [T][K / 32].
cudaError_t quantize_q8(const float* x, int64_t x_stride, int64_t K, int T, int8_t* xq, float2* xds,
                        cudaStream_t stream);
// out[n, t] = sum_k W[k, n] x[k, t] for a quantized W (rows of w_stride bytes), T <= 8, x given as Q8.
// rows_per_warp (1, 2, 4) applies to T == 1.
cudaError_t matvec_quant(DType type, const void* w, int64_t w_stride, int64_t K, int64_t N, const int8_t* xq,
                         const float2* xds, int T, int rows_per_warp, float* out, int64_t out_stride,
                         cudaStream_t stream);
// Same for W in F32 / F16 / BF16 with x in F32.
cudaError_t matvec_float(DType type, const void* w, int64_t w_stride, int64_t K, int64_t N, const float* x,
                         int64_t x_stride, int T, float* out, int64_t out_stride, cudaStream_t stream);

// ---- matmul, decode kernels v2 (16-byte weight loads; matvec.cu) ------------------------------------
// Up to kMatvecMaxMats weight matrices of one type, layout and K that multiply the same activations,
// their rows concatenated: launch row n is row n - row_end[m - 1] of matrix m, the first m with
// n < row_end[m]. One launch serves all of them (e.g. the q/k/v projections of a layer).
inline constexpr int kMatvecMaxMats = 4;
struct MatvecSet {
  const void* w[kMatvecMaxMats] = {};
  int64_t w_stride[kMatvecMaxMats] = {};    // bytes between weight rows
  float* out[kMatvecMaxMats] = {};
  int64_t out_stride[kMatvecMaxMats] = {};  // floats between tokens of out
  int64_t row_end[kMatvecMaxMats] = {};     // cumulative row counts
  int n = 0;
};
// An rms_norm folded into the matvecs around it. The producer (matvec_quant_norm) adds W x
// into the residual h and writes, per 32-group g of h, the Q8 image of h * nw and part[g] = sum of h^2 over
// the group; the consumer of that image (a matvec of any quantized type, or the glu matvec) multiplies each
// row sum by s = rsqrt(sum_g part[g] / n + eps), the norm's scale: every Q8 dot product is linear in the
// activations' scale d, so the image of h * nw scaled by s is the image of rms_norm(h) * nw up to rounding.
struct NormFold {
  const float* part = nullptr;  // [n_part]; nullptr: no fold (the kernels multiply by 1)
  int n_part = 0;
  float n = 0.f;                // the norm's width
  float eps = 0.f;
};
struct MatvecLaunch {
  int sm_count = 132;  // sizes the grid (warps per row when N is small)
  bool pdl = false;    // programmatic dependent launch after quantize_q8 (sm_90+): weight loads start early
  bool accumulate = false;  // out += W x instead of out = W x (bitwise the same as a separate add)
  int kernel = 2;      // 3: the persistent, software-pipelined v3 kernel where it applies (T <= 2, big N)
  bool q4k_wide = false;  // Q4_K through ChunkDecQ4KWide (32-byte chunks, scales decoded once per 64)
  bool q4k_pair = false;  // with q4k_wide and K % 2048 == 0: ChunkDecQ4KPair (the same units, lane pairs)
  bool v3_alt = false;  // 1-token v3: 1 chunk a tile at 4 blocks / SM (U at 2 where that is the default)
  NormFold fold;        // T == 1 only: x is a folded norm's image (the row sums are scaled by its s)
};
// Whether the v2 kernels read weights of this type / layout / shape / alignment: Q4_0, Q8_0, Q6_K in the
// split layout (split_layout_supported), Q4_K, Q5_K in ggml's layout (K % 256 == 0), F32 / F16 / BF16
// (K a multiple of 16 bytes), all with 16-byte aligned rows.
bool matvec_v2_supported(DType type, Layout layout, const void* w, int64_t w_stride, int64_t K);
// out[m][n, t] = sum_k W_m[k, n] x[k, t], T <= 8, x given as Q8 (quantize_q8); all matrices must pass
// matvec_v2_supported.
cudaError_t matvec_quant_v2(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds, int T,
                            const MatvecLaunch& launch, cudaStream_t stream);
// An FFN's gate / up projections with its activation in the epilogue, one token: set = {gate, up} of one
// quantized type, F rows each (F % 32 == 0); h[e] = act(gate[e]) * up[e] (act as glu: 0 silu, 1 gelu),
// also quantized as quantize_q8 would (hq [F], hds [F / 32]); up is not written. The same values as
// matvec_quant_v2 (v3 kernel) then glu. hq / hds must not overlap xq / xds. matvec_glu_fits says whether
// it applies (the v3 kernel asked for, not its alt variant, T == 1).
bool matvec_glu_fits(DType type, const MatvecSet& set, int T, const MatvecLaunch& launch);
// The block slots matvec_quant_glu has on the GPU for this type and K (its resident blocks per SM × SMs): it
// runs min(F / 32, slots) blocks, each owning whole 32-element groups, so F / 32 below the slots leaves SMs
// short of warps.
int64_t matvec_glu_slots(DType type, int64_t K, const MatvecLaunch& launch);
cudaError_t matvec_quant_glu(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds, int act,
                             float* h, int8_t* hq, float2* hds, const MatvecLaunch& launch, cudaStream_t stream);
// The producer of a NormFold, one token: set = one quantized matrix of N rows (N % 32 == 0) whose out is
// the residual h (h += W x, the matvec's sums as matvec_quant_v2 with accumulate); also writes the Q8 image
// of h * nw (hq [N], hds [N / 32]; quantize_q8's arithmetic) and part [N / 32] (sums of h^2 per group).
// hq / hds must not overlap xq / xds. matvec_norm_fits says whether it applies (v3 asked for, not its alt
// variant, T == 1, a type whose v3 kernel runs at 4 blocks per SM: Q4_0, Q4_K).
bool matvec_norm_fits(DType type, const MatvecSet& set, int T, const MatvecLaunch& launch);
cudaError_t matvec_quant_norm(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds,
                              const float* nw, int8_t* hq, float2* hds, float* part, const MatvecLaunch& launch,
                              cudaStream_t stream);
// Same for F32 / F16 / BF16 W with x in F32 (x and x_stride * 4 bytes 16-byte aligned).
cudaError_t matvec_float_v2(DType type, const MatvecSet& set, int64_t K, const float* x, int64_t x_stride, int T,
                            const MatvecLaunch& launch, cudaStream_t stream);

// Rows [0, rows) of W (any quantized type; split: Q4_0 / Q8_0 / Q6_K rows in the split layout of
// tensor/repack.h) -> F16 [rows][K] (contiguous).
cudaError_t dequant_rows_f16(DType type, const void* w, int64_t w_stride, int64_t K, int64_t rows, __half* out,
                             cudaStream_t stream, bool split = false);
// x [K, T] F32 -> [T][K] F16 (bf16 = false) or BF16 (bf16 = true), contiguous.
cudaError_t convert_activations(const float* x, int64_t x_stride, int64_t K, int64_t T, void* out, bool bf16,
                                cudaStream_t stream);

// ---- mixture of experts (moe.cu, moe_matvec.cu) ------------------------------------------------------
// Ops::moe_route for up to kMoeRouteMaxExperts experts and kMoeRouteMaxUsed slots: logits [E, T] F32 (row
// stride logits_stride floats) -> ids, weights [k, T] contiguous. gating: 0 = kSoftmax, 1 = kSoftmaxSelected.
inline constexpr int kMoeRouteMaxExperts = 256;
inline constexpr int kMoeRouteMaxUsed = 16;
cudaError_t moe_route(const float* logits, int64_t logits_stride, int E, int T, int k, int gating, bool normalize,
                      int32_t* ids, float* weights, cudaStream_t stream);

// The routed pairs of one expert group, by expert (moe_plan): pair p = t * k + j is slot j of token t; the
// pairs whose expert ids[p] - expert_begin lies in [0, n_expert) are listed expert by expert and cut into
// work items of at most item_pairs pairs of one expert. Int32 plan buffer (device):
//   [0] items, [1] pairs held, item_expert [max_items], item_begin [max_items], item_end [max_items]
//   (ranges of pairs[]), pairs [n_pairs].
inline constexpr int kMoePlanMaxExperts = 8192;  // the plan kernel's shared-memory counters
struct MoePlanShape {
  int64_t n_pairs = 0;
  int32_t n_expert = 0;
  int32_t item_pairs = 32;
  __host__ __device__ int64_t max_items() const {
    return (n_pairs < n_expert ? n_pairs : n_expert) + n_pairs / item_pairs;
  }
  __host__ __device__ int64_t ints() const { return 2 + 3 * max_items() + n_pairs; }
};
struct MoePlanView {
  int32_t* plan;
  MoePlanShape s;
  __host__ __device__ int32_t* item_expert() const { return plan + 2; }
  __host__ __device__ int32_t* item_begin() const { return plan + 2 + s.max_items(); }
  __host__ __device__ int32_t* item_end() const { return plan + 2 + 2 * s.max_items(); }
  __host__ __device__ int32_t* pairs() const { return plan + 2 + 3 * s.max_items(); }
};
cudaError_t moe_plan(const int32_t* ids, int32_t expert_begin, const MoePlanShape& s, int32_t* plan,
                     cudaStream_t stream);

// Up to kMatvecMaxMats stacked expert weights [K, N_m, E] of one type and layout that multiply the same
// activations: out_m[:, j, t] = expert ids[j, t] of w_m times the pair's activation row, for the pairs of a
// plan. Column (j, t) of out_m starts at out[m] + j * out_s1[m] + t * out_s2[m] (floats).
struct MoeMatvecSet {
  const void* w[kMatvecMaxMats] = {};
  int64_t w_nb1[kMatvecMaxMats] = {};  // bytes between rows
  int64_t w_nb2[kMatvecMaxMats] = {};  // bytes between experts
  int64_t rows[kMatvecMaxMats] = {};   // N_m
  float* out[kMatvecMaxMats] = {};
  int64_t out_s1[kMatvecMaxMats] = {};
  int64_t out_s2[kMatvecMaxMats] = {};
  int n = 0;
};
// The plan and the activations' rows: pair p reads row p / k (shared_x: one row per token, gate / up) or
// row p (one per slot, down). max_per_expert: an upper bound of any expert's pairs (the token count) that
// picks the kernel's tokens per pass.
struct MoeMatvecArgs {
  const int32_t* plan = nullptr;
  MoePlanShape shape;
  int k = 1;
  bool shared_x = true;
  int64_t max_per_expert = 1;
  bool mma = true;  // quantized weights may take the tensor-core kernel (CudaOpsOptions::moe_mma)
};
// The tensor-core expert kernel (moe_mma.cu) for prefill token counts: the quantized types whose scales are
// per 32 elements or coarser, and Q6_K (quant_groups_i8.h), in ggml's layout, with 16-byte aligned Q8
// activations.
// moe_matvec_quant takes it where the plan averages kMoeMmaMinPairs or more pairs an expert.
inline constexpr int64_t kMoeMmaMinPairs = 8;
bool moe_mma_supported(DType type, Layout layout, int64_t K, const int8_t* xq);
cudaError_t moe_mma_quant(DType type, const MoeMatvecSet& set, int64_t K, const int8_t* xq, const float2* xds,
                          const MoeMatvecArgs& a, cudaStream_t stream);
// Whether moe_matvec reads this weight stack: rows the v2 chunk decoders read (matvec_v2_supported, 16-byte
// aligned experts, K % 64 == 0 for the quantized types), or quantized rows in ggml's layout (K a multiple of
// the block and of 32) through the v1 kernels' slices (slower: no weight loads issued ahead).
bool moe_matvec_supported(DType type, Layout layout, const void* w, int64_t nb1, int64_t nb2, int64_t K);
// Quantized weights: activation rows as quantize_q8 writes them (xq [rows][K], xds [rows][K / 32]).
cudaError_t moe_matvec_quant(DType type, Layout layout, const MoeMatvecSet& set, int64_t K, const int8_t* xq,
                             const float2* xds, const MoeMatvecArgs& a, cudaStream_t stream);
// F32 / F16 / BF16 weights: activation rows F32, x_stride floats apart (x and the stride 16-byte aligned).
cudaError_t moe_matvec_float(DType type, const MoeMatvecSet& set, int64_t K, const float* x, int64_t x_stride,
                             const MoeMatvecArgs& a, cudaStream_t stream);
// out[:, t] (+)= sum over the slots j of token t (in order) whose expert ids[j, t] - expert_begin lies in
// [0, n_expert) of w[j, t] * y[:, j, t] (y column (j, t) at y + j * y_s1 + t * y_s2 floats), each product
// rounded before its add; without accumulate a token with no such slot gets zeros. ids == nullptr: every
// slot (Ops::moe_combine).
cudaError_t moe_combine(const float* y, int64_t y_s1, int64_t y_s2, const int32_t* ids, const float* w, int k,
                        int64_t d, int T, int32_t expert_begin, int32_t n_expert, bool accumulate, float* out,
                        int64_t out_stride, cudaStream_t stream);
// ggml's add_id: y[:, s] += bias[:, ids[s] - expert_begin] for each of the n_slots slots (columns of y,
// y_stride floats apart) whose expert lies in [0, n_expert); others untouched. bias [n, n_expert], columns
// bias_stride floats apart; ids device I32 [n_slots].
cudaError_t moe_add_bias(float* y, int64_t y_stride, int64_t n, int64_t n_slots, const int32_t* ids,
                         int32_t expert_begin, int32_t n_expert, const float* bias, int64_t bias_stride,
                         cudaStream_t stream);

// ---- rows ------------------------------------------------------------------------------------------
// out[:, t] = dequant(table row tokens[t]) * scale; tokens device I32 [n]; ids outside [0, vocab) -> zeros.
// split: the table's rows are in the split layout (Q4_0 / Q8_0 / Q6_K).
cudaError_t embed_rows(DType type, const void* table, int64_t table_stride, int64_t d, int64_t vocab,
                       const int32_t* tokens, int64_t n, float scale, float* out, int64_t out_stride,
                       cudaStream_t stream, bool split = false);
// out row i = x row rows[i] (bytes of a row), rows given on the host.
cudaError_t gather_rows(const void* x, int64_t x_stride, int64_t row_bytes, const int32_t* rows_host, int64_t n,
                        void* out, int64_t out_stride, cudaStream_t stream);
// out[t] = argmax_i x[i, t].
cudaError_t argmax_rows(const float* x, int64_t x_stride, int64_t n, int64_t T, int32_t* out,
                        cudaStream_t stream);

// ---- elementwise -----------------------------------------------------------------------------------
// xq / xds non-null (out [K, T] with contiguous rows, K % 32 == 0): out is also quantized exactly as
// quantize_q8 would (xq [T][K], xds [T][K / 32]), in the same kernel. w is read before the PDL wait, as a
// matvec's weights are: no kernel right before this one may write it.
cudaError_t rms_norm(const RowView& x, const float* w, float eps, const RowView& out, cudaStream_t stream,
                     int8_t* xq = nullptr, float2* xds = nullptr);
// Whether rms_norm can quantize for these views (else pass xq = xds = nullptr).
bool rms_norm_quantizes(const RowView& x, const float* w, const RowView& out);
// out = a + b; b_broadcast: b has one row, added to every row.
cudaError_t add(const RowView& a, const RowView& b, bool b_broadcast, const RowView& out, cudaStream_t stream);
cudaError_t scale(const RowView& x, float s, const RowView& out, cudaStream_t stream);
// act: 0 = silu, 1 = gelu (tanh approximation), 2 = gpt-oss's clamped SwiGLU (ggml_swiglu_oai).
// xq / xds: as rms_norm's.
cudaError_t glu(const RowView& gate, const RowView& up, int act, const RowView& out, cudaStream_t stream,
                int8_t* xq = nullptr, float2* xds = nullptr);

struct RopeArgs {
  char* x = nullptr;          // [head_dim, n_head, n_tokens]
  int64_t nb1 = 0, nb2 = 0;   // bytes between heads, between tokens
  int32_t head_dim = 0, n_head = 0, n_tokens = 0;
  int32_t n_rot = 0;
  float freq_base = 10000.f, freq_scale = 1.f;
  bool neox = false;
  const float* freq_factors = nullptr;  // [n_rot / 2] or null
  // YaRN (RopeParams; kernels/rope_yarn.h): ext_factor 0 off; corr_dims from rope_yarn_corr_dims on the host.
  float ext_factor = 0.f, attn_factor = 1.f;
  float corr_dims[2] = {0.f, 0.f};
  const int32_t* pos = nullptr;         // [n_tokens]
  // Optional second tensor rotated by the same launch (k after q): same head_dim and n_tokens.
  char* x2 = nullptr;
  int64_t nb1_2 = 0, nb2_2 = 0;
  int32_t n_head2 = 0;
  // Optional KV store in the same launch (rope_qk_store; needs x2 = k, n_rot == head_dim): the rotated k
  // (x2 [kv_dim] per token) and v [kv_dim] per token (row stride v_nb1 bytes) go to the F16 cache
  // columns cell[t] (skipped when outside [0, n_cells)).
  const char* v = nullptr;
  int64_t v_nb1 = 0;
  int32_t kv_dim = 0;
  const int32_t* cell = nullptr;
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
  int64_t k_cache_stride = 0, v_cache_stride = 0, n_cells = 0;
  // Optional per-head RMS norms before the rotation (qwen3 / gemma3 q and k norms, weights [head_dim]):
  // x2 set, neox, n_rot == head_dim in {64, 128, 256}, heads of contiguous floats. Bit for bit the
  // rms_norm kernel on each head followed by this rope.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0.f;
};
cudaError_t rope(const RopeArgs& a, cudaStream_t stream);
// Whether rope() takes these norms (the conditions above, given the rest of a).
bool rope_norms_supported(const RopeArgs& a);

// K/V [kv_dim, n_tokens] F32 -> cache columns cell[t] (F16, row stride cache_stride bytes).
cudaError_t kv_store(const RowView& k, const RowView& v, const int32_t* cell, int64_t n_tokens, __half* k_cache,
                     __half* v_cache, int64_t k_stride, int64_t v_stride, int64_t n_cells, cudaStream_t stream);

// ---- attention -------------------------------------------------------------------------------------
struct AttnArgs {
  const float* q = nullptr;         // [head_dim, n_head, n_tokens]
  int64_t q_nb1 = 0, q_nb2 = 0;     // bytes between heads / tokens
  const __half* k = nullptr;        // [kv_dim, n_cells], row stride k_stride bytes
  const __half* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  const int32_t* cell_pos = nullptr;  // [n_cells]
  const int32_t* cell_seq = nullptr;
  const int32_t* pos = nullptr;       // [n_tokens]
  const int32_t* seq = nullptr;
  int32_t n_cells = 0, n_tokens = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  float scale = 1.f, softcap = 0.f;
  int32_t window = 0;
  const float* sinks = nullptr;     // optional [n_head]: a logit per head joining the softmax (gpt-oss)
  float* out = nullptr;             // [head_dim * n_head, n_tokens]
  int64_t out_nb1 = 0;
  // Optional: out quantized as quantize_q8 would, by the split-combine kernel (see attention()).
  int8_t* xq = nullptr;
  float2* xds = nullptr;
};
// Scratch bytes attention needs for `splits` > 1 (partial results).
int64_t attention_scratch_bytes(int n_tokens, int n_head, int head_dim, int splits);
// Once per device, before any attention (not capturable): raises the kernels' shared memory limits;
// returns the device's per-block opt-in limit for attention().
cudaError_t attention_prepare(int device, int* max_smem_optin);
// kernel: 0 = plain (any head_dim <= 256), 1 = tensor cores (head_dim 64, 128, 256; sm_75+; falls back to
// plain when the variant needs more shared memory than max_smem_optin), 2 = the one-token decode kernel
// (one token, head_dim 64, 128 or 256, GQA group 1, 2, 4 or 8, q rows 16-byte aligned; other shapes take
// kernel 1).
// splits: KV ranges done by different blocks then combined; 0 = pick from the SM count.
// *quantized (optional): whether a.xq / a.xds were written (only the split-combine kernel quantizes, and
// only with head_dim % 32 == 0 and contiguous out rows).
cudaError_t attention(const AttnArgs& a, int kernel, int splits, int sm_count, int max_smem_optin, void* scratch,
                      int64_t scratch_bytes, cudaStream_t stream, bool* quantized = nullptr);
bool attention_mma_supported(int head_dim);
// Timing builds only (attention.cu compiled with -DFERRY_CUDA_ATTN_STAMPS): each block of the tensor-core
// attention kernel records clock64() on its thread 0 at entry (0), after the PDL wait (1), with q staged
// (2), with the first tile landed (3), after the tile loop (4), with the warps' states in shared memory
// (split-warp variant; 5), at the end (6), and %globaltimer at entry (7). attention_stamps_clear() zeroes them;
// attention_stamps() copies [blocks][8] uint64 of the blocks (linear id x + gx (y + gy z)) out and returns
// how many (0 in normal builds: nothing is recorded). bench_cuda_ops attention prints the phases.
cudaError_t attention_stamps_clear();
int attention_stamps(uint64_t* out, int max_blocks);

// ---- vision-language ops (vision.cu) -----------------------------------------------------------------
// rope_multi in place on x [head_dim, n_head, n_tokens] (Ops::rope_multi): pos [4 * n_tokens] I32
// section-major; vision: head_dim == 2 * n_rot, pairs (i, i + n_rot); else pairs (i, i + n_rot / 2).
struct RopeMultiArgs {
  char* x = nullptr;
  int64_t nb1 = 0, nb2 = 0;  // bytes between heads, between tokens
  int32_t head_dim = 0, n_head = 0, n_tokens = 0, n_rot = 0;
  float freq_base = 10000.f, freq_scale = 1.f;
  const float* freq_factors = nullptr;  // [pairs] or null
  const int32_t* pos = nullptr;
  int32_t sections[4] = {0, 0, 0, 0};
  bool vision = false;
};
cudaError_t rope_multi(const RopeMultiArgs& a, cudaStream_t stream);

// attention_segments (Ops::attention_segments): q [head_dim, n_head, n_tokens], k / v [head_dim,
// n_kv_head, n_tokens] F32 (strides in bytes), bounds [n_seg + 1] I32 on the device, out [head_dim *
// n_head, n_tokens] F32 (row stride out_nb1 bytes). head_dim <= kSegMaxHeadDim.
inline constexpr int kSegMaxHeadDim = 128;
struct SegAttnArgs {
  const float* q = nullptr;
  int64_t q_nb1 = 0, q_nb2 = 0;
  const float* k = nullptr;
  int64_t k_nb1 = 0, k_nb2 = 0;
  const float* v = nullptr;
  int64_t v_nb1 = 0, v_nb2 = 0;
  const int32_t* bounds = nullptr;
  int32_t n_seg = 0;
  int32_t n_tokens = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  float scale = 1.f;
  float* out = nullptr;
  int64_t out_nb1 = 0;
};
cudaError_t attention_segments(const SegAttnArgs& a, cudaStream_t stream);
uint64_t attention_segments_smem_bytes(int head_dim);

}  // namespace ferry::kernels::cuda
