// Helpers for the CUDA tests and benchmarks (see cuda_test_util.h).
#include "kernels/cuda/cuda_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tensor/quant.h"
#include "tensor/repack.h"

namespace ferry::cudatest {

Env::~Env() {
  ops.reset();
  ctx.reset();
  if (dev) {
    (void)dev->synchronize();
    dev->release(&scratch);
    dev->release(&workspace);
  }
  stream.reset();
}

Status Env::sync() {
  Status st = dev->sync(*stream);
  if (!ctx->ok()) {
    st = ctx->status();
    ctx->clear_status();
  }
  if (!st.is_ok()) std::fprintf(stderr, "CUDA error: %s\n", st.message().c_str());
  return st;
}

Env* env(std::string* why, uint64_t budget, const kernels::CudaScratchShape& shape) {
  static Env* e = nullptr;
  static std::string reason;
  static bool tried = false;
  if (tried) {
    if (!e && why) *why = reason;
    return e;
  }
  tried = true;
  if (!exec::cuda_available(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  auto dev = exec::make_cuda_device(0, budget);
  if (!dev) {
    reason = dev.status().message();
    if (why) *why = reason;
    return nullptr;
  }
  auto* n = new Env();
  n->dev = std::move(dev).value();
  n->stream = std::move(n->dev->create_stream()).value();
  n->scratch = std::move(n->dev->allocate(kernels::CudaOps::scratch_bytes(shape), "scratch")).value();
  n->workspace = std::move(n->dev->allocate(kernels::kCublasWorkspaceBytes, "cublas")).value();
  kernels::CudaContextDesc d;
  d.device = 0;
  d.stream = static_cast<CUstream_st*>(n->stream->native_handle());
  d.scratch = n->scratch.ptr;
  d.scratch_bytes = n->scratch.bytes;
  d.cublas_workspace = n->workspace.ptr;
  d.cublas_workspace_bytes = n->workspace.bytes;
  auto ctx = kernels::CudaContext::create(d);
  if (!ctx) {
    reason = ctx.status().message();
    if (why) *why = reason;
    delete n;
    return nullptr;
  }
  n->ctx = std::move(ctx).value();
  n->ops = std::make_unique<kernels::CudaOps>(*n->ctx);
  e = n;
  return e;
}

HostTensor::HostTensor(DType t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
  view = TensorView::make(t, nullptr, ne0, ne1, ne2, ne3);
  bytes.assign(view.nbytes(), 0);
  view.data = bytes.data();
}

DevTensor::DevTensor(Env& e, const HostTensor& h, bool up) : env_(e) {
  buf_ = std::move(e.dev->allocate(h.view.nbytes(), "test")).value();
  view = h.view;
  view.data = buf_.ptr;
  view.where = Where::kDevice;
  if (up) upload(h);
}

DevTensor::DevTensor(Env& e, DType t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) : env_(e) {
  view = TensorView::make(t, nullptr, ne0, ne1, ne2, ne3, Where::kDevice);
  buf_ = std::move(e.dev->allocate(view.nbytes(), "test")).value();
  view.data = buf_.ptr;
}

DevTensor::~DevTensor() {
  (void)env_.sync();
  env_.dev->release(&buf_);
}

void DevTensor::upload(const HostTensor& h) {
  FERRY_ASSERT(h.view.nbytes() == view.nbytes());
  FERRY_ASSERT(env_.dev->copy_h2d(view.data, h.bytes.data(), h.view.nbytes(), *env_.stream).is_ok());
  (void)env_.sync();
}

void DevTensor::download(HostTensor* h) {
  FERRY_ASSERT(h->view.nbytes() == view.nbytes());
  FERRY_ASSERT(env_.dev->copy_d2h(h->bytes.data(), view.data, view.nbytes(), *env_.stream).is_ok());
  (void)env_.sync();
}

HostTensor DevTensor::download() {
  HostTensor h(view.dtype, view.ne[0], view.ne[1], view.ne[2], view.ne[3]);
  download(&h);
  return h;
}

void DevTensor::poison() {
  FERRY_ASSERT(env_.dev->memset(view.data, 0xff, view.nbytes(), *env_.stream).is_ok());
}

void fill_uniform(std::mt19937& rng, float* x, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) x[i] = u(rng);
}

HostTensor random_weights(std::mt19937& rng, DType t, int64_t K, int64_t N) {
  HostTensor w(t, K, N);
  std::vector<float> row(K);
  std::normal_distribution<float> nd(0.f, 0.5f);
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = nd(rng);
    quantize_row(t, row.data(), w.view.row(n), K);
  }
  return w;
}

HostTensor to_split(const HostTensor& w) {
  HostTensor s(w.view.dtype, w.view.ne[0], w.view.ne[1], w.view.ne[2], w.view.ne[3]);
  repack_to_split(w.view.dtype, w.view.ne[0], w.view.nrows(), w.bytes.data(), s.bytes.data());
  s.view.layout = Layout::kSplit;
  return s;
}

ErrStats compare(const float* got, const float* ref, int64_t n) {
  ErrStats s;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) {
      ++s.non_finite;
      continue;
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    s.max_abs = std::max(s.max_abs, std::fabs(d));
    s.ref_max = std::max(s.ref_max, std::fabs(static_cast<double>(ref[i])));
  }
  s.nrmse = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

std::string describe(const ErrStats& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "nrmse %.3g, max |err| %.3g (max |ref| %.3g), non-finite %lld", s.nrmse, s.max_abs,
                s.ref_max, static_cast<long long>(s.non_finite));
  return buf;
}

}  // namespace ferry::cudatest
