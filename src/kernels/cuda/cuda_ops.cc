// CudaContext (cuBLAS handle, stream, scratch) and CudaOps: shape checks, then the launchers of
// launch.h or cuBLAS. Matmul picks its path by token count: the matvec kernels (weights read once,
// decode) up to options.matvec_max_tokens, else dequantize-to-F16 + cublasGemmEx (F16 in, F32 accumulate
// and out), W dequantized in row chunks that fit the scratch so the F16 copy stays small (and mostly in
// L2 while cuBLAS reads it).
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda/launch.h"
#include "kernels/rope_yarn.h"
#include "tensor/repack.h"

#if FERRY_EXPERIMENTS
namespace ferry::kernels::cuda {

const LaunchSettings& launch_settings() {
  static const LaunchSettings settings = [] {
    const CudaExperiments& e = env_options().cuda;
    LaunchSettings s;
    if (e.pdl) s.pdl = *e.pdl;
    if (e.norm_pdl) s.norm_pdl = *e.norm_pdl;
    if (e.attention_split_blocks_per_sm) s.attention_split_blocks_per_sm = *e.attention_split_blocks_per_sm;
    if (e.attention_decode_cells) s.attention_decode_cells = *e.attention_decode_cells;
    return s;
  }();
  return settings;
}

bool ablated(const char* what) {
  for (const std::string& family : env_options().cuda.ablate)
    if (family == what) return true;
  return false;
}

}  // namespace ferry::kernels::cuda
#endif

namespace ferry::kernels {

namespace cu = ferry::kernels::cuda;

namespace {

Status cuda_error(cudaError_t e, const char* what) {
  return make_error(ErrorCode::kDevice, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
Status cublas_error(cublasStatus_t s, const char* what) {
  return make_error(ErrorCode::kDevice, "cuBLAS error in %s: %s", what, cublasGetStatusString(s));
}

cu::RowView row_view(const TensorView& t) {
  FERRY_ASSERT_MSG(t.nb[0] == static_cast<size_t>(traits(t.dtype).block_bytes), "rows must be contiguous");
  cu::RowView v;
  v.data = static_cast<char*>(t.data);
  v.ne0 = t.ne[0];
  v.ne1 = t.ne[1];
  v.ne2 = t.ne[2];
  v.ne3 = t.ne[3];
  v.nb1 = static_cast<int64_t>(t.nb[1]);
  v.nb2 = static_cast<int64_t>(t.nb[2]);
  v.nb3 = static_cast<int64_t>(t.nb[3]);
  return v;
}

bool same_shape(const TensorView& a, const TensorView& b) {
  return a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3];
}

bool is_2d(const TensorView& t) { return t.ne[2] == 1 && t.ne[3] == 1; }

uint64_t align256(uint64_t x) { return (x + 255) / 256 * 256; }

// Bump allocation inside the context's scratch for the duration of one op (ops on one stream run in
// order, so the next op may reuse the same bytes).
class Scratch {
 public:
  Scratch(void* base, uint64_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  void* take(uint64_t n) {
    const uint64_t off = used_;
    used_ = align256(used_ + n);
    FERRY_ASSERT_MSG(used_ <= bytes_, "CudaOps scratch too small (see CudaOps::scratch_bytes)");
    return base_ + off;
  }
  uint64_t left() const { return bytes_ > used_ ? bytes_ - used_ : 0; }

 private:
  char* base_;
  uint64_t bytes_;
  uint64_t used_ = 0;
};

constexpr int64_t kDefaultChunkRows = 16384;

}  // namespace

// ---- CudaContext -----------------------------------------------------------------------------------

Expected<std::unique_ptr<CudaContext>> CudaContext::create(const CudaContextDesc& desc) {
  std::unique_ptr<CudaContext> ctx(new CudaContext());
  ctx->desc_ = desc;
  cudaError_t e = cudaSetDevice(desc.device);
  if (e != cudaSuccess) return cuda_error(e, "cudaSetDevice");
  int major = 0, minor = 0, sms = 0;
  if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, desc.device)) != cudaSuccess ||
      (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, desc.device)) != cudaSuccess ||
      (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, desc.device)) != cudaSuccess) {
    return cuda_error(e, "cudaDeviceGetAttribute");
  }
  ctx->cc_ = major * 10 + minor;
  ctx->sm_count_ = sms;
  if ((e = cu::attention_prepare(desc.device, &ctx->max_smem_optin_)) != cudaSuccess) {
    return cuda_error(e, "attention_prepare");
  }
  cublasHandle_t h = nullptr;
  cublasStatus_t s = cublasCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) return cublas_error(s, "cublasCreate");
  ctx->cublas_ = h;
  if ((s = cublasSetStream(h, desc.stream)) != CUBLAS_STATUS_SUCCESS) return cublas_error(s, "cublasSetStream");
  if (desc.cublas_workspace != nullptr && desc.cublas_workspace_bytes > 0) {
    s = cublasSetWorkspace(h, desc.cublas_workspace, desc.cublas_workspace_bytes);
    if (s != CUBLAS_STATUS_SUCCESS) return cublas_error(s, "cublasSetWorkspace");
  }
  return ctx;
}

CudaContext::~CudaContext() {
  if (cublas_) cublasDestroy(cublas_);
}

void CudaContext::set_stream(CUstream_st* stream) {
  desc_.stream = stream;
  const cublasStatus_t s = cublasSetStream(cublas_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) set_error(cublas_error(s, "cublasSetStream"));
}

// ---- CudaOps ---------------------------------------------------------------------------------------

