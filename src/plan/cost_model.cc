// CostModel: roofline over measured curves. See cost_model.h for the formulas; docs/PLANNER.md for
// why (and what each term corresponds to in the executor).
#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace ferry::plan {

using model::ModelSpec;
using model::SubLayer;
using model::SubLayerKind;

double bits_per_weight(DType t) {
  const DTypeTraits& tr = traits(t);
  return 8.0 * tr.block_bytes / tr.block_elems;
}

namespace {

bool is_matrix(const model::WeightRef& w) { return w.rows > 1; }

// Kernel calls a sub-layer makes besides its matmuls (norms, rope, KV store, attention, GLU, adds).
int small_ops(const SubLayer& s, const ModelSpec& spec) {
  switch (s.kind) {
    case SubLayerKind::kEmbed: return 1;
    case SubLayerKind::kAttention:
      return 6 + (spec.qkv_bias ? 3 : 0) + (spec.qk_norm ? 2 : 0) + (spec.post_norms ? 1 : 0);
    case SubLayerKind::kFfn: return 3 + (spec.post_norms ? 1 : 0);
    case SubLayerKind::kMoeRouter: return 2;
    case SubLayerKind::kExperts: return 2;
    case SubLayerKind::kHead: return 1;
  }
  return 1;
}

double matrix_flops(const SubLayer& s, double n) {
  double f = 0;
  for (const auto& w : s.weights)
    if (is_matrix(w)) f += 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * n;
  return f;
}

}  // namespace

CostModel::CostModel(const HardwareProfile& profile, int32_t cpu_threads)
    : profile_(profile), threads_(cpu_threads > 0 ? cpu_threads : std::max<int32_t>(1, profile.cpu.threads)) {
  if (profile_.cpu.mem_bw.empty()) return;  // not a usable profile (validate_profile says why); no CPU estimates
  // A one-token matmul moves bits_per_weight / 8 bytes per 2 flops.
  cpu_stream_gbs_ = host_bw_gbs();
  std::set<DType> seen;
  for (const auto& c : profile_.cpu.matmul)
    if (seen.insert(c.dtype).second)
      cpu_stream_gbs_ =
          std::max(cpu_stream_gbs_, cpu_rate_at_threads(c.dtype, 1.0) / 2.0 * bits_per_weight(c.dtype) / 8.0);
}

double CostModel::curve_rate(const ThroughputCurve& c, double tokens) const {
  FERRY_ASSERT(!c.tokens.empty());
  const double t0 = c.tokens.front();
  // Below the first point the kernel is bandwidth-bound: throughput grows with the token count.
  if (tokens <= t0) return c.gflops.front() * std::max(tokens, 1e-3) / t0;
  if (tokens >= c.tokens.back()) return c.gflops.back();  // compute-bound plateau
  size_t i = 1;
  while (c.tokens[i] < tokens) ++i;
  const double x0 = std::log(c.tokens[i - 1]), x1 = std::log(c.tokens[i]);
  const double y0 = std::log(c.gflops[i - 1]), y1 = std::log(c.gflops[i]);
  const double f = (std::log(tokens) - x0) / (x1 - x0);
  return std::exp(y0 + f * (y1 - y0));
}

DType CostModel::nearest_measured(DType t, bool gpu) const {
  const auto& curves = gpu ? profile_.gpu->matmul : profile_.cpu.matmul;
  for (const auto& c : curves)
    if (c.dtype == t) return t;
  // Closest bits per weight; ties to the earlier curve (stable across runs).
  DType best = curves.front().dtype;
  double best_d = 1e30;
  for (const auto& c : curves) {
    const double d = std::fabs(bits_per_weight(c.dtype) - bits_per_weight(t));
    if (d < best_d) {
      best_d = d;
      best = c.dtype;
    }
  }
  return best;
}

