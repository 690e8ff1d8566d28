// HybridRunner, weights in residence: the layout of each sub-layer's matrices (in a resident block, a
// ring slot or a pinned copy), the uploads at load (resident matrices through pinned staging, repacked
// to the split layout on the way where the CUDA decode kernels read it), and the host side of streamed
// weights: copied once into pinned memory in slot layout (several threads; one copy per fill), or the
// model's mmap page-locked in place (one copy per matrix per fill, no second host copy).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/cpu_info.h"
#include "base/thread_pool.h"
#include "exec/hybrid_runner_impl.h"
#include "tensor/repack.h"

namespace ferry::exec {

const char* pin_mode_name(PinMode mode) {
  switch (mode) {
    case PinMode::kAuto: return "auto";
    case PinMode::kCopy: return "copy";
    case PinMode::kRegister: return "register";
  }
  return "unknown";
}

namespace detail {

using model::SubLayerKind;

namespace {

uintptr_t page_size() {
  const long ps = sysconf(_SC_PAGESIZE);
  return static_cast<uintptr_t>(ps > 0 ? ps : 4096);
}

// Register mode: page ranges that merely touch are joined up to this size (fewer driver calls), larger
// ones stay apart so several threads pin them at once.
constexpr uint64_t kRegisterChunk = 256ull << 20;

}  // namespace

void write_rows(const TensorView& src, int64_t r0, int64_t nr, ferry::Layout to, char* dst,
                std::vector<char>* gathered) {
  if (to == src.layout) {
    gather_rows(src, r0, nr, dst);
    return;
  }
  const char* rows = static_cast<const char*>(src.row(r0));
  if (src.nb[1] != src.row_size()) {
    gathered->resize(src.row_size() * static_cast<size_t>(nr));
    gather_rows(src, r0, nr, gathered->data());
    rows = gathered->data();
  }
  repack_to_split(src.dtype, src.ne[0], nr, rows, dst);
}

namespace {

SlotLayout layout_of(const std::vector<TensorView*>& mats, bool split) {
  SlotLayout l;
  for (const TensorView* t : mats) {
    l.offset.push_back(l.bytes);
    l.layout.push_back(split && t->layout == ferry::Layout::kGgml && split_layout_supported(t->dtype, t->ne[0])
                           ? ferry::Layout::kSplit
                           : t->layout);
    l.bytes += align256(t->nbytes());
  }
  return l;
}

}  // namespace

std::vector<TensorView*> matrices_of(model::ModelWeights& w, const model::SubLayer& s) {
  switch (s.kind) {
    case SubLayerKind::kEmbed: return {&w.token_embd};
    case SubLayerKind::kHead: return {&w.output};
    case SubLayerKind::kAttention: {
      model::LayerWeights& l = w.layers[s.layer];
      return {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output};
    }
    case SubLayerKind::kFfn: {
      model::LayerWeights& l = w.layers[s.layer];
      return {&l.ffn_gate, &l.ffn_up, &l.ffn_down};
    }
    case SubLayerKind::kMoeRouter: return {&w.layers[s.layer].ffn_gate_inp};
    default: return {};  // expert groups: views of their own (HybridRunnerImpl::host_mats)
  }
}

void gather_rows(const TensorView& t, int64_t r0, int64_t rows, char* dst) {
  const size_t row = t.row_size();
  if (t.nb[1] == row) {
    std::memcpy(dst, t.row(r0), row * static_cast<size_t>(rows));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * row, t.row(r0 + r), row);
}

std::vector<TensorView*> vectors_of(model::ModelWeights& w) {
  std::vector<TensorView*> v = {&w.output_norm, &w.rope_freqs};
  for (model::LayerWeights& l : w.layers)
    for (TensorView* t : {&l.attn_norm, &l.attn_q_bias, &l.attn_k_bias, &l.attn_v_bias, &l.attn_output_bias,
                          &l.attn_q_norm, &l.attn_k_norm, &l.post_attention_norm, &l.ffn_norm, &l.post_ffw_norm,
                          &l.attn_sinks, &l.ffn_gate_inp_bias, &l.ffn_gate_exps_bias, &l.ffn_up_exps_bias,
                          &l.ffn_down_exps_bias})
      v.push_back(t);
  std::vector<TensorView*> out;
  for (TensorView* t : v)
    if (model::present(*t)) out.push_back(t);
  return out;
}

std::vector<TensorView*> HybridRunnerImpl::host_mats(model::ModelWeights& hw, size_t i) {
  if (sublayers_[i].kind == SubLayerKind::kExperts) {
    kernels::ExpertGroup& g = host_groups_[i];
    return {&g.gate, &g.up, &g.down};
  }
  if (!model::is_ffn_slice(sublayers_[i])) return matrices_of(hw, sublayers_[i]);
  model::FfnSlice& v = host_slices_[i];
  return {&v.gate, &v.up, &v.down};
}

std::vector<TensorView*> HybridRunnerImpl::device_mats(size_t i) {
  if (sublayers_[i].kind == SubLayerKind::kExperts) {
    kernels::ExpertGroup& g = device_groups_[i];
    return {&g.gate, &g.up, &g.down};
  }
  if (!model::is_ffn_slice(sublayers_[i])) return matrices_of(device_weights_, sublayers_[i]);
  model::FfnSlice& v = device_slices_[i];
  return {&v.gate, &v.up, &v.down};
}

void HybridRunnerImpl::bind(size_t i, char* base) {
  std::vector<TensorView*> mats = device_mats(i);
  for (size_t k = 0; k < mats.size(); ++k) {
    mats[k]->data = base + slot_layouts_[i].offset[k];
    mats[k]->where = device_where_;
    mats[k]->layout = slot_layouts_[i].layout[k];
  }
}

void HybridRunnerImpl::make_slot_layouts() {
  model::ModelWeights probe = host_weights_;
  slot_layouts_.resize(sublayers_.size());
  for (size_t i = 0; i < sublayers_.size(); ++i)
    slot_layouts_[i] = layout_of(host_mats(probe, i), on_cuda_ && options_.split_layout);
}

// Host memory (pageable, e.g. the mmap) -> device, through two pinned staging halves: the host
// fills one half while the copy engine drains the other.
Status HybridRunnerImpl::upload(void* dst, const void* src, uint64_t bytes) {
  const uint64_t half = upload_stage_.bytes / 2;
  char* stage = static_cast<char*>(upload_stage_.ptr);
  for (uint64_t off = 0, c = 0; off < bytes; off += half, ++c) {
    const uint64_t n = std::min(half, bytes - off);
    const size_t part = c % 2;
    FERRY_RETURN_IF_ERROR(device_->sync(*stage_half_free_[part]));  // the copy that last read this half is done
    std::memcpy(stage + part * half, static_cast<const char*>(src) + off, n);
    FERRY_RETURN_IF_ERROR(device_->copy_h2d(static_cast<char*>(dst) + off, stage + part * half, n, *copy_stream_));
    FERRY_RETURN_IF_ERROR(device_->record(*stage_half_free_[part], *copy_stream_));
  }
  return device_->sync(*copy_stream_);
}

Status HybridRunnerImpl::upload_matrix(void* dst, const TensorView& src, ferry::Layout to) {
  if (to == src.layout && src.nb[1] == src.row_size()) return upload(dst, src.data, src.nbytes());
  const uint64_t half = upload_stage_.bytes / 2;
  const uint64_t row = src.row_size();
  const int64_t rows_per = std::max<int64_t>(1, static_cast<int64_t>(half / row));
  FERRY_ASSERT(static_cast<uint64_t>(rows_per) * row <= half);
  char* stage = static_cast<char*>(upload_stage_.ptr);
  const int64_t rows = src.nrows();
  std::vector<char> gathered;  // a strided source's rows, back to back, before the repack
  for (int64_t r0 = 0, c = 0; r0 < rows; r0 += rows_per, ++c) {
    const int64_t nr = std::min(rows_per, rows - r0);
    const size_t part = c % 2;
    FERRY_RETURN_IF_ERROR(device_->sync(*stage_half_free_[part]));
    write_rows(src, r0, nr, to, stage + part * half, &gathered);
    FERRY_RETURN_IF_ERROR(
        device_->copy_h2d(static_cast<char*>(dst) + r0 * row, stage + part * half, nr * row, *copy_stream_));
    FERRY_RETURN_IF_ERROR(device_->record(*stage_half_free_[part], *copy_stream_));
  }
  return device_->sync(*copy_stream_);
}

Status HybridRunnerImpl::upload_resident(size_t i, char* base) {
  model::ModelWeights hw = host_weights_;
  std::vector<TensorView*> src = host_mats(hw, i);
  Status st = Status::ok();
  for (size_t k = 0; k < src.size() && st.is_ok(); ++k)
    st = upload_matrix(base + slot_layouts_[i].offset[k], *src[k], slot_layouts_[i].layout[k]);
  bind(i, base);
  // Nothing on the host reads a resident matrix again (a vision run's restore uploads it once more).
  const uint64_t released = release_mmap_pages(hw, i);
  if (!residents_out_) pin_stats_.released_bytes += released;
  return st;
}

Status HybridRunnerImpl::upload_at_load(const LoadBlocks& blocks) {
  Status st = device_->memset(blocks.kv.ptr, 0, blocks.kv.bytes, *copy_stream_);
  for (auto& [t, dst] : blocks.vectors) {
    if (st.is_ok()) st = upload(dst, t->data, t->nbytes());
    t->data = dst;
    t->where = device_where_;
  }
  bind_expert_biases();
  for (size_t i = 0; i < sublayers_.size() && st.is_ok(); ++i)
    if (blocks.resident_base[i]) st = upload_resident(i, blocks.resident_base[i]);
  device_->release_pinned(&upload_stage_);
  return st;
}

std::vector<size_t> HybridRunnerImpl::streamed_any() const {
  std::vector<uint8_t> seen(sublayers_.size(), 0);
  for (const auto& tier : streamed_by_tier_)
    for (size_t i : tier) seen[i] = 1;
  std::vector<size_t> out;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) out.push_back(i);
  return out;
}

int32_t HybridRunnerImpl::pin_threads(size_t items) const {
  const int32_t want = options_.pin_threads > 0 ? options_.pin_threads : std::max(1, cpu_info().physical_cores);
  return static_cast<int32_t>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(want), items)));
}