CudaOps::CudaOps(CudaContext& ctx, CudaOpsOptions options) : ctx_(ctx), options_(options) {
  options_.matvec_max_tokens = std::clamp(options_.matvec_max_tokens, 0, 8);
  if (options_.matvec_rows_per_warp != 2 && options_.matvec_rows_per_warp != 4) options_.matvec_rows_per_warp = 1;
  if (options_.matvec_kernel != 2) options_.matvec_kernel = 3;
  if (options_.attention_decode_splits < 0 || options_.attention_decode_splits > 64) options_.attention_decode_splits = 0;
  if (options_.attention_decode_max_cells < 1) options_.attention_decode_max_cells = 1024;
  stash_bytes_ = options_.fuse && ctx_.scratch() != nullptr && ctx_.scratch_bytes() >= 4 * kStashBytes ? kStashBytes : 0;
}

int8_t* CudaOps::stash_xq() const { return static_cast<int8_t*>(ctx_.scratch()) + body_bytes(); }
char* CudaOps::stash_xds() const { return reinterpret_cast<char*>(stash_xq()) + kStashElems; }
float* CudaOps::stash_part() const { return reinterpret_cast<float*>(stash_xds() + kStashElems / 32 * 8); }

int64_t CudaOps::stash_off_after(const TensorView& x, bool stashed, int64_t K) const {
  int64_t off = 0;
  if (stashed && stash_.off < K) off = (stash_.off + stash_.K * stash_.T + 255) / 256 * 256;
  return static_cast<uint64_t>(off + K) <= kStashElems ? off : -1;
}

bool CudaOps::fold_hit(const TensorView& x, const TensorView& nw, float eps) const {
  return stash_.src != nullptr && stash_.fold_w != nullptr && stash_.src == static_cast<const char*>(x.data) &&
         stash_.fold_w == nw.data && stash_.fold_eps == eps && stash_.K == x.ne[0] && stash_.T == 1 &&
         x.ne[1] == 1 && is_2d(x) && x.nb[0] == 4;
}

bool CudaOps::stashable(const TensorView& out) const {
  const int64_t K = out.ne[0], T = out.ne[1];
  return stash_bytes_ > 0 && out.dtype == DType::F32 && is_2d(out) && K % 32 == 0 && out.nb[0] == 4 &&
         out.nb[1] == static_cast<size_t>(K) * 4 && T >= 1 && T <= options_.matvec_max_tokens &&
         static_cast<uint64_t>(K * T) <= kStashElems;
}

bool CudaOps::stash_hit(const TensorView& x) const {
  return stash_.src != nullptr && stash_.fold_w == nullptr && stash_.src == static_cast<const char*>(x.data) &&
         stash_.K == x.ne[0] &&
         stash_.T == x.ne[1] && x.nb[1] == static_cast<size_t>(x.ne[0]) * 4;
}

void CudaOps::note_write(const TensorView& t) {
  if (stash_.src == nullptr) return;
  const char* a = static_cast<const char*>(t.data);
  const char* b = a + t.nbytes();
  const char* s0 = stash_.src;
  const char* s1 = s0 + stash_.K * stash_.T * 4;
  if (a < s1 && s0 < b) forget_stash();
}

uint64_t CudaOps::scratch_bytes(const CudaScratchShape& s) {
  const uint64_t k = static_cast<uint64_t>(s.max_k);
  const uint64_t q8 = align256(8 * k) + align256(8 * (k / 32) * 8);
  const uint64_t chunk_rows =
      s.gemm_staging_bytes > 0
          ? std::min<uint64_t>(static_cast<uint64_t>(s.max_n), std::max<uint64_t>(128, s.gemm_staging_bytes / (2 * k)))
          : std::min<uint64_t>(static_cast<uint64_t>(s.max_n), std::max<uint64_t>(4096, (64ull << 20) / (2 * k)));
  const uint64_t gemm = align256(static_cast<uint64_t>(s.max_tokens) * k * 2) + align256(chunk_rows * k * 2);
  const uint64_t attn = static_cast<uint64_t>(cu::attention_scratch_bytes(16, s.n_head, s.head_dim, 64));
  return std::max({q8, gemm, attn}) + 4096 + kStashBytes;
}

void CudaOps::check(int err, const char* what) {
  if (err != cudaSuccess) ctx_.set_error(cuda_error(static_cast<cudaError_t>(err), what));
}

void CudaOps::embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  const int64_t n = tokens.ne[0];
  FERRY_ASSERT(tokens.dtype == DType::I32 && out.dtype == DType::F32 && is_2d(table) && is_2d(out));
  FERRY_ASSERT(out.ne[0] == table.ne[0] && out.ne[1] == n && out.nb[0] == 4);
  FERRY_ASSERT(table.dtype == DType::F32 || table.dtype == DType::F16 || table.dtype == DType::BF16 ||
               table.ne[0] % 32 == 0);
  const bool split = table.layout == Layout::kSplit;
  FERRY_ASSERT_MSG(!split || split_layout_supported(table.dtype, table.ne[0]), "embed: bad split-layout table");
  check(cu::embed_rows(table.dtype, table.data, static_cast<int64_t>(table.nb[1]), table.ne[0], table.ne[1],
                       tokens.ptr<const int32_t>(), n, scale, out.ptr<float>(), static_cast<int64_t>(out.nb[1] / 4),
                       ctx_.stream(), split),
        "embed");
}

