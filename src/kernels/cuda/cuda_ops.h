// CudaOps: the Ops vocabulary on an NVIDIA GPU. Every op is enqueued on the context's stream and returns
// at once; nothing here synchronizes or allocates (scratch and the cuBLAS workspace are arena blocks the
// owner passes in), so a step can be captured in a CUDA graph. All views must be device memory, the
// BatchMeta / KvView metadata included (the caller uploads them); gather_rows takes host row indices.
// A CUDA error sets the context's sticky status (later ops become no-ops); shape errors assert.
// This header includes no CUDA header, so engine code can hold a CudaOps without nvcc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/env_options.h"
#include "base/status.h"
#include "kernels/ops.h"

struct CUstream_st;    // cudaStream_t is CUstream_st*
struct cublasContext;  // cublasHandle_t is cublasContext*

namespace ferry::kernels {

// glu's activation as the CUDA kernels number it (launch.h glu).
inline int cu_act(Activation a) { return a == Activation::kSilu ? 0 : a == Activation::kGeluTanh ? 1 : 2; }

// What the owner gives a CudaContext: the device, the stream ops run on, and device memory.
struct CudaContextDesc {
  int device = 0;
  CUstream_st* stream = nullptr;           // not owned; nullptr = the legacy default stream
  void* scratch = nullptr;                 // device memory for temporaries (see CudaOps::scratch_bytes)
  uint64_t scratch_bytes = 0;
  void* cublas_workspace = nullptr;        // device memory for cuBLAS (kCublasWorkspaceBytes recommended)
  uint64_t cublas_workspace_bytes = 0;
};

// cuBLAS asks for 32 MiB of workspace on Hopper; less works (slower algorithms).
inline constexpr uint64_t kCublasWorkspaceBytes = 32ull << 20;

// Owns the cuBLAS handle; borrows the stream and the memory. One context per stream.
class CudaContext {
 public:
  static Expected<std::unique_ptr<CudaContext>> create(const CudaContextDesc& desc);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return desc_.device; }
  CUstream_st* stream() const { return desc_.stream; }
  void set_stream(CUstream_st* stream);  // later ops (and cuBLAS) run on this stream
  cublasContext* cublas() const { return cublas_; }
  void* scratch() const { return desc_.scratch; }
  uint64_t scratch_bytes() const { return desc_.scratch_bytes; }
  int compute_capability() const { return cc_; }  // 90 for sm_90
  int sm_count() const { return sm_count_; }
  int max_smem_optin() const { return max_smem_optin_; }  // shared memory per block, opt-in limit

  // First CUDA error an op hit (ok if none). Ops do nothing while it is set; clear_status() re-arms.
  const Status& status() const { return status_; }
  bool ok() const { return status_.is_ok(); }
  void set_error(Status st) {
    if (status_.is_ok()) status_ = std::move(st);
  }
  void clear_status() { status_ = Status::ok(); }

 private:
  CudaContext() = default;
  CudaContextDesc desc_;
  cublasContext* cublas_ = nullptr;
  int cc_ = 0;
  int sm_count_ = 0;
  int max_smem_optin_ = 0;
  Status status_;
};