double CostModel::cpu_rate_at_threads(DType t, double tokens) const {
  const DType used = nearest_measured(t, false);
  // Bandwidth-bound kernels move bytes, so a stand-in dtype's rate scales with bits per weight.
  const double scale = used == t ? 1.0 : bits_per_weight(used) / bits_per_weight(t);
  std::vector<const ThroughputCurve*> cs;
  for (const auto& c : profile_.cpu.matmul)
    if (c.dtype == used) cs.push_back(&c);
  std::sort(cs.begin(), cs.end(), [](auto* a, auto* b) { return a->threads < b->threads; });
  const double th = threads_;
  double rate;
  if (th <= cs.front()->threads) {
    rate = curve_rate(*cs.front(), tokens) * th / cs.front()->threads;
  } else if (th >= cs.back()->threads) {
    rate = curve_rate(*cs.back(), tokens);
  } else {
    size_t i = 1;
    while (cs[i]->threads < th) ++i;
    const double f = (th - cs[i - 1]->threads) / (cs[i]->threads - cs[i - 1]->threads);
    rate = (1 - f) * curve_rate(*cs[i - 1], tokens) + f * curve_rate(*cs[i], tokens);
  }
  return rate * scale;
}

double CostModel::cpu_gflops(DType t, double tokens) const { return cpu_rate_at_threads(t, tokens); }

double CostModel::gpu_gflops(DType t, double tokens) const {
  FERRY_ASSERT(has_gpu());
  const DType used = nearest_measured(t, true);
  const double scale = used == t ? 1.0 : bits_per_weight(used) / bits_per_weight(t);
  for (const auto& c : profile_.gpu->matmul)
    if (c.dtype == used) return curve_rate(c, tokens) * scale;
  return 1;  // unreachable: nearest_measured returns a measured dtype
}

double CostModel::host_bw_gbs() const {
  const auto& bw = profile_.cpu.mem_bw;
  const double th = threads_;
  if (th <= bw.front().threads) return bw.front().gbs * th / bw.front().threads;
  if (th >= bw.back().threads) return bw.back().gbs;
  size_t i = 1;
  while (bw[i].threads < th) ++i;
  const double f = (th - bw[i - 1].threads) / (bw[i].threads - bw[i - 1].threads);
  return (1 - f) * bw[i - 1].gbs + f * bw[i].gbs;
}

double CostModel::cpu_stream_gbs() const { return cpu_stream_gbs_; }

double CostModel::cpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const {
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * tokens;
  const double bytes = static_cast<double>(row_bytes(t, cols)) * static_cast<double>(rows) +
                       4.0 * tokens * static_cast<double>(rows + cols);
  const double compute = flops / (cpu_gflops(t, tokens) * 1e9);
  // The curves were measured reading DRAM, so they hold the kernel's own memory bound; the floor is
  // the best stream rate they showed, not the simpler bandwidth probe's (which on the GPU host read
  // 90 GB/s at 16 threads while the F16 / F32 matvecs streamed 119 / 136 GB/s).
  const double memory = bytes / (cpu_stream_gbs() * 1e9);
  return profile_.cpu.call_overhead_us * 1e-6 + std::max(compute, memory);
}

double CostModel::gpu_kernel_issue_s(bool graph) const {
  FERRY_ASSERT(has_gpu());
  if (!graph) return profile_.gpu->launch_us * 1e-6;
  const double g = profile_.gpu->graph_kernel_us > 0 ? profile_.gpu->graph_kernel_us : kGraphKernelUsDefault;
  return std::min(g, profile_.gpu->launch_us) * 1e-6;
}