void CudaOps::rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) {
  if (!ctx_.ok()) return;
  FERRY_ASSERT(x.dtype == DType::F32 && w.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(same_shape(x, out) && w.ne[0] == x.ne[0]);
  forget_stash();
  const bool stash = stashable(out) && cu::rms_norm_quantizes(row_view(x), w.ptr<const float>(), row_view(out));
  if (!cu::ablated("norm")) {
    check(cu::rms_norm(row_view(x), w.ptr<const float>(), eps, row_view(out), ctx_.stream(),
                       stash ? stash_xq() : nullptr, stash ? reinterpret_cast<float2*>(stash_xds()) : nullptr),
          "rms_norm");
  }
  if (stash) stash_ = Q8Stash{static_cast<const char*>(out.data), out.ne[0], out.ne[1], 0};
}

void CudaOps::matmul(const TensorView& w, const TensorView& x, TensorView out) {
  if (!ctx_.ok()) return;
  note_write(out);
  if (x.ne[1] <= options_.matvec_max_tokens) {
    matmul_vec(w, x, out);
  } else {
    matmul_gemm(w, x, out);
  }
}

void CudaOps::matmul_path(const TensorView& w, const TensorView& x, TensorView out, int path) {
  if (!ctx_.ok()) return;
  note_write(out);
  if (path == 0) {
    matmul_vec(w, x, out);
  } else {
    matmul_gemm(w, x, out);
  }
}

void CudaOps::check_matmul_shapes(const TensorView& w, const TensorView& x, const TensorView& out) const {
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && is_2d(w) && is_2d(x) && is_2d(out));
  FERRY_ASSERT(x.ne[0] == K && out.ne[0] == N && out.ne[1] == T && x.nb[0] == 4 && out.nb[0] == 4);
  FERRY_ASSERT_MSG(w.layout == Layout::kGgml || split_layout_supported(w.dtype, K), "matmul: bad split-layout weight");
}

bool CudaOps::use_v2(const TensorView& w, const TensorView& x) const {
  if (!options_.matvec_v2 || !cu::matvec_v2_supported(w.dtype, w.layout, w.data, static_cast<int64_t>(w.nb[1]), w.ne[0]))
    return false;
  // The float kernels read x with 16-byte loads too.
  return traits(w.dtype).quantized || (reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.nb[1] % 16 == 0);
}

namespace {

// The decode matvec launch settings of these options, on this context's GPU. PDL for every launch: each
// kernel of the chain lets the next one start loading its weights.
cu::MatvecLaunch decode_launch(const CudaContext& ctx, const CudaOpsOptions& opt) {
  cu::MatvecLaunch launch;
  launch.sm_count = ctx.sm_count();
  launch.pdl = opt.matvec_pdl && ctx.compute_capability() >= 90;
  launch.kernel = opt.matvec_kernel;
  launch.q4k_wide = opt.matvec_q4k_wide;
  launch.q4k_pair = opt.matvec_q4k_pair;
  launch.v3_alt = opt.matvec_v3_alt;
  return launch;
}

// The launch settings of a decode matvec reading a folded norm's image (group sums at `part`, norm width K);
// no fold when part is null.
cu::MatvecLaunch fold_launch(const CudaContext& ctx, const CudaOpsOptions& opt, const void* part, int64_t K,
                             float eps) {
  cu::MatvecLaunch launch = decode_launch(ctx, opt);
  if (part != nullptr)
    launch.fold = cu::NormFold{static_cast<const float*>(part), static_cast<int>(K / 32), static_cast<float>(K), eps};
  return launch;
}

cu::MatvecSet one_matrix(const TensorView& w, float* out, int64_t out_stride) {
  cu::MatvecSet s;
  s.w[0] = w.data;
  s.w_stride[0] = static_cast<int64_t>(w.nb[1]);
  s.out[0] = out;
  s.out_stride[0] = out_stride;
  s.row_end[0] = w.ne[1];
  s.n = 1;
  return s;
}

}  // namespace

void CudaOps::q8_of(const TensorView& x, int64_t t0, int nt, bool stashed, int8_t** xq, void** xds) {
  if (stashed) {  // quantized by the kernel that wrote x
    *xq = stash_xq() + stash_.off;
    *xds = stash_xds() + stash_.off / 32 * sizeof(float2);
    return;
  }
  const int64_t K = x.ne[0], x_stride = static_cast<int64_t>(x.nb[1] / 4);
  Scratch sc(ctx_.scratch(), body_bytes());
  *xq = static_cast<int8_t*>(sc.take(static_cast<uint64_t>(nt) * K));
  auto* d = static_cast<float2*>(sc.take(static_cast<uint64_t>(nt) * (K / 32) * sizeof(float2)));
  *xds = d;
  check(cu::quantize_q8(x.ptr<const float>() + t0 * x_stride, x_stride, K, nt, *xq, d, ctx_.stream()), "quantize_q8");
}

void CudaOps::matmul_vec(const TensorView& w, const TensorView& x, TensorView out, bool accumulate) {
  check_matmul_shapes(w, x, out);
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  const bool v2 = use_v2(w, x);
  FERRY_ASSERT(v2 || !accumulate);
  if (w.layout == Layout::kSplit && !v2) {  // only the v2 kernels read split rows
    matmul_gemm(w, x, out);
    return;
  }
  const int64_t x_stride = static_cast<int64_t>(x.nb[1] / 4), out_stride = static_cast<int64_t>(out.nb[1] / 4);
  const bool quant = traits(w.dtype).quantized;
  cu::MatvecLaunch launch = decode_launch(ctx_, options_);
  launch.accumulate = accumulate;
  const bool stashed = T <= 8 && stash_hit(x);
  for (int64_t t0 = 0; t0 < T; t0 += 8) {
    const int nt = static_cast<int>(std::min<int64_t>(8, T - t0));
    const float* xt = x.ptr<const float>() + t0 * x_stride;
    float* ot = out.ptr<float>() + t0 * out_stride;
    if (quant) {
      FERRY_ASSERT(K % traits(w.dtype).block_elems == 0);
      int8_t* xq = nullptr;
      void* xds_raw = nullptr;
      q8_of(x, t0, nt, stashed, &xq, &xds_raw);
      auto* xds = static_cast<float2*>(xds_raw);
      if (v2) {
        check(cu::matvec_quant_v2(w.dtype, one_matrix(w, ot, out_stride), K, xq, xds, nt, launch, ctx_.stream()),
              "matmul: matvec_quant_v2");
      } else {
        check(cu::matvec_quant(w.dtype, w.data, static_cast<int64_t>(w.nb[1]), K, N, xq, xds, nt,
                               options_.matvec_rows_per_warp, ot, out_stride, ctx_.stream()),
              "matmul: matvec_quant");
      }
    } else if (v2) {
      check(cu::matvec_float_v2(w.dtype, one_matrix(w, ot, out_stride), K, xt, x_stride, nt, launch, ctx_.stream()),
            "matmul: matvec_float_v2");
    } else {
      check(cu::matvec_float(w.dtype, w.data, static_cast<int64_t>(w.nb[1]), K, N, xt, x_stride, nt, ot,
                             out_stride, ctx_.stream()),
            "matmul: matvec_float");
    }
  }
}