// What CudaOps does, as options: the defaults are the production kernels; tests and benchmarks set
// fields to exercise the alternatives. An experiments build's FERRY_CUDA_* switches override them through
// with_experiments below (docs/ENVIRONMENT.md); a production build never reads those switches.
struct CudaOpsOptions {
  // matmul with n_tokens <= this reads the weights once with the dp4a / vector kernels (decode); more
  // tokens go to dequantize-to-F16 + cuBLAS (prefill). Max 8.
  int32_t matvec_max_tokens = 8;
  // Weight rows per warp of the quantized single-token matvec (1, 2 or 4; bench_cuda_ops compares them).
  int32_t matvec_rows_per_warp = 1;
  // Decode kernels v2 (16-byte weight loads) for the types / layouts they read (launch.h
  // matvec_v2_supported); false = always the v1 kernels (bench comparisons). Split-layout weights need
  // v2 or go through dequantize + cuBLAS.
  bool matvec_v2 = true;
  // Programmatic dependent launch of the v2 quantized kernels on sm_90+: their first weight loads overlap
  // the activation quantization kernel.
  bool matvec_pdl = true;
  // Tensor-core (mma.sync) flash attention for head_dim 64/128/256; false = the plain kernel.
  bool attention_mma = true;
  // One-token attention over at most attention_decode_max_cells cells (with attention_mma): the decode
  // kernel (launch.h attention kernel 2) instead of the tensor-core kernel, which is faster there
  // (bench/RESULTS.md). FERRY_CUDA_ATTN_DEC=0|1 (experiments build).
  bool attention_decode = true;
  // Past this many cells the tensor-core kernel's fewer instructions a cell win over the decode kernel.
  // FERRY_CUDA_ATTN_DEC_MAX_CELLS (experiments build).
  int32_t attention_decode_max_cells = 1024;
  // One-token attention splits the cache this many ways (1 .. 64; 0: pick from the SM count).
  // FERRY_CUDA_ATTN_SPLITS (experiments build).
  int32_t attention_decode_splits = 0;
  // Rows of W dequantized per cuBLAS call (0 = as many as fit in the scratch, at most 16384).
  int32_t gemm_chunk_rows = 0;
  // Decode matvec for 1-2 tokens where the rows fill the GPU: 3 = persistent, software-pipelined v3
  // kernel (matvec.cu), 2 = v2. FERRY_CUDA_MATVEC=2|3 (experiments build).
  int32_t matvec_kernel = 3;
  // Fused decode epilogues: rms_norm and glu also write the Q8 activations the next matvec of that tensor
  // reads (its quantize_q8 is skipped); matmul_acc adds in the matvec's epilogue; rope_qk_store is one
  // kernel. Same arithmetic as the unfused ops, bit for bit. FERRY_CUDA_FUSE=0|1 (experiments build).
  bool fuse = true;
  // With fuse: qk_norm_rope_store as one kernel (q / k norms, rotation and cache store; a decode layer
  // otherwise launches three small, latency-bound kernels). FERRY_CUDA_QKNORM_FUSE=0|1 (experiments build).
  bool qk_norm_fuse = true;
  // Q4_K decode matvec in 32-byte chunks (ChunkDecQ4KWide: the scales decoded once per 64 weights, not
  // once per 32). FERRY_CUDA_Q4K_WIDE=0|1 (experiments build).
  bool matvec_q4k_wide = true;
  // With matvec_q4k_wide, Q4_K rows of K % 2048 == 0 read by lane pairs (quant_chunks.h ChunkDecQ4KPair:
  // each warp load covers whole 128-byte runs of qs). FERRY_CUDA_Q4K_PAIR=0|1 (experiments build).
  bool matvec_q4k_pair = true;
  // The 1-token v3 matvec at 1 chunk a tile and 4 blocks per SM instead of its type's default (matvec.cu
  // DecoderAdapter: Q4_0 2 chunks a tile at 4 blocks per SM, Q4_K 1 at 4, the rest U chunks at 2; for
  // Q4_K the alternative is U at 2). FERRY_CUDA_V3ALT=0|1 (experiments build).
  bool matvec_v3_alt = false;
  // matmul_glu for one token as one kernel (matvec_quant_glu: the activation and its Q8 image in the
  // gate / up matvec's epilogue, no glu launch), when fuse is on. FERRY_CUDA_GLU_FUSE=0|1 (experiments
  // build).
  bool matvec_glu = true;
  // ... but only when the gate / up rows' 32-element groups (one block each) fill at least this share of
  // the fused kernel's block slots (launch.h matvec_glu_slots); below it, SMs run short of warps and the
  // plain gate / up matvec (every slot busy) plus the glu kernel is faster (bench/RESULTS.md).
  // FERRY_CUDA_GLU_MIN_FILL=X (experiments build; 0: always fused).
  float matvec_glu_min_fill = 0.8f;
  // rms_norm folded into the matvecs around it for one token (launch.h NormFold): after expect_norm, the
  // Q4_0 / Q4_K matmul_acc writing x also writes the norm's group sums of squares and the Q8 image of
  // x * nw, and norm_matmul_many / norm_matmul_glu scale their row sums instead of running a norm kernel.
  // Needs fuse. FERRY_CUDA_NORM_FOLD=0|1 (experiments build).
  bool matvec_norm_fold = true;
  // The mixture-of-experts ops on the device without a host round trip (cuda_ops_moe.cc: moe_route,
  // matmul_id, moe_combine, moe_experts through moe.cu / moe_matvec.cu); false = Ops' defaults, which read
  // the routing on the host (bench_cuda_ops moe compares them).
  bool moe_kernels = true;
  // With moe_kernels, the quantized expert matmuls of prefill token counts on the int8 tensor cores
  // (moe_mma.cu: each weight decoded once per 32 routed pairs) instead of the dp4a matvec (once per 4).
  // FERRY_CUDA_MOE_MMA=0|1 (experiments build).
  bool moe_mma = true;
};