double CostModel::gpu_matmul_kernel_s(DType t, int64_t rows, int64_t cols, double tokens) const {
  FERRY_ASSERT(has_gpu());
  const GpuProfile& g = *profile_.gpu;
  const DType used = nearest_measured(t, true);
  const ThroughputCurve* curve = nullptr;
  for (const auto& c : g.matmul)
    if (c.dtype == used) curve = &c;
  FERRY_ASSERT(curve);
  const double elems = static_cast<double>(rows) * static_cast<double>(cols);
  const double probe_elems = static_cast<double>(curve->rows) * static_cast<double>(curve->cols);
  // The probe times back-to-back CudaOps::matmul calls on a probe_elems matrix. Each call carries a
  // fixed part (the activation quantize / convert kernel and the gap between dependent kernels, about
  // one launch) that does not grow with the matrix; the rest is per element. A real step pays its
  // fixed costs per kernel (gpu_kernel_issue_s), so only the per-element part scales. The floor of a
  // quarter of the probe time keeps a noisy launch_us from making tiny probe points free.
  const double probe_s = 2.0 * probe_elems * tokens / (gpu_gflops(t, tokens) * 1e9);
  const double per_elem_s = std::max(probe_s - g.launch_us * 1e-6, 0.25 * probe_s) / probe_elems;
  double kernel = per_elem_s * elems;
  const double wbytes = static_cast<double>(row_bytes(t, cols)) * static_cast<double>(rows);
  const double act_bytes = 4.0 * tokens * static_cast<double>(rows + cols);
  kernel = std::max(kernel, (wbytes + act_bytes) / (kGpuStreamShare * g.mem_bw_gbs * 1e9));
  // GEMM path of a quantized weight: dequantize to an F16 copy (written), which cuBLAS reads. At the
  // probe's 4096 x 4096 the 32 MiB copy stays in L2; a larger matrix's copy goes to DRAM and back
  // (mem_bw counts read + written bytes, as this traffic does).
  if (tokens > kGpuMatvecMaxTokens && traits(t).quantized && elems > probe_elems)
    kernel += 2.0 * 2.0 * elems / (g.mem_bw_gbs * 1e9);
  // A staging smaller than the F16 matrix: one dequantize + GEMM pair per staging's worth of rows.
  if (tokens > kGpuMatvecMaxTokens && traits(t).quantized && gemm_staging_bytes_ > 0) {
    const double rows_per_pair = std::max(1.0, std::floor(static_cast<double>(gemm_staging_bytes_) / (2.0 * cols)));
    kernel += (std::ceil(static_cast<double>(rows) / rows_per_pair) - 1.0) * kGemmExtraChunkS;
  }
  return kernel;
}

double CostModel::gpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const {
  return gpu_kernel_issue_s(false) + gpu_matmul_kernel_s(t, rows, cols, tokens);
}

namespace {

// Matmul part of a sub-layer through `mm(dtype, rows, cols, tokens)`. Experts: only the touched
// share of the group runs, each touched expert on its expected share of the tokens.
template <typename Mm>
double matmuls_s(const SubLayer& s, const ModelSpec& spec, int64_t n, Mm mm) {
  double t = 0;
  if (s.kind == SubLayerKind::kExperts) {
    const double g = s.expert_end - s.expert_begin;
    const double p = 1.0 - std::pow(1.0 - static_cast<double>(spec.n_expert_used) / spec.n_expert, static_cast<double>(n));
    const double touched = g * p;
    const double tok = static_cast<double>(n) * spec.n_expert_used / (spec.n_expert * p);
    for (const auto& w : s.weights)
      if (is_matrix(w)) t += touched * mm(w.dtype, w.rows / static_cast<int64_t>(g), w.cols, tok);
    return t;
  }
  for (const auto& w : s.weights)
    if (is_matrix(w)) t += mm(w.dtype, w.rows, w.cols, static_cast<double>(n));
  return t;
}

}  // namespace

double CostModel::cpu_sublayer_s(const SubLayer& s, const ModelSpec& spec, int64_t n, int64_t c) const {
  const double bw = host_bw_gbs() * 1e9;
  const double call = profile_.cpu.call_overhead_us * 1e-6;
  if (s.kind == SubLayerKind::kEmbed) return call + (s.weight_bytes_read(spec, n) + s.activation_bytes(spec, n)) / bw;
  double t = matmuls_s(s, spec, n, [&](DType dt, int64_t r, int64_t k, double tok) { return cpu_matmul_s(dt, r, k, tok); });
  if (s.kind == SubLayerKind::kAttention) {
    // The attention core reads the KV cache (F16) once per step; its flops run at F16-matmul speed
    // with the query heads of a KV group batched (GQA).
    const double core_flops = s.flops(spec, n, c) - matrix_flops(s, static_cast<double>(n));
    const double gqa = static_cast<double>(spec.n_head) / spec.n_kv_head;
    t += std::max(s.kv_bytes_read(spec, n, c) / bw, core_flops / (cpu_gflops(DType::F16, n * gqa) * 1e9));
  }
  // Small ops: a call each plus a couple of passes over the activations.
  t += small_ops(s, spec) * call + 2.0 * s.activation_bytes(spec, n) / bw;
  return t;
}