void CudaOps::matmul_many(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs) {
  if (!ctx_.ok()) return;
  if (n <= 1 || x.ne[1] > options_.matvec_max_tokens || !options_.matvec_v2) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, outs[i]);
    return;
  }
  matmul_many_q8(n, ws, x, outs, stash_hit(x), nullptr, 0.f);
}

void CudaOps::matmul_many_q8(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs,
                             bool stashed, const void* fold_part, float fold_eps) {
  const int64_t T = x.ne[1], K = x.ne[0];
  FERRY_ASSERT(T <= 8);
  bool v2[64] = {};
  FERRY_ASSERT(n <= 64);
  bool any_quant = false;
  for (int i = 0; i < n; ++i) {
    check_matmul_shapes(*ws[i], x, outs[i]);
    v2[i] = use_v2(*ws[i], x);
    any_quant |= v2[i] && traits(ws[i]->dtype).quantized;
  }
  const int64_t x_stride = static_cast<int64_t>(x.nb[1] / 4);
  int8_t* xq = nullptr;
  void* xds_raw = nullptr;
  for (int i = 0; i < n; ++i) note_write(outs[i]);
  if (any_quant) q8_of(x, 0, static_cast<int>(T), stashed, &xq, &xds_raw);  // once for all quantized weights
  auto* xds = static_cast<float2*>(xds_raw);
  FERRY_ASSERT(fold_part == nullptr || T == 1);
  const cu::MatvecLaunch launch = fold_launch(ctx_, options_, fold_part, K, fold_eps);
  bool done[64] = {};
  for (int i = 0; i < n; ++i) {
    if (!v2[i] || done[i]) continue;
    // Group i with the later v2 weights of the same type and layout, up to kMatvecMaxMats.
    cu::MatvecSet set;
    for (int j = i; j < n && set.n < cu::kMatvecMaxMats; ++j) {
      if (!v2[j] || done[j] || ws[j]->dtype != ws[i]->dtype || ws[j]->layout != ws[i]->layout) continue;
      set.w[set.n] = ws[j]->data;
      set.w_stride[set.n] = static_cast<int64_t>(ws[j]->nb[1]);
      set.out[set.n] = outs[j].ptr<float>();
      set.out_stride[set.n] = static_cast<int64_t>(outs[j].nb[1] / 4);
      set.row_end[set.n] = (set.n > 0 ? set.row_end[set.n - 1] : 0) + ws[j]->ne[1];
      ++set.n;
      done[j] = true;
    }
    if (traits(ws[i]->dtype).quantized) {
      check(cu::matvec_quant_v2(ws[i]->dtype, set, K, xq, xds, static_cast<int>(T), launch, ctx_.stream()),
            "matmul_many: matvec_quant_v2");
    } else {
      FERRY_ASSERT(fold_part == nullptr);
      check(cu::matvec_float_v2(ws[i]->dtype, set, K, x.ptr<const float>(), x_stride, static_cast<int>(T), launch,
                                ctx_.stream()),
            "matmul_many: matvec_float_v2");
    }
  }
  // The rest one by one (their quantize_q8 runs after the v2 launches above, in stream order).
  for (int i = 0; i < n; ++i) {
    if (!v2[i]) {
      FERRY_ASSERT(fold_part == nullptr);
      matmul(*ws[i], x, outs[i]);
    }
  }
}

void CudaOps::norm_matmul_many(const TensorView& x, const TensorView& nw, float eps, TensorView xn, int n,
                               const TensorView* const* ws, TensorView* outs) {
  if (!ctx_.ok()) return;
  bool fold = fold_hit(x, nw, eps) && options_.matvec_v2 && n >= 1 && n <= 64 && same_shape(x, xn);
  for (int i = 0; fold && i < n; ++i) fold = traits(ws[i]->dtype).quantized && use_v2(*ws[i], x);
  if (!fold) {
    Ops::norm_matmul_many(x, nw, eps, xn, n, ws, outs);
    return;
  }
  matmul_many_q8(n, ws, x, outs, /*stashed=*/true, stash_part() + stash_.off / 32, eps);
}

namespace {

cu::MatvecSet glu_set(const TensorView& wg, const TensorView& wu, const TensorView& gate, const TensorView& up) {
  cu::MatvecSet set;
  set.w[0] = wg.data;
  set.w[1] = wu.data;
  set.w_stride[0] = static_cast<int64_t>(wg.nb[1]);
  set.w_stride[1] = static_cast<int64_t>(wu.nb[1]);
  set.out[0] = gate.ptr<float>();
  set.out[1] = up.ptr<float>();
  set.row_end[0] = wg.ne[1];
  set.row_end[1] = wg.ne[1] + wu.ne[1];
  set.n = 2;
  return set;
}

}  // namespace

bool CudaOps::glu_fusable(const TensorView& wg, const TensorView& wu, const TensorView& x, const TensorView& gate,
                          const TensorView& up, int64_t off) const {
  const int64_t T = x.ne[1], F = wg.ne[1];
  if (!(options_.fuse && options_.matvec_glu && options_.matvec_v2 && T == 1 && T <= options_.matvec_max_tokens &&
        wg.dtype == wu.dtype && wg.layout == wu.layout && traits(wg.dtype).quantized && wu.ne[1] == F &&
        use_v2(wg, x) && use_v2(wu, x) && stashable(gate) && off >= 0 && !cu::ablated("glu")))
    return false;
  const cu::MatvecLaunch launch = decode_launch(ctx_, options_);
  return cu::matvec_glu_fits(wg.dtype, glu_set(wg, wu, gate, up), 1, launch) &&
         static_cast<double>(F / 32) >=
             options_.matvec_glu_min_fill * static_cast<double>(cu::matvec_glu_slots(wg.dtype, x.ne[0], launch));
}