// `options` with an experiments build's FERRY_CUDA_* switches applied over it; a production build's
// CudaExperiments is empty, so `options` comes back as given.
inline CudaOpsOptions with_experiments(CudaOpsOptions options, const CudaExperiments& e) {
  if (e.matvec_kernel) options.matvec_kernel = *e.matvec_kernel;
  if (e.fuse) options.fuse = *e.fuse;
  if (e.matvec_q4k_wide) options.matvec_q4k_wide = *e.matvec_q4k_wide;
  if (e.matvec_q4k_pair) options.matvec_q4k_pair = *e.matvec_q4k_pair;
  if (e.matvec_v3_alt) options.matvec_v3_alt = *e.matvec_v3_alt;
  if (e.matvec_norm_fold) options.matvec_norm_fold = *e.matvec_norm_fold;
  if (e.matvec_glu) options.matvec_glu = *e.matvec_glu;
  if (e.matvec_glu_min_fill) options.matvec_glu_min_fill = *e.matvec_glu_min_fill;
  if (e.attention_decode) options.attention_decode = *e.attention_decode;
  if (e.attention_decode_max_cells) options.attention_decode_max_cells = *e.attention_decode_max_cells;
  if (e.attention_decode_splits) options.attention_decode_splits = *e.attention_decode_splits;
  if (e.qk_norm_fuse) options.qk_norm_fuse = *e.qk_norm_fuse;
  if (e.moe_mma) options.moe_mma = *e.moe_mma;
  return options;
}
// The same over the process's environment (base/env_options.h).
inline CudaOpsOptions with_experiments(CudaOpsOptions options) {
  return with_experiments(options, env_options().cuda);
}

// Largest shapes a CudaOps will see, for sizing its scratch.
struct CudaScratchShape {
  int64_t max_tokens = 512;   // tokens per step
  int64_t max_k = 4096;       // largest matmul input width
  int64_t max_n = 14336;      // largest matmul output rows (the vocab for the head is chunked anyway)
  int32_t n_head = 32;
  int32_t head_dim = 128;
  // Bytes for the F16 copy of dequantized weight rows that a prefill GEMM multiplies at a time; 0: a
  // whole matrix of up to 4096 rows or 64 MiB (matmul_gemm takes as many rows as the scratch leaves).
  uint64_t gemm_staging_bytes = 0;
};

class CudaOps final : public Ops {
 public:
  explicit CudaOps(CudaContext& ctx, CudaOpsOptions options = {});
  // Scratch bytes CudaOps wants for shapes up to `s` (a smaller scratch works: GEMMs are chunked, but
  // it must hold at least one chunk of 128 weight rows and the activations).
  static uint64_t scratch_bytes(const CudaScratchShape& s);

  const char* name() const override { return "cuda"; }
  CudaContext& context() { return ctx_; }
  const CudaOpsOptions& options() const { return options_; }