double CostModel::gpu_sublayer_s(const SubLayer& s, const ModelSpec& spec, int64_t n, int64_t c, bool graph) const {
  FERRY_ASSERT(has_gpu());
  const double bw = profile_.gpu->mem_bw_gbs * 1e9;
  const double issue = gpu_kernel_issue_s(graph);
  if (s.kind == SubLayerKind::kEmbed) return issue + (s.weight_bytes_read(spec, n) + s.activation_bytes(spec, n)) / bw;
  int kernels = small_ops(s, spec);
  double t = matmuls_s(s, spec, n, [&](DType dt, int64_t r, int64_t k, double tok) {
    ++kernels;
    return gpu_matmul_kernel_s(dt, r, k, tok);
  });
  if (s.kind == SubLayerKind::kAttention) t += gpu_attention_core_s(s, spec, n, c);
  t += kernels * issue + 2.0 * s.activation_bytes(spec, n) / bw;
  return t;
}

// The measured one-token time at `ref_cells` cells of the measured head configuration: piecewise linear
// between the decode points, extrapolated linearly past the first and last ones (a growing context costs
// at least what the last segment adds per cell; a single point scales with the cells).
double CostModel::measured_decode_attention_s(double ref_cells) const {
  const std::vector<AttentionPoint>& d = profile_.gpu->attention->decode;
  FERRY_ASSERT(!d.empty());
  if (d.size() == 1) return d[0].us * 1e-6 * ref_cells / static_cast<double>(d[0].cells);
  size_t i = 1;  // the segment [i - 1, i] that holds ref_cells, or the end segment past the points
  while (i + 1 < d.size() && ref_cells > static_cast<double>(d[i].cells)) ++i;
  const double x0 = static_cast<double>(d[i - 1].cells), x1 = static_cast<double>(d[i].cells);
  double slope = (d[i].us - d[i - 1].us) / (x1 - x0);
  if (ref_cells > x1 || ref_cells < x0) slope = std::max(slope, 0.0);  // noisy points never make more cells cheaper
  return std::max(d[i - 1].us + slope * (ref_cells - x0), 0.0) * 1e-6;
}

// The measured prefill chunk nearest to (n tokens, c + n cells) (log distance, tokens first), scaled by
// core flops: the chunk's tensor-core rate, which a smaller step or a decode step does not beat.
double CostModel::measured_chunk_attention_s(double core_flops, int64_t n, int64_t c) const {
  const GpuAttentionProfile& a = *profile_.gpu->attention;
  FERRY_ASSERT(!a.prefill.empty());
  const AttentionPoint* best = &a.prefill.front();
  double best_d = 1e300;
  for (const AttentionPoint& pt : a.prefill) {
    const double dt = std::fabs(std::log(static_cast<double>(pt.tokens) / static_cast<double>(n)));
    const double dc = std::fabs(std::log(static_cast<double>(pt.cells) / static_cast<double>(c + n)));
    const double d = dt * 1e3 + dc;
    if (d < best_d) {
      best_d = d;
      best = &pt;
    }
  }
  const double pt_flops = 4.0 * a.head_dim * a.n_head * model::attended_cells(best->tokens, best->cells - best->tokens, 0);
  return best->us * 1e-6 * core_flops / pt_flops;
}

