// CudaOps' vision-language ops (ops.h): rope_multi and attention_segments, shape checks then the
// launchers of vision.cu. Every view, bounds and positions included, is device memory.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch.h"

namespace ferry::kernels {

namespace cu = ferry::kernels::cuda;

void CudaOps::rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) {
  forget_stash();
  if (!ctx_.ok()) return;
  FERRY_ASSERT(x.dtype == DType::F32 && x.nb[0] == 4 && x.ne[3] == 1);
  FERRY_ASSERT(pos.dtype == DType::I32 && pos.ne[0] == 4 * x.ne[2] && p.n_rot > 0 && p.n_rot % 2 == 0);
  FERRY_ASSERT(p.vision ? x.ne[0] == 2 * p.n_rot : p.n_rot <= x.ne[0]);
  FERRY_ASSERT(p.freq_factors.data == nullptr || p.freq_factors.dtype == DType::F32);
  note_write(x);
  cu::RopeMultiArgs a;
  a.x = static_cast<char*>(x.data);
  a.nb1 = static_cast<int64_t>(x.nb[1]);
  a.nb2 = static_cast<int64_t>(x.nb[2]);
  a.head_dim = static_cast<int32_t>(x.ne[0]);
  a.n_head = static_cast<int32_t>(x.ne[1]);
  a.n_tokens = static_cast<int32_t>(x.ne[2]);
  a.n_rot = p.n_rot;
  a.freq_base = p.freq_base;
  a.freq_scale = p.freq_scale;
  a.freq_factors = p.freq_factors.data ? p.freq_factors.ptr<const float>() : nullptr;
  a.pos = pos.ptr<const int32_t>();
  for (int i = 0; i < 4; ++i) a.sections[i] = p.sections[i];
  a.vision = p.vision;
  check(cu::rope_multi(a, ctx_.stream()), "rope_multi");
}

void CudaOps::attention_segments(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& bounds, float scale, TensorView out) {
  forget_stash();
  if (!ctx_.ok()) return;
  const int64_t hd = q.ne[0], n_head = q.ne[1], n = q.ne[2], n_kv = k.ne[1];
  FERRY_ASSERT(q.dtype == DType::F32 && k.dtype == DType::F32 && v.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(k.ne[0] == hd && v.ne[0] == hd && v.ne[1] == n_kv && k.ne[2] == n && v.ne[2] == n);
  FERRY_ASSERT(n_kv > 0 && n_head % n_kv == 0 && out.ne[0] == hd * n_head && out.ne[1] == n && out.nb[0] == 4);
  FERRY_ASSERT(q.nb[0] == 4 && k.nb[0] == 4 && v.nb[0] == 4 && hd <= cu::kSegMaxHeadDim);
  FERRY_ASSERT(bounds.dtype == DType::I32 && bounds.ne[0] >= 2);
  note_write(out);
  cu::SegAttnArgs a;
  a.q = q.ptr<const float>();
  a.q_nb1 = static_cast<int64_t>(q.nb[1]);
  a.q_nb2 = static_cast<int64_t>(q.nb[2]);
  a.k = k.ptr<const float>();
  a.k_nb1 = static_cast<int64_t>(k.nb[1]);
  a.k_nb2 = static_cast<int64_t>(k.nb[2]);
  a.v = v.ptr<const float>();
  a.v_nb1 = static_cast<int64_t>(v.nb[1]);
  a.v_nb2 = static_cast<int64_t>(v.nb[2]);
  a.bounds = bounds.ptr<const int32_t>();
  a.n_seg = static_cast<int32_t>(bounds.ne[0] - 1);
  a.n_tokens = static_cast<int32_t>(n);
  a.n_head = static_cast<int32_t>(n_head);
  a.n_kv_head = static_cast<int32_t>(n_kv);
  a.head_dim = static_cast<int32_t>(hd);
  a.scale = scale;
  a.out = out.ptr<float>();
  a.out_nb1 = static_cast<int64_t>(out.nb[1]);
  check(cu::attention_segments(a, ctx_.stream()), "attention_segments");
}

}  // namespace ferry::kernels