void CudaOps::matmul_glu(const TensorView& wg, const TensorView& wu, const TensorView& x, Activation act,
                         TensorView gate, TensorView up) {
  if (!ctx_.ok()) return;
  const bool stashed = stash_hit(x);
  // The fused epilogue knows silu and gelu only.
  if (act == Activation::kSwigluOai || !glu_fusable(wg, wu, x, gate, up, stash_off_after(x, stashed, wg.ne[1]))) {
    Ops::matmul_glu(wg, wu, x, act, gate, up);
    return;
  }
  matmul_glu_q8(wg, wu, x, act, gate, up, stashed, nullptr, 0.f);
}

void CudaOps::norm_matmul_glu(const TensorView& x, const TensorView& nw, float eps, TensorView xn,
                              const TensorView& wg, const TensorView& wu, Activation act, TensorView gate,
                              TensorView up) {
  if (!ctx_.ok()) return;
  if (!fold_hit(x, nw, eps) || !same_shape(x, xn)) {
    Ops::norm_matmul_glu(x, nw, eps, xn, wg, wu, act, gate, up);
    return;
  }
  if (act == Activation::kSwigluOai || !glu_fusable(wg, wu, x, gate, up, stash_off_after(x, true, wg.ne[1]))) {
    // The folded norm's image still feeds the gate / up matvecs (no norm kernel); the glu kernel follows.
    const TensorView* ws[2] = {&wg, &wu};
    TensorView outs[2] = {gate, up};
    norm_matmul_many(x, nw, eps, xn, 2, ws, outs);
    glu(gate, up, act, gate);
    return;
  }
  matmul_glu_q8(wg, wu, x, act, gate, up, /*stashed=*/true, stash_part() + stash_.off / 32, eps);
}

void CudaOps::matmul_glu_q8(const TensorView& wg, const TensorView& wu, const TensorView& x, Activation act,
                            TensorView gate, TensorView up, bool stashed, const void* fold_part, float fold_eps) {
  const int64_t K = x.ne[0], F = wg.ne[1];
  check_matmul_shapes(wg, x, gate);
  check_matmul_shapes(wu, x, up);
  const int64_t off = stash_off_after(x, stashed, F);  // where gate's Q8 image goes
  FERRY_ASSERT(off >= 0);
  note_write(gate);
  int8_t* xq = nullptr;
  void* xds = nullptr;
  q8_of(x, 0, 1, stashed, &xq, &xds);
  const cu::MatvecLaunch launch = fold_launch(ctx_, options_, fold_part, K, fold_eps);
  int8_t* hq = stash_xq() + off;
  auto* hds = reinterpret_cast<float2*>(stash_xds() + off / 32 * sizeof(float2));
  check(cu::matvec_quant_glu(wg.dtype, glu_set(wg, wu, gate, up), K, xq, static_cast<const float2*>(xds),
                             act == Activation::kSilu ? 0 : 1, gate.ptr<float>(), hq, hds, launch, ctx_.stream()),
        "matmul_glu: matvec_quant_glu");
  stash_ = Q8Stash{static_cast<const char*>(gate.data), F, 1, off};
}

void CudaOps::expect_norm(const TensorView& x, const TensorView& nw, float eps) {
  hint_ = NormHint{x.data, nw.data, nw.ne[0], eps};
  if (nw.dtype != DType::F32) hint_ = {};
}

void CudaOps::matmul_acc(const TensorView& w, const TensorView& x, TensorView tmp, TensorView acc) {
  if (!ctx_.ok()) return;
  const NormHint hint = hint_;
  hint_ = {};
  if (!options_.fuse || x.ne[1] > options_.matvec_max_tokens || !use_v2(w, x) || !same_shape(tmp, acc)) {
    Ops::matmul_acc(w, x, tmp, acc);
    return;
  }
  note_write(acc);
  const int64_t N = w.ne[1];
  if (options_.matvec_norm_fold && hint.x == acc.data && hint.n == N && x.ne[1] == 1 && stash_bytes_ > 0 &&
      traits(w.dtype).quantized && stashable(acc)) {
    const bool stashed = stash_hit(x);
    const int64_t off = stash_off_after(x, stashed, N);
    const cu::MatvecSet set = one_matrix(w, acc.ptr<float>(), static_cast<int64_t>(acc.nb[1] / 4));
    const cu::MatvecLaunch launch = decode_launch(ctx_, options_);
    if (off >= 0 && cu::matvec_norm_fits(w.dtype, set, 1, launch)) {
      check_matmul_shapes(w, x, acc);
      int8_t* xq = nullptr;
      void* xds = nullptr;
      q8_of(x, 0, 1, stashed, &xq, &xds);
      check(cu::matvec_quant_norm(w.dtype, set, w.ne[0], xq, static_cast<const float2*>(xds),
                                  static_cast<const float*>(hint.w), stash_xq() + off,
                                  reinterpret_cast<float2*>(stash_xds() + off / 32 * sizeof(float2)),
                                  stash_part() + off / 32, launch, ctx_.stream()),
            "matmul_acc: matvec_quant_norm");
      stash_ = Q8Stash{static_cast<const char*>(acc.data), N, 1, off, hint.w, hint.eps};
      return;
    }
  }
  matmul_vec(w, x, acc, /*accumulate=*/true);
}