  void embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) override;
  void matmul(const TensorView& w, const TensorView& x, TensorView out) override;
  // Decode (T <= matvec_max_tokens): x quantized once, one v2 launch per (type, layout) group of up to 4
  // weights; weights the v2 kernels do not read go through matmul one by one.
  void matmul_many(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs) override;
  // One decode token, quantized gate / up of one type: one kernel (matvec_quant_glu; up untouched, gate's Q8
  // image stashed for the down projection); else Ops' default.
  void matmul_glu(const TensorView& wg, const TensorView& wu, const TensorView& x, Activation act, TensorView gate,
                  TensorView up) override;
  // Decode: the matvec adds into acc (tmp unused); else Ops' default.
  void matmul_acc(const TensorView& w, const TensorView& x, TensorView tmp, TensorView acc) override;
  // After a matmul_acc that expect_norm prepared (one token): no norm kernel, xn not written; else Ops'.
  void norm_matmul_many(const TensorView& x, const TensorView& nw, float eps, TensorView xn, int n,
                        const TensorView* const* ws, TensorView* outs) override;
  void norm_matmul_glu(const TensorView& x, const TensorView& nw, float eps, TensorView xn, const TensorView& wg,
                       const TensorView& wu, Activation act, TensorView gate, TensorView up) override;
  void expect_norm(const TensorView& x, const TensorView& nw, float eps) override;
  void add(const TensorView& a, const TensorView& b, TensorView out) override;
  void scale(const TensorView& x, float s, TensorView out) override;
  void rope(TensorView x, const BatchMeta& batch, const RopeParams& p) override;
  void rope_qk(TensorView q, TensorView k, const BatchMeta& batch, const RopeParams& p) override;
  void kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) override;
  void rope_qk_store(TensorView q3, TensorView k3, const TensorView& k, const TensorView& v, const BatchMeta& batch,
                     const RopeParams& p, KvView kv) override;
  void qk_norm_rope_store(TensorView q3, TensorView k3, const TensorView& qn, const TensorView& kn, float eps,
                          const TensorView& k, const TensorView& v, const BatchMeta& batch, const RopeParams& p,
                          KvView kv) override;
  void attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                 TensorView out) override;
  void glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) override;
  void gather_rows(const TensorView& x, const int32_t* rows, TensorView out) override;
  // cuda_ops_vision.cc: positions and bounds on the device; attention_segments takes head_dim <= 128.
  void rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) override;
  void attention_segments(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& bounds,
                          float scale, TensorView out) override;
  // Mixture of experts (cuda_ops_moe.cc): device kernels, no host sync: moe_route for up to 256 experts and
  // 16 slots; matmul_id and moe_experts for weight stacks the v2 decode kernels read (matvec_v2_supported
  // rows, K % 64 == 0 for the quantized types), any token count (the routed pairs sorted by expert on the
  // device, each routed expert's rows read from DRAM once per work item of up to 32 of its pairs);
  // moe_experts with any activation (SiLU, GELU, gpt-oss's clamped SwiGLU) and the experts' biases (gpt-oss,
  // added by expert id after each matvec). Anything else takes Ops' defaults (host round trips).
  void moe_route(const TensorView& logits, const MoeRoute& r, TensorView ids, TensorView weights) override;
  void matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids, int32_t expert_begin,
                 TensorView* outs) override;
  void moe_combine(const TensorView& y, const TensorView& weights, TensorView out) override;
  // ggml's add_id on the device (one kernel, ids read there); strided slots take Ops' default.
  void add_expert_bias(const TensorView& bias, const TensorView& ids, int32_t expert_begin, TensorView y) override;
  void moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids, const TensorView& weights,
                   const MoeScratch& s, bool accumulate, TensorView out) override;
  // Synchronous copies (they wait for the stream); the mixture-of-experts ops' fallbacks (Ops' defaults)
  // read the routing on the host through these.
  void copy_to_host(const TensorView& src, void* dst, size_t bytes) override;
  void copy_from_host(const void* src, TensorView dst, size_t bytes) override;

  // ---- beyond Ops (tests, benchmarks, sampling) ----------------------------------------------------
  // matmul forced through one path: 0 = matvec kernels, 1 = dequantize + cuBLAS.
  void matmul_path(const TensorView& w, const TensorView& x, TensorView out, int path);
  // attention forced through one kernel: 0 = plain, 1 = tensor cores, 2 = the one-token decode kernel
  // (launch.h attention); splits 0 = automatic.
  void attention_path(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                      TensorView out, int kernel, int splits);
  // Greedy sampling on the device: out[t] = argmax_i x[i, t] (I32 [n_tokens], lowest index on ties).
  void argmax_rows(const TensorView& x, TensorView out);
  // Forgets what the Q8 stash holds (a norm's output quantized for the next matmuls). Graph capture and
  // replay call it: a graph must not read a stash filled before it, and its replay leaves the stash in a
  // state the host's record of it does not follow.
  void reset_stash() { forget_stash(); }

 private:
  void check(int cuda_error, const char* what);  // cudaError_t as int
  void matmul_vec(const TensorView& w, const TensorView& x, TensorView out, bool accumulate = false);
  void matmul_gemm(const TensorView& w, const TensorView& x, TensorView out);
  bool use_v2(const TensorView& w, const TensorView& x) const;
  void check_matmul_shapes(const TensorView& w, const TensorView& x, const TensorView& out) const;

  // The Q8 stash: activations quantized by the op that produced them (rms_norm, glu), kept at the end of
  // the scratch until any other op runs or something writes over the source. stash_for(x) is where the
  // stash holds x's Q8 image, or null.
  struct Q8Stash {
    const char* src = nullptr;  // the F32 tensor it quantizes: [K, T], rows contiguous
    int64_t K = 0, T = 0;
    int64_t off = 0;  // where in the stash its image starts: int8 element, a multiple of 256
    // A folded norm's image (matvec_quant_norm): of src * fold_w, with the group sums of squares of src
    // at stash_part() + off / 32; only norm_matmul_many / _glu with that weight and eps may read it.
    const void* fold_w = nullptr;
    float fold_eps = 0.f;
  };
  // What expect_norm announced for the next matmul_acc.
  struct NormHint {
    const void* x = nullptr;
    const void* w = nullptr;
    int64_t n = 0;
    float eps = 0.f;
  };
  static constexpr uint64_t kStashElems = 131072;  // T * K int8
  static constexpr uint64_t kStashBytes = kStashElems + kStashElems / 32 * 8 + kStashElems / 32 * 4;
  uint64_t body_bytes() const { return ctx_.scratch_bytes() - stash_bytes_; }  // scratch minus the stash
  int8_t* stash_xq() const;
  char* stash_xds() const;  // float2 [T][K / 32]
  float* stash_part() const;  // float [K / 32]: a folded norm's group sums of squares
  // The stash offset for an image of `K` elements written by a kernel that reads x's image (stashed): past
  // x's image, or at 0 when x's lies beyond K; -1 when it does not fit.
  int64_t stash_off_after(const TensorView& x, bool stashed, int64_t K) const;
  bool fold_hit(const TensorView& x, const TensorView& nw, float eps) const;
  // matmul_many's v2 launches on x's Q8 image (the stash's when stashed), scaled by `fold`.
  void matmul_many_q8(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs, bool stashed,
                      const void* fold_part, float fold_eps);
  void matmul_glu_q8(const TensorView& wg, const TensorView& wu, const TensorView& x, Activation act,
                     TensorView gate, TensorView up, bool stashed, const void* fold_part, float fold_eps);
  bool glu_fusable(const TensorView& wg, const TensorView& wu, const TensorView& x, const TensorView& gate,
                   const TensorView& up, int64_t off) const;
  bool stashable(const TensorView& out) const;  // a norm / glu output the stash can take
  bool stash_hit(const TensorView& x) const;
  // x's tokens [t0, t0 + nt) as Q8 (int8 [nt][K], float2 {d, d * sum} [nt][K / 32]) for the matvec
  // kernels: the stash's image when `stashed`, else quantize_q8 into the start of the scratch.
  void q8_of(const TensorView& x, int64_t t0, int nt, bool stashed, int8_t** xq, void** xds);
  void note_write(const TensorView& t);         // forgets the stash when t overlaps its source
  // Mixture of experts (cuda_ops_moe.cc): whether the expert kernels read stack w [K, N, E]; the tokens per
  // pass that fit the scratch (plan + Q8 rows of q8_elems int8 per token), 0 if not even one; the stash's Q8
  // image of `rows` contiguous F32 rows of K at data, or false.
  bool moe_stack_ok(const TensorView& w, int64_t K) const;
  int64_t moe_token_chunk(int64_t T, int64_t k, int32_t E, int64_t q8_elems) const;
  bool moe_stash_rows(const void* data, int64_t K, int64_t rows, int8_t** xq, void** xds) const;
  void forget_stash() {
    stash_ = {};
    hint_ = {};
  }

  CudaContext& ctx_;
  CudaOpsOptions options_;
  uint64_t stash_bytes_ = 0;  // 0: scratch too small, no stash
  Q8Stash stash_;
  NormHint hint_;
};

}  // namespace ferry::kernels
