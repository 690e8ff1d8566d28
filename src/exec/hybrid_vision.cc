// HybridRunner, vision: one image through the vision tower under the language model's budget.
//
// The language model's resident weights and its ring leave the arena (release_residents; the KV cache,
// the norm vectors, the activations and the CudaOps scratch stay), and the tower runs in what they held:
// its activations in one block (model::vision_buffers), its norm / bias vectors in another, and its
// matrices streamed through a WeightRing of two slots on the copy stream, one ring item per step of the
// forward (the patch embedding, each block, the merger) from a pinned host copy made at the first
// image. Everything it took goes back before encode_image returns; the next run() uploads the resident
// weights again (restore_residents). So the arena never holds the tower and the language model's
// resident weights at once: the peak is the larger of the two, inside the one budget. When the tower's
// blocks do not fit in what the language model leaves, it runs on the CPU (VisionRun::note says so).
//
// Each image is copied once either way (nothing of the tower stays on the device between images), so
// two slots suffice: a step's copy overlaps the previous step's compute.
#include <algorithm>
#include <cstring>

#include "exec/device_arena.h"
#include "exec/hybrid_runner_impl.h"
#include "model/vision/vision_forward.h"

namespace ferry::exec::detail {

namespace {

// The tower's ring items in forward order: [0] the patch embedding, [1 .. n_layer] the blocks, then
// the merger; each item's matrices as pointers into `w` (so the same function binds host and device
// copies).
std::vector<std::vector<TensorView*>> vision_items(model::VisionWeights& w) {
  std::vector<std::vector<TensorView*>> items;
  items.push_back({&w.patch0, &w.patch1});
  for (model::VisionLayerWeights& L : w.layers) items.push_back({&L.q, &L.k, &L.v, &L.out, &L.gate, &L.up, &L.down});
  items.push_back({&w.mm0, &w.mm2});
  return items;
}

// The tower's F32 vectors that are present (norms and biases).
std::vector<TensorView*> vision_vectors(model::VisionWeights& w) {
  std::vector<TensorView*> v = {&w.post_ln, &w.post_ln_b, &w.mm0_b, &w.mm2_b};
  for (model::VisionLayerWeights& L : w.layers)
    for (TensorView* t : {&L.ln1, &L.ln1_b, &L.q_b, &L.k_b, &L.v_b, &L.out_b, &L.ln2, &L.ln2_b, &L.gate_b, &L.up_b,
                          &L.down_b})
      v.push_back(t);
  std::vector<TensorView*> out;
  for (TensorView* t : v)
    if (model::present(*t)) out.push_back(t);
  return out;
}

SlotLayout item_layout(const std::vector<TensorView*>& mats) {
  SlotLayout l;
  for (const TensorView* t : mats) {
    l.offset.push_back(l.bytes);
    l.layout.push_back(t->layout);
    l.bytes += align256(t->nbytes());
  }
  return l;
}

}  // namespace

Status HybridRunnerImpl::release_residents() {
  if (residents_out_) return Status::ok();
  FERRY_RETURN_IF_ERROR(device_->synchronize());  // prefetches into the ring included
  for (DeviceBuffer& b : resident_blocks_) device_->release(&b);
  ring_.reset();
  release_expert_cache();
  if (on_cuda_) {  // graphs hold the resident weights' and the ring's addresses
    cuda_ops_->drop_graphs();
    graphs_.clear();
  }
  residents_out_ = true;
  return Status::ok();
}

Status HybridRunnerImpl::restore_residents() {
  if (!residents_out_) return Status::ok();
  std::vector<char*> base;
  FERRY_RETURN_IF_ERROR(allocate_residents(&base));
  FERRY_RETURN_IF_ERROR(make_ring());
  FERRY_RETURN_IF_ERROR(restore_expert_cache());
  FERRY_ASSIGN_OR_RETURN(upload_stage_, device_->allocate_pinned(kUploadStageBytes));
  Status st = Status::ok();
  for (size_t i = 0; i < sublayers_.size() && st.is_ok(); ++i)
    if (base[i] != nullptr) st = upload_resident(i, base[i]);
  device_->release_pinned(&upload_stage_);
  FERRY_RETURN_IF_ERROR(st);
  residents_out_ = false;
  return Status::ok();
}

Status HybridRunnerImpl::pin_vision(const void* key, const std::vector<std::vector<const TensorView*>>& items,
                                    const std::vector<SlotLayout>& layouts, const std::vector<TensorView*>& vectors,
                                    uint64_t io_bytes) {
  if (vision_pinned_.io.bytes < io_bytes) {
    device_->release_pinned(&vision_pinned_.io);
    FERRY_ASSIGN_OR_RETURN(vision_pinned_.io, device_->allocate_pinned(io_bytes));
  }
  if (vision_pinned_.key == key && vision_pinned_.items.size() == items.size()) return Status::ok();
  for (HostBuffer& h : vision_pinned_.items) device_->release_pinned(&h);
  device_->release_pinned(&vision_pinned_.vectors);
  vision_pinned_.items.clear();
  vision_pinned_.key = nullptr;
  for (size_t j = 0; j < items.size(); ++j) {
    FERRY_ASSIGN_OR_RETURN(HostBuffer h, device_->allocate_pinned(std::max<uint64_t>(layouts[j].bytes, 1)));
    vision_pinned_.items.push_back(h);
    for (size_t m = 0; m < items[j].size(); ++m)
      gather_rows(*items[j][m], 0, items[j][m]->nrows(), static_cast<char*>(h.ptr) + layouts[j].offset[m]);
  }
  uint64_t vbytes = 0;
  for (const TensorView* t : vectors) vbytes += align256(t->nbytes());
  FERRY_ASSIGN_OR_RETURN(vision_pinned_.vectors, device_->allocate_pinned(std::max<uint64_t>(vbytes, 1)));
  uint64_t off = 0;
  for (const TensorView* t : vectors) {
    std::memcpy(static_cast<char*>(vision_pinned_.vectors.ptr) + off, t->data, t->nbytes());
    off += align256(t->nbytes());
  }
  vision_pinned_.key = key;
  return Status::ok();
}

Expected<std::vector<float>> HybridRunnerImpl::encode_image(const model::VisionSpec& spec,
                                                            const model::VisionWeights& w,
                                                            const model::VisionInput& in, VisionRun* run) {
  const double t0 = now_ms();
  VisionRun r;
  r.where = on_cuda_ ? "cuda" : "emulated";
  const int64_t n = in.n_patches;
  const int64_t n_windows = static_cast<int64_t>(in.windows.size()) - 1;
  FERRY_ASSERT(n > 0 && n % 4 == 0 && n_windows >= 1 && static_cast<int64_t>(in.patches.size()) == spec.patch_elems() * n);
  FERRY_ASSERT(static_cast<int32_t>(w.layers.size()) == spec.n_layer);

  model::VisionWeights hw = w;  // host views; the device copy below rebinds its own
  std::vector<std::vector<TensorView*>> items = vision_items(hw);
  std::vector<SlotLayout> layouts;
  std::vector<std::vector<const TensorView*>> host_items;
  uint64_t slot_bytes = 0;
  for (const auto& it : items) {
    layouts.push_back(item_layout(it));
    host_items.emplace_back(it.begin(), it.end());
    slot_bytes = std::max(slot_bytes, layouts.back().bytes);
  }
  std::vector<TensorView*> vectors = vision_vectors(hw);
  uint64_t vector_bytes = 0;
  for (const TensorView* t : vectors) vector_bytes += align256(t->nbytes());
  const uint64_t act_bytes = model::vision_buffer_bytes(spec, n, n_windows);

  FERRY_RETURN_IF_ERROR(release_residents());
  // The encoder's blocks; any that does not fit sends the image to the CPU.
  DeviceBuffer act, vec;
  std::unique_ptr<WeightRing> ring;
  Status fit = Status::ok();
  {
    auto a = device_->allocate(act_bytes, "vision activations");
    if (a) act = *a;
    else fit = a.status();
  }
  if (fit.is_ok()) {
    auto v = device_->allocate(std::max<uint64_t>(vector_bytes, 1), "vision vectors");
    if (v) vec = *v;
    else fit = v.status();
  }
  if (fit.is_ok()) {
    auto rg = WeightRing::create(*device_, 2, slot_bytes);
    if (rg) ring = std::move(*rg);
    else fit = rg.status();
  }
  if (!fit.is_ok()) {
    device_->release(&act);
    device_->release(&vec);
    if (fit.code() != ErrorCode::kOutOfMemory) return fit;
    r.where = "cpu";
    r.note = "the vision tower needs " + format_bytes(act_bytes + vector_bytes + 2 * slot_bytes) +
             " of device memory (activations " + format_bytes(act_bytes) + ", two weight slots of " +
             format_bytes(slot_bytes) + ") beside the language model's KV cache and scratch; it runs on the CPU";
    FERRY_ASSIGN_OR_RETURN(std::vector<float> out, model::encode_image(*cpu_ops_, spec, w, in));
    r.ms = now_ms() - t0;
    if (run != nullptr) *run = r;
    return out;
  }
  r.device_bytes = align256(act_bytes) + align256(vector_bytes) + align256(2 * slot_bytes);

  // Host side, pinned: the tower's items and vectors (once per tower), this image's inputs and output.
  const model::VisionBuffers b = model::vision_buffers(spec, n, n_windows, act.ptr, device_where_);
  const model::VisionConstants c = model::vision_constants(spec, b);
  const uint64_t out_bytes = static_cast<uint64_t>(spec.proj_dim) * static_cast<uint64_t>(n / 4) * sizeof(float);
  const uint64_t in_bytes = align256(in.patches.size() * 4) + align256(in.pos.size() * 4) +
                            align256(in.windows.size() * 4) + align256(c.whole.size() * 4) + align256(c.ones.size() * 4);
  Status st = pin_vision(host_items[0][0]->data, host_items, layouts, vectors, std::max(in_bytes, out_bytes));

  // Inputs and vectors, in compute-stream order before the first step.
  char* io = static_cast<char*>(vision_pinned_.io.ptr);
  uint64_t io_off = 0;
  auto up = [&](const TensorView& dst, const void* src, uint64_t bytes) {
    std::memcpy(io + io_off, src, bytes);
    if (st.is_ok()) st = device_->copy_h2d(dst.data, io + io_off, bytes, *compute_stream_);
    io_off += align256(bytes);
  };
  if (st.is_ok()) {
    up(b.patches, in.patches.data(), in.patches.size() * sizeof(float));
    up(b.pos, in.pos.data(), in.pos.size() * sizeof(int32_t));
    up(b.windows, in.windows.data(), in.windows.size() * sizeof(int32_t));
    up(b.whole, c.whole.data(), c.whole.size() * sizeof(int32_t));
    up(b.ones, c.ones.data(), c.ones.size() * sizeof(float));
  }
  if (st.is_ok()) st = device_->copy_h2d(vec.ptr, vision_pinned_.vectors.ptr, vector_bytes, *compute_stream_);
  model::VisionWeights dw = w;
  {
    std::vector<TensorView*> dvec = vision_vectors(dw);
    uint64_t off = 0;
    for (TensorView* t : dvec) {
      t->data = static_cast<char*>(vec.ptr) + off;
      t->where = device_where_;
      off += align256(t->nbytes());
    }
  }

  // The steps, each on its item's ring slot; the copy stream keeps one item ahead.
  const size_t m = items.size();
  auto fill = [&](size_t j) {
    if (st.is_ok() && j < m)
      st = ring->fill(static_cast<int32_t>(j % 2), static_cast<int32_t>(j), vision_pinned_.items[j].ptr,
                      layouts[j].bytes, *copy_stream_);
    if (st.is_ok() && j < m) r.copied_bytes += layouts[j].bytes;
  };
  fill(0);
  fill(1);
  const model::VisionSpec* sp = &spec;
  for (size_t j = 0; j < m && st.is_ok(); ++j) {
    const int32_t slot = static_cast<int32_t>(j % 2);
    st = ring->acquire(slot, *compute_stream_);
    if (!st.is_ok()) break;
    // The item's matrices bound to the slot, in a copy the step owns (the emulated device runs it later).
    model::VisionWeights bound = dw;
    std::vector<std::vector<TensorView*>> bitems = vision_items(bound);
    char* base = static_cast<char*>(ring->slot_ptr(slot));
    for (size_t k = 0; k < bitems[j].size(); ++k) {
      bitems[j][k]->data = base + layouts[j].offset[k];
      bitems[j][k]->where = device_where_;
    }
    if (j == 0) {
      st = on_device([sp, bound, b](kernels::Ops& ops) { model::vision_patch_embed(ops, *sp, bound, b); });
    } else if (j < m - 1) {
      const int32_t il = static_cast<int32_t>(j - 1);
      const model::VisionLayerWeights L = bound.layers[static_cast<size_t>(il)];
      st = on_device([sp, L, il, b](kernels::Ops& ops) { model::vision_block(ops, *sp, L, il, b); });
    } else {
      st = on_device([sp, bound, b](kernels::Ops& ops) { (void)model::vision_merger(ops, *sp, bound, b); });
    }
    if (st.is_ok()) st = ring->release(slot, *compute_stream_);
    fill(j + 2);
  }

  // The embeddings (encoder order, in v's memory: vision_merger) back to the host.
  std::vector<float> enc(static_cast<size_t>(spec.proj_dim) * static_cast<size_t>(n / 4));
  if (st.is_ok()) st = device_->copy_d2h(io, b.v.data, out_bytes, *compute_stream_);
  if (st.is_ok()) st = device_->sync(*compute_stream_);
  if (st.is_ok()) std::memcpy(enc.data(), io, out_bytes);
  if (st.is_ok() && on_cuda_) st = cuda_ops_->status();
  (void)device_->synchronize();  // nothing may still read the blocks below
  ring.reset();
  device_->release(&act);
  device_->release(&vec);
  FERRY_RETURN_IF_ERROR(st);
  std::vector<float> out = model::vision_raster(spec, in, enc.data());
  r.ms = now_ms() - t0;
  if (run != nullptr) *run = r;
  return out;
}

}  // namespace ferry::exec::detail