void CudaOps::matmul_gemm(const TensorView& w, const TensorView& x, TensorView out) {
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  check_matmul_shapes(w, x, out);
  cublasHandle_t h = ctx_.cublas();
  const float one = 1.f, zero = 0.f;
  const int ldc = static_cast<int>(out.nb[1] / 4);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;

  if (w.dtype == DType::F32) {
    st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T), static_cast<int>(K), &one,
                     w.ptr<const float>(), static_cast<int>(w.nb[1] / 4), x.ptr<const float>(),
                     static_cast<int>(x.nb[1] / 4), &zero, out.ptr<float>(), ldc);
    if (st != CUBLAS_STATUS_SUCCESS) ctx_.set_error(cublas_error(st, "matmul: cublasSgemm"));
    return;
  }
  if (w.dtype == DType::BF16 && ctx_.compute_capability() < 80) {
    matmul_vec(w, x, out);  // no BF16 tensor cores before Ampere
    return;
  }
  const bool bf16 = w.dtype == DType::BF16;
  const bool quant = traits(w.dtype).quantized;
  FERRY_ASSERT(w.dtype == DType::F16 || bf16 || quant);
  const cudaDataType_t ab_type = bf16 ? CUDA_R_16BF : CUDA_R_16F;

  // Token chunks: the activations in F16 take at most half the scratch.
  const uint64_t row16 = static_cast<uint64_t>(K) * 2;
  int64_t t_chunk = T;
  if (align256(static_cast<uint64_t>(T) * row16) > body_bytes() / 2) {
    t_chunk = std::max<int64_t>(1, static_cast<int64_t>((body_bytes() / 2) / row16) - 1);
  }
  for (int64_t t0 = 0; t0 < T; t0 += t_chunk) {
    const int64_t nt = std::min(t_chunk, T - t0);
    Scratch sc(ctx_.scratch(), body_bytes());
    void* x16 = sc.take(static_cast<uint64_t>(nt) * row16);
    check(cu::convert_activations(x.ptr<const float>() + t0 * (x.nb[1] / 4), static_cast<int64_t>(x.nb[1] / 4), K, nt,
                                  x16, bf16, ctx_.stream()),
          "matmul: convert_activations");
    float* out_t = out.ptr<float>() + t0 * ldc;
    if (!quant) {
      st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(nt), static_cast<int>(K),
                        &one, w.data, ab_type, static_cast<int>(w.nb[1] / 2), x16, ab_type, static_cast<int>(K), &zero,
                        out_t, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) ctx_.set_error(cublas_error(st, "matmul: cublasGemmEx"));
      continue;
    }
    int64_t chunk = static_cast<int64_t>(sc.left() / row16) / 128 * 128;
    chunk = std::min<int64_t>(chunk, options_.gemm_chunk_rows > 0 ? options_.gemm_chunk_rows : kDefaultChunkRows);
    FERRY_ASSERT_MSG(chunk >= 128 || chunk >= N, "CudaOps scratch too small for one chunk of 128 weight rows");
    chunk = std::min<int64_t>(std::max<int64_t>(chunk, 1), N);
    auto* w16 = static_cast<__half*>(sc.take(static_cast<uint64_t>(chunk) * row16));
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
      const int64_t nr = std::min(chunk, N - n0);
      check(cu::dequant_rows_f16(w.dtype, static_cast<const char*>(w.data) + n0 * static_cast<int64_t>(w.nb[1]),
                                 static_cast<int64_t>(w.nb[1]), K, nr, w16, ctx_.stream(),
                                 w.layout == Layout::kSplit),
            "matmul: dequant_rows_f16");
      st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(nt), static_cast<int>(K),
                        &one, w16, CUDA_R_16F, static_cast<int>(K), x16, CUDA_R_16F, static_cast<int>(K), &zero,
                        out_t + n0, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) {
        ctx_.set_error(cublas_error(st, "matmul: cublasGemmEx"));
        return;
      }
    }
  }
}

void CudaOps::add(const TensorView& a, const TensorView& b, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(a.dtype == DType::F32 && b.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(a, out));
  const bool bcast = b.ne[1] == 1 && b.ne[2] == 1 && b.ne[3] == 1 && a.nrows() > 1;
  FERRY_ASSERT(b.ne[0] == a.ne[0] && (bcast || same_shape(a, b)));
  check(cu::add(row_view(a), row_view(b), bcast, row_view(out), ctx_.stream()), "add");
}

void CudaOps::scale(const TensorView& x, float s, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(x, out));
  check(cu::scale(row_view(x), s, row_view(out), ctx_.stream()), "scale");
}

namespace {

cu::RopeArgs rope_args(const TensorView& x, const BatchMeta& batch, const RopeParams& p) {
  FERRY_ASSERT(x.dtype == DType::F32 && x.nb[0] == 4 && x.ne[3] == 1);
  FERRY_ASSERT(x.ne[2] == batch.n_tokens && batch.pos.dtype == DType::I32);
  FERRY_ASSERT(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= x.ne[0]);
  cu::RopeArgs a;
  a.x = static_cast<char*>(x.data);
  a.nb1 = static_cast<int64_t>(x.nb[1]);
  a.nb2 = static_cast<int64_t>(x.nb[2]);
  a.head_dim = static_cast<int32_t>(x.ne[0]);
  a.n_head = static_cast<int32_t>(x.ne[1]);
  a.n_tokens = static_cast<int32_t>(x.ne[2]);
  a.n_rot = p.n_rot;
  a.freq_base = p.freq_base;
  a.freq_scale = p.freq_scale;
  a.neox = p.neox;
  a.freq_factors = p.freq_factors.data ? p.freq_factors.ptr<const float>() : nullptr;
  a.ext_factor = p.ext_factor;
  a.attn_factor = p.attn_factor;
  rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, a.corr_dims);
  a.pos = batch.pos.ptr<const int32_t>();
  return a;
}

// The second tensor (k) rotated by the same launch as the first (q).
void rope_second(const TensorView& k, cu::RopeArgs* a) {
  a->x2 = static_cast<char*>(k.data);
  a->nb1_2 = static_cast<int64_t>(k.nb[1]);
  a->nb2_2 = static_cast<int64_t>(k.nb[2]);
  a->n_head2 = static_cast<int32_t>(k.ne[1]);
}

}  // namespace