double CostModel::gpu_attention_core_s(const SubLayer& s, const ModelSpec& spec, int64_t n, int64_t c) const {
  FERRY_ASSERT(has_gpu());
  const GpuProfile& g = *profile_.gpu;
  const double kv_bytes = s.kv_bytes_read(spec, n, c);
  const double core_flops = s.flops(spec, n, c) - matrix_flops(s, static_cast<double>(n));
  const double gqa = static_cast<double>(spec.n_head) / spec.n_kv_head;
  // Without a measurement: the KV cache (F16) read once per step at the device bandwidth, the flops at
  // F16-matmul speed with the query heads of a KV group batched (GQA).
  const double bandwidth = kv_bytes / (g.mem_bw_gbs * 1e9);
  const double formula = std::max(bandwidth, core_flops / (gpu_gflops(DType::F16, n * gqa) * 1e9));
  if (!g.attention) return formula;
  const GpuAttentionProfile& a = *g.attention;
  const bool decode = n <= kGpuMatvecMaxTokens && !a.decode.empty();
  // Decode steps: the measured time replaces the formula, whose flop term (the F16 matvec's rate at
  // n x GQA tokens) is no model of the attention kernel (73 us at 32K cells on the H200, measured 65.6);
  // the bandwidth stays a floor. Longer steps: never below the formula.
  double t = decode ? bandwidth : formula;
  // (1) The split flash-decoding kernel + its combine run far below the device bandwidth at moderate
  // contexts (H200, llama3-8b heads: 24.6 us at 4K cells, ~0.7 TB/s): the measured one-token time at
  // the same KV bytes. Steps of up to kGpuMatvecMaxTokens tokens read the sequence's KV once for all
  // n x GQA query rows (one tile of 16 or 64 rows per KV head), so they take the one-token time, and a
  // longer step reads at least as much KV as one token does.
  if (!a.decode.empty()) {
    const double ref_cell_bytes = static_cast<double>(a.n_kv_head) * a.head_dim * 2.0 * 2.0;  // K and V, F16
    t = std::max(t, measured_decode_attention_s(kv_bytes / ref_cell_bytes));
  }
  // (2) The measured chunk's time scaled by flops (tokens x cells x heads x head_dim): the kernel's
  // tensor-core rate with every SM busy, which no step beats.
  if (!a.prefill.empty() && core_flops > 0) t = std::max(t, measured_chunk_attention_s(core_flops, n, c));
  return t;
}

double CostModel::h2d_s(double bytes) const {
  FERRY_ASSERT(has_gpu());
  return bytes / (profile_.link->h2d_gbs * 1e9);
}

double CostModel::activation_h2d_s(double bytes) const {
  FERRY_ASSERT(has_gpu());
  return profile_.link->latency_us * 1e-6 + bytes / (profile_.link->h2d_gbs * 1e9);
}

double CostModel::activation_d2h_s(double bytes) const {
  FERRY_ASSERT(has_gpu());
  return profile_.link->latency_us * 1e-6 + bytes / (profile_.link->d2h_gbs * 1e9);
}

double CostModel::cpu_share_while_copying() const {
  return has_gpu() ? profile_.link->cpu_share_while_copying : 1.0;
}

double CostModel::copy_share_while_cpu() const {
  return has_gpu() ? std::min(1.0, profile_.link->h2d_busy_gbs / profile_.link->h2d_gbs) : 1.0;
}

double CostModel::host_combined_gbs() const { return has_gpu() ? profile_.link->host_combined_gbs : host_bw_gbs(); }
double CostModel::link_gbs() const { return has_gpu() ? profile_.link->h2d_gbs : 0; }

std::vector<std::string> CostModel::notes_for(const std::vector<SubLayer>& subs) const {
  std::set<DType> used;
  for (const auto& s : subs)
    for (const auto& w : s.weights)
      if (is_matrix(w)) used.insert(w.dtype);
  std::vector<std::string> notes;
  for (DType t : used) {
    const DType c = nearest_measured(t, false);
    if (c != t)
      notes.push_back(std::string("profile has no CPU curve for ") + dtype_name(t) + ": scaled from " + dtype_name(c) +
                      " by bits per weight");
    if (has_gpu()) {
      const DType g = nearest_measured(t, true);
      if (g != t)
        notes.push_back(std::string("profile has no GPU curve for ") + dtype_name(t) + ": scaled from " +
                        dtype_name(g) + " by bits per weight");
    }
  }
  int32_t lo = 0, hi = 0;
  bool exact = false;
  for (const auto& c : profile_.cpu.matmul) {
    exact |= c.threads == threads_;
    lo = lo == 0 ? c.threads : std::min(lo, c.threads);
    hi = std::max(hi, c.threads);
  }
  if (!exact) {
    if (threads_ > hi)
      notes.push_back("CPU curves measured up to " + std::to_string(hi) + " threads; " + std::to_string(threads_) +
                      " threads predicted as " + std::to_string(hi));
    else if (threads_ < lo)
      notes.push_back("CPU curves start at " + std::to_string(lo) + " threads; " + std::to_string(threads_) +
                      " threads scaled down linearly");
    else
      notes.push_back("no CPU curves at " + std::to_string(threads_) + " threads: interpolated between measured counts");
  }
  return notes;
}

}  // namespace ferry::plan