bool HybridRunnerImpl::cpu_any(size_t i) const {
  for (const auto& tier : placements_)
    if (tier[i] == plan::Placement::kCpu) return true;
  return false;
}

std::vector<size_t> HybridRunnerImpl::register_streamed(const std::vector<size_t>& items) {
  if (items.empty()) return {};
  const double t0 = now_ms();
  const uintptr_t page = page_size();
  model::ModelWeights hw = host_weights_;
  // Whole pages of every streamed matrix, merged where they overlap (a page shared by two matrices
  // can be registered once only) and, up to kRegisterChunk, where they touch. The gaps between
  // matrices (norm vectors, other tensors) are never registered, so no range crosses a hole between
  // two mappings (split files).
  struct Range {
    uintptr_t lo, hi;
  };
  for (size_t i : items)
    if (model::is_ffn_slice(sublayers_[i])) {
      // A slice's columns of ffn_down are not contiguous in the file: one copy per matrix cannot move them.
      pin_stats_.note = "FFN slices are streamed: their weights are copied into pinned memory, not registered in place";
      pin_stats_.seconds += (now_ms() - t0) / 1e3;
      return items;
    }
  std::vector<Range> spans;
  for (size_t i : items)
    for (const TensorView* t : host_mats(hw, i)) {
      if (t->nbytes() == 0) continue;
      const uintptr_t a = reinterpret_cast<uintptr_t>(t->data);
      spans.push_back({a / page * page, (a + t->nbytes() + page - 1) / page * page});
    }
  std::sort(spans.begin(), spans.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> ranges;
  for (const Range& r : spans) {
    if (!ranges.empty() && (r.lo < ranges.back().hi ||
                            (r.lo == ranges.back().hi && ranges.back().hi - ranges.back().lo < kRegisterChunk)))
      ranges.back().hi = std::max(ranges.back().hi, r.hi);
    else
      ranges.push_back(r);
  }
  // Largest first, so the threads finish together.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.hi - a.lo > b.hi - b.lo; });
  std::vector<HostBuffer> got(ranges.size());
  std::vector<double> took(ranges.size(), 0.0);
  const Status st = parallel_items(ranges.size(), pin_threads(ranges.size()), [&](size_t r) -> Status {
    const double a = now_ms();
    FERRY_ASSIGN_OR_RETURN(got[r],
                           device_->register_host(reinterpret_cast<void*>(ranges[r].lo), ranges[r].hi - ranges[r].lo));
    took[r] = (now_ms() - a) / 1e3;
    return Status::ok();
  });
  if (!st.is_ok()) {
    for (HostBuffer& h : got) device_->unregister_host(&h);
    pin_stats_.note = "registering the model mmap failed (" + st.message() + "); streamed weights are copied instead";
    pin_stats_.seconds += (now_ms() - t0) / 1e3;  // copy_streamed adds its own time
    return items;
  }
  for (double s : took) pin_stats_.alloc_s += s;
  pin_stats_.threads = std::max(pin_stats_.threads, pin_threads(ranges.size()));
  pin_stats_.ranges += static_cast<int32_t>(got.size());
  pin_stats_.registered_ranges += static_cast<int32_t>(got.size());
  for (const HostBuffer& h : got) {
    pin_stats_.bytes += h.bytes;
    pin_stats_.registered_bytes += h.bytes;
  }
  registered_ranges_ = std::move(got);
  for (size_t i : items) {
    // The mmap is read-only and copied as it is: streamed matrices keep the file's (ggml) layout even
    // with split_layout; only resident ones (uploaded through staging) are repacked.
    std::vector<TensorView*> mats = host_mats(hw, i);
    slot_layouts_[i] = layout_of(mats, false);
    for (size_t k = 0; k < mats.size(); ++k)
      if (mats[k]->nbytes() > 0)
        fill_pieces_[i].push_back({slot_layouts_[i].offset[k], mats[k]->data, mats[k]->nbytes()});
  }
  pin_stats_.seconds += (now_ms() - t0) / 1e3;
  return {};
}

std::vector<size_t> HybridRunnerImpl::register_as_asked() {
  const std::vector<size_t> streamed = streamed_any();
  if (options_.pin_mode == PinMode::kCopy) return streamed;
  std::vector<size_t> reg, copy;
  for (size_t i : streamed) (options_.pin_mode == PinMode::kRegister || cpu_any(i) ? reg : copy).push_back(i);
  const std::vector<size_t> refused = register_streamed(reg);
  copy.insert(copy.end(), refused.begin(), refused.end());
  std::sort(copy.begin(), copy.end());
  return copy;
}

uint64_t HybridRunnerImpl::release_mmap_pages(model::ModelWeights& hw, size_t i) {
  if (cpu_any(i)) return 0;  // the CPU reads them from the mapping
  const uintptr_t page = page_size();
  uint64_t released = 0;
  for (const TensorView* t : host_mats(hw, i)) {
    if (t->nbytes() == 0 || t->where != Where::kHost) continue;
    // The pages wholly inside the matrix: a page it shares with a neighbour stays mapped.
    const uintptr_t a = reinterpret_cast<uintptr_t>(t->data);
    const uintptr_t lo = (a + page - 1) / page * page, hi = (a + t->nbytes()) / page * page;
    if (hi > lo && ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0) released += hi - lo;
  }
  return released;
}

Status HybridRunnerImpl::copy_streamed(const std::vector<size_t>& to_copy) {
  if (to_copy.empty()) return Status::ok();
  const double t0 = now_ms();
  std::vector<size_t> items = to_copy;
  // Largest first, so the threads finish together.
  std::stable_sort(items.begin(), items.end(),
                   [&](size_t a, size_t b) { return slot_layouts_[a].bytes > slot_layouts_[b].bytes; });
  std::vector<HostBuffer> bufs(items.size());
  std::vector<double> alloc_s(items.size(), 0.0), copy_s(items.size(), 0.0);
  std::vector<uint64_t> released(items.size(), 0);
  const int32_t threads = pin_threads(items.size());
  const Status st = parallel_items(items.size(), threads, [&](size_t j) -> Status {
    const size_t i = items[j];
    const double a = now_ms();
    FERRY_ASSIGN_OR_RETURN(bufs[j], device_->allocate_pinned(std::max<uint64_t>(slot_layouts_[i].bytes, 1)));
    const double b = now_ms();
    model::ModelWeights hw = host_weights_;
    std::vector<TensorView*> src = host_mats(hw, i);
    std::vector<char> gathered;
    for (size_t k = 0; k < src.size(); ++k)
      write_rows(*src[k], 0, src[k]->nrows(), slot_layouts_[i].layout[k],
                 static_cast<char*>(bufs[j].ptr) + slot_layouts_[i].offset[k], &gathered);
    alloc_s[j] = (b - a) / 1e3;
    copy_s[j] = (now_ms() - b) / 1e3;
    released[j] = release_mmap_pages(hw, i);  // fills copy from the pinned buffer from now on
    return Status::ok();
  });
  for (HostBuffer& h : bufs)
    if (h) pinned_buffers_.push_back(h);  // released by the destructor, also after an error
  FERRY_RETURN_IF_ERROR(st);
  for (size_t j = 0; j < items.size(); ++j) {
    const size_t i = items[j];
    fill_pieces_[i] = {{0, bufs[j].ptr, slot_layouts_[i].bytes}};
    pin_stats_.bytes += slot_layouts_[i].bytes;
    pin_stats_.alloc_s += alloc_s[j];
    pin_stats_.copy_s += copy_s[j];
    pin_stats_.released_bytes += released[j];
  }
  pin_stats_.threads = std::max(pin_stats_.threads, threads);
  pin_stats_.ranges += static_cast<int32_t>(items.size());
  pin_stats_.seconds += (now_ms() - t0) / 1e3;
  return Status::ok();
}

}  // namespace detail
}  // namespace ferry::exec