void CudaOps::rope(TensorView x, const BatchMeta& batch, const RopeParams& p) {
  forget_stash();
  if (!ctx_.ok()) return;
  check(cu::rope(rope_args(x, batch, p), ctx_.stream()), "rope");
}

void CudaOps::rope_qk(TensorView q, TensorView k, const BatchMeta& batch, const RopeParams& p) {
  forget_stash();
  if (!ctx_.ok()) return;
  if (k.ne[0] != q.ne[0] || k.ne[2] != q.ne[2] || k.nb[0] != 4 || k.ne[3] != 1 || k.dtype != DType::F32) {
    rope(q, batch, p);
    rope(k, batch, p);
    return;
  }
  cu::RopeArgs a = rope_args(q, batch, p);
  rope_second(k, &a);
  check(cu::rope(a, ctx_.stream()), "rope_qk");
}

void CudaOps::kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(k.dtype == DType::F32 && v.dtype == DType::F32 && same_shape(k, v) && is_2d(k));
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16 && kv.k.ne[0] == k.ne[0] && kv.v.ne[0] == k.ne[0]);
  FERRY_ASSERT(k.ne[1] == batch.n_tokens && batch.cell.dtype == DType::I32 && kv.k.ne[1] == kv.v.ne[1]);
  check(cu::kv_store(row_view(k), row_view(v), batch.cell.ptr<const int32_t>(), k.ne[1], kv.k.ptr<__half>(),
                     kv.v.ptr<__half>(), static_cast<int64_t>(kv.k.nb[1]), static_cast<int64_t>(kv.v.nb[1]),
                     kv.k.ne[1], ctx_.stream()),
        "kv_store");
}

namespace {

// Whether one rope kernel can rotate q3 and k3 and store k / v in the cache (rope_store_args).
bool rope_store_fusable(const TensorView& q3, const TensorView& k3, const TensorView& k, const TensorView& v,
                        const BatchMeta& batch, const RopeParams& p, const KvView& kv) {
  return p.n_rot == q3.ne[0] && k3.ne[0] == q3.ne[0] && k3.ne[2] == q3.ne[2] &&
         k3.nb[0] == 4 && k3.nb[1] == static_cast<size_t>(k3.ne[0]) * 4 && k3.ne[3] == 1 &&
         k3.dtype == DType::F32 && k3.data == k.data &&
         k.dtype == DType::F32 && v.dtype == DType::F32 && same_shape(k, v) && is_2d(k) &&
         k.nb[0] == 4 && v.nb[0] == 4 && k.ne[0] == k3.ne[0] * k3.ne[1] &&
         static_cast<int64_t>(k3.nb[1]) * k3.ne[1] <= static_cast<int64_t>(k.nb[1]) &&
         k3.nb[2] == k.nb[1] && kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16 &&
         kv.k.ne[0] == k.ne[0] && kv.v.ne[0] == k.ne[0] && kv.k.ne[1] == kv.v.ne[1] &&
         k.ne[1] == batch.n_tokens && batch.cell.dtype == DType::I32;
}

cu::RopeArgs rope_store_args(const TensorView& q3, const TensorView& k3, const TensorView& k, const TensorView& v,
                             const BatchMeta& batch, const RopeParams& p, const KvView& kv) {
  cu::RopeArgs a = rope_args(q3, batch, p);
  rope_second(k3, &a);
  a.v = static_cast<const char*>(v.data);
  a.v_nb1 = static_cast<int64_t>(v.nb[1]);
  a.kv_dim = static_cast<int32_t>(k.ne[0]);
  a.cell = batch.cell.ptr<const int32_t>();
  a.k_cache = kv.k.ptr<__half>();
  a.v_cache = kv.v.ptr<__half>();
  a.k_cache_stride = static_cast<int64_t>(kv.k.nb[1]);
  a.v_cache_stride = static_cast<int64_t>(kv.v.nb[1]);
  a.n_cells = kv.k.ne[1];
  return a;
}

}  // namespace

void CudaOps::rope_qk_store(TensorView q3, TensorView k3, const TensorView& k, const TensorView& v,
                            const BatchMeta& batch, const RopeParams& p, KvView kv) {
  if (!ctx_.ok()) return;
  forget_stash();
  if (!options_.fuse || !rope_store_fusable(q3, k3, k, v, batch, p, kv)) {
    Ops::rope_qk_store(q3, k3, k, v, batch, p, kv);
    return;
  }
  cu::RopeArgs a = rope_store_args(q3, k3, k, v, batch, p, kv);
  if (!cu::ablated("rope")) check(cu::rope(a, ctx_.stream()), "rope_qk_store");
}

// One kernel for the q / k norms, the rotation and the cache store (else three, each a few blocks,
// latency-bound); options().qk_norm_fuse = false runs the three.
void CudaOps::qk_norm_rope_store(TensorView q3, TensorView k3, const TensorView& qn, const TensorView& kn, float eps,
                                 const TensorView& k, const TensorView& v, const BatchMeta& batch,
                                 const RopeParams& p, KvView kv) {
  if (!ctx_.ok()) return;
  auto vec_ok = [&](const TensorView& w) {
    return w.dtype == DType::F32 && w.ne[0] == q3.ne[0] && w.nb[0] == 4 && w.ne[1] == 1 && w.ne[2] == 1 &&
           w.ne[3] == 1;
  };
  // q3's type and contiguous heads are rope_args' preconditions (as for rope_qk_store); k3's are checked by
  // rope_store_fusable.
  if (options_.qk_norm_fuse && options_.fuse && vec_ok(qn) && vec_ok(kn) && rope_store_fusable(q3, k3, k, v, batch, p, kv)) {
    cu::RopeArgs a = rope_store_args(q3, k3, k, v, batch, p, kv);
    a.q_norm = qn.ptr<const float>();
    a.k_norm = kn.ptr<const float>();
    a.norm_eps = eps;
    if (cu::rope_norms_supported(a)) {
      forget_stash();
      if (!cu::ablated("rope")) check(cu::rope(a, ctx_.stream()), "qk_norm_rope_store");
      return;
    }
  }
  Ops::qk_norm_rope_store(q3, k3, qn, kn, eps, k, v, batch, p, kv);
}

void CudaOps::attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                        TensorView out) {
  const bool dec = batch.n_tokens == 1 && options_.attention_decode && kv.n_cells <= options_.attention_decode_max_cells;
  const int kernel = !options_.attention_mma ? 0 : dec ? 2 : 1;
  attention_path(q, kv, batch, p, out, kernel, batch.n_tokens == 1 ? options_.attention_decode_splits : 0);
}

void CudaOps::attention_path(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                             TensorView out, int kernel, int splits) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(q.dtype == DType::F32 && q.nb[0] == 4 && q.ne[0] == p.head_dim && q.ne[1] == p.n_head);
  FERRY_ASSERT(q.ne[2] == batch.n_tokens && out.dtype == DType::F32 && out.nb[0] == 4);
  FERRY_ASSERT(out.ne[0] == static_cast<int64_t>(p.head_dim) * p.n_head && out.ne[1] == batch.n_tokens);
  FERRY_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.head_dim <= 256);
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16);
  FERRY_ASSERT(kv.k.ne[0] == static_cast<int64_t>(p.head_dim) * p.n_kv_head && kv.n_cells <= kv.k.ne[1]);
  FERRY_ASSERT(kv.k.nb[1] % 16 == 0 && kv.v.nb[1] % 16 == 0);
  cu::AttnArgs a;
  a.q = q.ptr<const float>();
  a.q_nb1 = static_cast<int64_t>(q.nb[1]);
  a.q_nb2 = static_cast<int64_t>(q.nb[2]);
  a.k = kv.k.ptr<const __half>();
  a.v = kv.v.ptr<const __half>();
  a.k_stride = static_cast<int64_t>(kv.k.nb[1]);
  a.v_stride = static_cast<int64_t>(kv.v.nb[1]);
  a.cell_pos = kv.cell_pos.ptr<const int32_t>();
  a.cell_seq = kv.cell_seq.ptr<const int32_t>();
  a.pos = batch.pos.ptr<const int32_t>();
  a.seq = batch.seq.ptr<const int32_t>();
  a.n_cells = kv.n_cells;
  a.n_tokens = batch.n_tokens;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.window;
  if (p.sinks.data != nullptr) {
    FERRY_ASSERT(p.sinks.dtype == DType::F32 && p.sinks.ne[0] >= p.n_head);
    a.sinks = p.sinks.ptr<const float>();
  }
  a.out = out.ptr<float>();
  a.out_nb1 = static_cast<int64_t>(out.nb[1]);
  const bool stash = stashable(out);
  if (stash) {
    a.xq = stash_xq();
    a.xds = reinterpret_cast<float2*>(stash_xds());
  }
  bool quantized = cu::ablated("attn");  // timing only: the stash taken as if it had been written
  if (!quantized) {
    check(cu::attention(a, kernel, splits, ctx_.sm_count(), ctx_.max_smem_optin(), ctx_.scratch(),
                        static_cast<int64_t>(body_bytes()), ctx_.stream(), &quantized),
          "attention");
  }
  if (stash && quantized) stash_ = Q8Stash{static_cast<const char*>(out.data), out.ne[0], out.ne[1], 0};
}

void CudaOps::glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) {
  if (!ctx_.ok()) return;
  FERRY_ASSERT(gate.dtype == DType::F32 && up.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(same_shape(gate, up) && same_shape(gate, out));
  forget_stash();
  const bool stash = stashable(out);
  if (!cu::ablated("glu")) {
    check(cu::glu(row_view(gate), row_view(up), cu_act(act), row_view(out), ctx_.stream(),
                  stash ? stash_xq() : nullptr, stash ? reinterpret_cast<float2*>(stash_xds()) : nullptr),
          "glu");
  }
  if (stash) stash_ = Q8Stash{static_cast<const char*>(out.data), out.ne[0], out.ne[1], 0};
}

void CudaOps::gather_rows(const TensorView& x, const int32_t* rows, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(x.dtype == out.dtype && x.ne[0] == out.ne[0] && is_2d(x) && is_2d(out));
  FERRY_ASSERT(x.layout == out.layout);  // whole rows are copied, so split rows stay split
  for (int64_t i = 0; i < out.ne[1]; ++i) FERRY_ASSERT(rows[i] >= 0 && rows[i] < x.ne[1]);
  check(cu::gather_rows(x.data, static_cast<int64_t>(x.nb[1]), static_cast<int64_t>(x.row_size()), rows, out.ne[1],
                        out.data, static_cast<int64_t>(out.nb[1]), ctx_.stream()),
        "gather_rows");
}

void CudaOps::copy_to_host(const TensorView& src, void* dst, size_t bytes) {
  forget_stash();
  if (!ctx_.ok()) return;
  check(cudaMemcpyAsync(dst, src.data, bytes, cudaMemcpyDeviceToHost, ctx_.stream()), "copy_to_host");
  check(cudaStreamSynchronize(ctx_.stream()), "copy_to_host");
}

void CudaOps::copy_from_host(const void* src, TensorView dst, size_t bytes) {
  forget_stash();
  if (!ctx_.ok()) return;
  check(cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, ctx_.stream()), "copy_from_host");
  check(cudaStreamSynchronize(ctx_.stream()), "copy_from_host");
}

void CudaOps::argmax_rows(const TensorView& x, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::I32 && is_2d(x) && out.ne[0] == x.ne[1]);
  check(cu::argmax_rows(x.ptr<const float>(), static_cast<int64_t>(x.nb[1] / 4), x.ne[0], x.ne[1], out.ptr<int32_t>(),
                        ctx_.stream()),
        "argmax_rows");
}

}  // namespace ferry::kernels
