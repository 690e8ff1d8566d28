// bench_cuda_ops: microbenchmarks of CudaOps on the GPU host (run by bench/device/check_cuda.sh).
//   copy       device-to-device cudaMemcpy: the bandwidth ceiling (reported as read + write bytes / s)
//   matvec     decode matmul (1..8 tokens) per weight type at llama3-8b shapes, GB/s of weights read, the
//              v1 kernels (ggml layout) vs v2 (16-byte loads; split layout for Q4_0/Q8_0/Q6_K) with and
//              without PDL; weights rotate over copies larger than L2 so every call reads DRAM
//   crossover  matvec kernels vs dequantize + cuBLAS by token count
//   gemm       prefill matmul TFLOP/s at 512 / 4096 tokens, and by dequantization chunk size
//   attention  decode (1 token, long context) and causal prefill, both kernels
//   layer      the sum of one llama3-8b layer's decode matmuls -> an upper bound on decode tok/s; also with
//              matmul_many (q/k/v in one call, gate/up in one call)
//   moe        the experts of a qwen3-30b-a3b (Q4_K) and a gpt-oss-20b (MXFP4) layer at 1, 16, 512 and 1024 tokens:
//              the device kernels with and without the tensor-core prefill kernel vs
//              Ops' default composition, GB/s of routed expert bytes; the router alone
// Lines starting with "RESULT" are machine-readable: RESULT <name> <value> <unit>.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "exec/device.h"
#include "kernels/cuda/launch.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"
#include "tensor/repack.h"

using namespace ferry;
using namespace ferry::cudatest;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kRotateBytes = 768 * kMiB;  // > 10x the L2 of an H100/H200

Env* E = nullptr;

void check(const Status& st) {
  if (!st.is_ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    std::exit(1);
  }
}

// Mean milliseconds per call of f(i) over `iters` calls, after 3 warm-up calls.
double time_ms(int iters, const std::function<void(int)>& f) {
  exec::Device& dev = *E->dev;
  auto e0 = std::move(dev.create_event()).value();
  auto e1 = std::move(dev.create_event()).value();
  for (int i = 0; i < 3; ++i) f(i);
  check(dev.record(*e0, *E->stream));
  for (int i = 0; i < iters; ++i) f(i);
  check(dev.record(*e1, *E->stream));
  check(dev.sync(*e1));
  if (!E->ctx->ok()) {
    std::fprintf(stderr, "error: %s\n", E->ctx->status().message().c_str());
    std::exit(1);
  }
  return std::move(dev.elapsed_ms(*e0, *e1)).value() / iters;
}

void result(const std::string& name, double value, const char* unit) {
  std::printf("RESULT %s %.4g %s\n", name.c_str(), value, unit);
}

// Copies of one weight matrix [K, N] of type t, together larger than kRotateBytes.
struct WeightSet {
  std::vector<exec::DeviceBuffer> bufs;
  TensorView view;  // of copy 0
  uint64_t bytes = 0;
  TensorView at(int i) const {
    TensorView v = view;
    v.data = bufs[static_cast<size_t>(i) % bufs.size()].ptr;
    return v;
  }
  ~WeightSet() {
    for (auto& b : bufs) E->dev->release(&b);
  }
};

// split: the copies hold the split layout (tensor/repack.h), as the engine uploads them for the v2 kernels.
std::unique_ptr<WeightSet> make_weights(DType t, int64_t K, int64_t N, uint64_t min_total = kRotateBytes,
                                        bool split = false) {
  auto w = std::make_unique<WeightSet>();
  const uint64_t rb = row_bytes(t, K);
  w->bytes = rb * static_cast<uint64_t>(N);
  const size_t copies = std::max<size_t>(2, (min_total + w->bytes - 1) / w->bytes);
  // 32 genuinely quantized rows, tiled: realistic bit patterns without quantizing gigabytes.
  std::mt19937 rng(static_cast<unsigned>(K * 31 + N + static_cast<int>(t)));
  HostTensor tile = random_weights(rng, t, K, std::min<int64_t>(32, N));
  if (split) tile = to_split(tile);  // rows are independent: a tiled split tile is the split tiling
  std::vector<uint8_t> host(w->bytes);
  for (uint64_t off = 0; off < w->bytes; off += tile.bytes.size())
    std::memcpy(host.data() + off, tile.bytes.data(), std::min<uint64_t>(tile.bytes.size(), w->bytes - off));
  for (size_t i = 0; i < copies; ++i) {
    w->bufs.push_back(std::move(E->dev->allocate(w->bytes, "bench.w")).value());
    if (i == 0) {
      check(E->dev->copy_h2d(w->bufs[0].ptr, host.data(), w->bytes, *E->stream));
    } else {
      check(E->dev->copy_d2d(w->bufs[i].ptr, w->bufs[0].ptr, w->bytes, *E->stream));
    }
  }
  check(E->sync());
  w->view = TensorView::make(t, w->bufs[0].ptr, K, N, 1, 1, Where::kDevice);
  if (split) w->view.layout = Layout::kSplit;
  return w;
}

double g_copy_gbps = 0;  // read + write

void bench_copy() {
  const uint64_t n = 1024 * kMiB;
  auto a = std::move(E->dev->allocate(n, "copy.a")).value();
  auto b = std::move(E->dev->allocate(n, "copy.b")).value();
  check(E->dev->memset(a.ptr, 1, n, *E->stream));
  const double ms = time_ms(10, [&](int i) {
    check(E->dev->copy_d2d(i % 2 ? a.ptr : b.ptr, i % 2 ? b.ptr : a.ptr, n, *E->stream));
  });
  g_copy_gbps = 2.0 * static_cast<double>(n) / (ms * 1e6);
  std::printf("\n== device-to-device copy (1 GiB) ==\n%.3f ms, %.0f GB/s read+write (%.0f GB/s copied)\n", ms,
              g_copy_gbps, g_copy_gbps / 2);
  result("copy_d2d_rw_gbps", g_copy_gbps, "GB/s");
  E->dev->release(&a);
  E->dev->release(&b);
}

struct Shape {
  int64_t K, N;
  const char* name;
};
const Shape kShapes[] = {{4096, 4096, "4096x4096 (attn q/o)"},
                         {4096, 14336, "4096x14336 (ffn gate/up)"},
                         {14336, 4096, "14336x4096 (ffn down)"},
                         {4096, 1024, "4096x1024 (attn k/v)"}};
constexpr int kMeanShapes = 3;  // means over the first three (comparable with earlier runs)

// Time of ops->matmul_path(path) on [K, N] x T tokens, rotating weight copies.
double matmul_ms(kernels::CudaOps& ops, const WeightSet& w, int64_t T, int path, int iters) {
  const int64_t K = w.view.ne[0], N = w.view.ne[1];
  DevTensor x(*E, DType::F32, K, T), out(*E, DType::F32, N, T);
  check(E->dev->memset(x.view.data, 0, x.view.nbytes(), *E->stream));
  return time_ms(iters, [&](int i) { ops.matmul_path(w.at(i), x.view, out.view, path); });
}

// Whether the v2 kernels read t (kernels/cuda/launch.h matvec_v2_supported; the buffers here are aligned).
bool v2_reads(DType t, bool split) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q8_0:
    case DType::Q6_K: return split;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::F32:
    case DType::F16:
    case DType::BF16: return true;
    default: return false;
  }
}

void bench_matvec() {
  std::printf("\n== decode matvec: GB/s of weights read (T = tokens) ==\n");
  std::printf("v1 = ggml layout, v1 kernels; v2 = 16-byte-load kernels (split layout for Q4_0/Q8_0/Q6_K), with and\n"
              "without PDL; T=2..8 and %%copy: the default path (v2 where it reads the type, else v1)\n");
  std::printf("%-6s %-26s %8s %8s %8s %8s %8s %8s %7s %7s\n", "type", "shape [K x N]", "v1 T=1", "v2 T=1", "noPDL",
              "T=2", "T=4", "T=8", "%copy", "v1 %");
  kernels::CudaOpsOptions o1, onp;
  o1.matvec_v2 = false;
  onp.matvec_pdl = false;
  kernels::CudaOps ops_v1(*E->ctx, o1), ops_nopdl(*E->ctx, onp);
  for (DType t : kWeightTypes) {
    double sum_best = 0, sum_v1 = 0;
    for (int si = 0; si < 4; ++si) {
      const Shape& s = kShapes[si];
      const bool split = split_layout_supported(t, s.K);
      const bool v2 = v2_reads(t, split);
      auto wg = make_weights(t, s.K, s.N);
      auto ws = split ? make_weights(t, s.K, s.N, kRotateBytes, true) : nullptr;
      const WeightSet& wb = split ? *ws : *wg;  // what the engine would hold
      auto gbps = [&](kernels::CudaOps& ops, const WeightSet& w, int64_t T) {
        return static_cast<double>(w.bytes) / (matmul_ms(ops, w, T, 0, 50) * 1e6);
      };
      const double g1 = gbps(ops_v1, *wg, 1);
      const double g2 = v2 ? gbps(*E->ops, wb, 1) : 0, gnp = v2 ? gbps(ops_nopdl, wb, 1) : 0;
      const double best = v2 ? g2 : g1;
      const double t2 = gbps(*E->ops, wb, 2), t4 = gbps(*E->ops, wb, 4), t8 = gbps(*E->ops, wb, 8);
      if (si < kMeanShapes) {
        sum_best += best;
        sum_v1 += g1;
      }
      std::printf("%-6s %-26s %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %6.0f%% %6.0f%%\n", dtype_name(t), s.name, g1, g2, gnp,
                  t2, t4, t8, 100.0 * best / g_copy_gbps, 100.0 * g1 / g_copy_gbps);
      const std::string key = std::string(dtype_name(t)) + "_" + std::to_string(s.K) + "x" + std::to_string(s.N);
      result("matvec_gbps_" + key, best, "GB/s");
      result("matvec_v1_gbps_" + key, g1, "GB/s");
      if (v2) result("matvec_nopdl_gbps_" + key, gnp, "GB/s");
      result("matvec_T8_gbps_" + key, t8, "GB/s");
    }
    result(std::string("matvec_gbps_") + dtype_name(t) + "_mean", sum_best / kMeanShapes, "GB/s");
    result(std::string("matvec_v1_gbps_") + dtype_name(t) + "_mean", sum_v1 / kMeanShapes, "GB/s");
  }
}

void bench_crossover() {
  std::printf("\n== matvec kernels vs dequantize + cuBLAS, 4096x14336, us per call ==\n");
  std::printf("%-6s %5s %10s %10s\n", "type", "T", "matvec", "gemm");
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::F16}) {
    auto w = make_weights(t, 4096, 14336, kRotateBytes, split_layout_supported(t, 4096));
    for (int64_t T : {1, 4, 8, 12, 16, 32, 64}) {
      const double a = matmul_ms(*E->ops, *w, T, 0, 20) * 1e3;
      const double b = matmul_ms(*E->ops, *w, T, 1, 20) * 1e3;
      std::printf("%-6s %5lld %10.1f %10.1f\n", dtype_name(t), static_cast<long long>(T), a, b);
      result(std::string("crossover_") + dtype_name(t) + "_T" + std::to_string(T) + "_vec_us", a, "us");
      result(std::string("crossover_") + dtype_name(t) + "_T" + std::to_string(T) + "_gemm_us", b, "us");
    }
  }
}

void bench_gemm() {
  std::printf("\n== prefill GEMM TFLOP/s (dequantize to F16 + cublasGemmEx), by chunk rows ==\n");
  std::printf("%-6s %-26s %6s %10s %10s %10s\n", "type", "shape [K x N]", "T", "auto", "chunk4096", "chunk16384");
  kernels::CudaOpsOptions o4, o16;
  o4.gemm_chunk_rows = 4096;
  o16.gemm_chunk_rows = 16384;
  kernels::CudaOps ops4(*E->ctx, o4), ops16(*E->ctx, o16);
  for (DType t : {DType::F16, DType::BF16, DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    for (const Shape& s : {kShapes[1], kShapes[2]}) {
      auto w = make_weights(t, s.K, s.N, 0, split_layout_supported(t, s.K));
      for (int64_t T : {512, 4096}) {
        const double flop = 2.0 * s.K * s.N * T;
        const int iters = T >= 4096 ? 5 : 10;
        const double a = flop / (matmul_ms(*E->ops, *w, T, 1, iters) * 1e9);
        const double b = flop / (matmul_ms(ops4, *w, T, 1, iters) * 1e9);
        const double c = flop / (matmul_ms(ops16, *w, T, 1, iters) * 1e9);
        std::printf("%-6s %-26s %6lld %10.1f %10.1f %10.1f\n", dtype_name(t), s.name, static_cast<long long>(T), a,
                    b, c);
        result(std::string("gemm_tflops_") + dtype_name(t) + "_" + std::to_string(s.K) + "x" + std::to_string(s.N) +
                   "_T" + std::to_string(T),
               a, "TFLOP/s");
      }
    }
  }
}

// Builds with -DFERRY_CUDA_ATTN_STAMPS (launch.h attention_stamps): where the tensor-core attention kernel's
// blocks spend their time in the last of the launches `launch` makes, phase by phase (thread 0's clock64()
// between the kernel's marks, at the device's nominal clock), median and slowest block, and how far apart
// the blocks started. Prints nothing in normal builds.
void stamp_report(const char* what, const std::function<void()>& launch) {
  namespace cu = ferry::kernels::cuda;
  constexpr int kMax = 2048, kS = 8;
  if (cu::attention_stamps_clear() != cudaSuccess) return;
  launch();
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  std::vector<uint64_t> st(static_cast<size_t>(kMax) * kS);
  if (cu::attention_stamps(st.data(), kMax) <= 0) return;
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  const double us_per_cycle = khz > 0 ? 1e3 / khz : 0.0;
  std::vector<int> blocks;
  uint64_t t_min = UINT64_MAX, t_max = 0;
  for (int b = 0; b < kMax; ++b) {
    const uint64_t* x = &st[static_cast<size_t>(b) * kS];
    if (x[7] == 0 || x[6] == 0) continue;
    blocks.push_back(b);
    t_min = std::min(t_min, x[7]);
    t_max = std::max(t_max, x[7]);
  }
  if (blocks.empty()) return;
  std::printf("attention stamps, %s: %zu blocks, starts spread over %.2f us (globaltimer); us at %d MHz:\n", what,
              blocks.size(), (t_max - t_min) / 1e3, khz / 1000);
  const struct {
    int from, to;
    const char* name;
  } phases[] = {{0, 1, "PDL wait"},           {1, 2, "tile issue + q staged"},
                {2, 3, "first tile landed"},  {3, 4, "tile loop (mma, softmax)"},
                {4, 5, "warps' states to smem"}, {5, 6, "merge + partials stored"},
                {4, 6, "after the loop"},     {0, 6, "whole block"}};
  for (const auto& ph : phases) {
    std::vector<double> d;
    for (int b : blocks) {
      const uint64_t* x = &st[static_cast<size_t>(b) * kS];
      if (x[ph.from] != 0 && x[ph.to] != 0) d.push_back(static_cast<double>(x[ph.to] - x[ph.from]) * us_per_cycle);
    }
    if (d.empty()) continue;
    std::sort(d.begin(), d.end());
    std::printf("  %-28s median %7.2f  max %7.2f\n", ph.name, d[d.size() / 2], d.back());
  }
}

void bench_attention() {
  std::printf("\n== attention, llama3-8b heads (32 q, 8 kv, d 128) ==\n");
  const int nh = 32, nkv = 8, D = 128, kvd = nkv * D;
  const int max_cells = 32768;
  DevTensor kc(*E, DType::F16, kvd, max_cells), vc(*E, DType::F16, kvd, max_cells);
  check(E->dev->memset(kc.view.data, 0x3c, kc.view.nbytes(), *E->stream));  // 0x3c3c: ~1.06 in F16
  check(E->dev->memset(vc.view.data, 0x3c, vc.view.nbytes(), *E->stream));
  std::vector<int32_t> cpos(max_cells), cseq(max_cells, 0);
  std::iota(cpos.begin(), cpos.end(), 0);
  HostTensor hcpos(DType::I32, max_cells), hcseq(DType::I32, max_cells);
  std::memcpy(hcpos.bytes.data(), cpos.data(), cpos.size() * 4);
  std::memcpy(hcseq.bytes.data(), cseq.data(), cseq.size() * 4);
  DevTensor dcpos(*E, hcpos), dcseq(*E, hcseq);
  kernels::AttnParams p;
  p.n_head = nh;
  p.n_kv_head = nkv;
  p.head_dim = D;
  p.scale = 1.f / std::sqrt(128.f);

  auto run = [&](int T, int n_cells, int kernel, int iters) {
    std::vector<int32_t> pos(T), seq(T, 0);
    for (int i = 0; i < T; ++i) pos[i] = n_cells - T + i;
    HostTensor hpos(DType::I32, T), hseq(DType::I32, T);
    std::memcpy(hpos.bytes.data(), pos.data(), T * 4);
    std::memcpy(hseq.bytes.data(), seq.data(), T * 4);
    DevTensor dpos(*E, hpos), dseq(*E, hseq), q(*E, DType::F32, D, nh, T), out(*E, DType::F32, D * nh, T);
    check(E->dev->memset(q.view.data, 0, q.view.nbytes(), *E->stream));
    kernels::BatchMeta b;
    b.n_tokens = T;
    b.pos = dpos.view;
    b.seq = dseq.view;
    kernels::KvView kv;
    kv.k = kc.view;
    kv.v = vc.view;
    kv.cell_pos = dcpos.view;
    kv.cell_seq = dcseq.view;
    kv.n_cells = n_cells;
    return time_ms(iters, [&](int) { E->ops->attention_path(q.view, kv, b, p, out.view, kernel, 0); });
  };

  // Kernels (launch.h attention): 2 = the one-token decode kernel, 1 = tensor cores, 0 = plain.
  std::printf("decode (1 token): %8s %12s %12s %12s %10s\n", "context", "decode us", "mma us", "plain us", "mma GB/s");
  for (int ctx : {512, 1024, 4096, 32768}) {
    const double d = run(1, ctx, 2, 50), a = run(1, ctx, 1, 50), b = run(1, ctx, 0, 20);
    const double gbps = 2.0 * ctx * kvd * 2 / (a * 1e6);
    std::printf("                  %8d %12.1f %12.1f %12.1f %10.0f\n", ctx, d * 1e3, a * 1e3, b * 1e3, gbps);
    result("attn_decode_kernel_us_ctx" + std::to_string(ctx), d * 1e3, "us");
    result("attn_decode_us_ctx" + std::to_string(ctx), a * 1e3, "us");
    result("attn_decode_gbps_ctx" + std::to_string(ctx), gbps, "GB/s");
  }
  for (int ctx : {512, 4096}) {
    const std::string what = "decode at " + std::to_string(ctx) + " cells";
    stamp_report(what.c_str(), [&] { run(1, ctx, 1, 5); });
  }
  std::printf("prefill (causal): %8s %12s %12s %12s\n", "tokens", "mma TFLOP/s", "plain TFLOP/s", "mma ms");
  for (int T : {512, 4096}) {
    const double flop = 4.0 * T * (T / 2.0) * D * nh;
    const double a = run(T, T, 1, 5), b = run(T, T, 0, 2);
    std::printf("                  %8d %12.1f %12.1f %12.3f\n", T, flop / (a * 1e9), flop / (b * 1e9), a);
    result("attn_prefill_tflops_T" + std::to_string(T), flop / (a * 1e9), "TFLOP/s");
    result("attn_prefill_plain_tflops_T" + std::to_string(T), flop / (b * 1e9), "TFLOP/s");
  }
  // The last 512-token chunk of a 4096-token prompt (how ferry prefills long prompts: chunks of 512).
  {
    const int T = 512, C = 4096;
    const double flop = 4.0 * T * (C - T / 2.0) * D * nh;
    const double a = run(T, C, 1, 10);
    std::printf("chunk 512 @ 4096 cells: mma %.1f TFLOP/s, %.3f ms\n", flop / (a * 1e9), a);
    result("attn_chunk512_ctx4096_tflops", flop / (a * 1e9), "TFLOP/s");
  }
}

// One llama3-8b layer's decode matmuls (plus 1/32 of the head) with every weight of type t (split layout
// where the v2 kernels read it): each matmul on its own, and with matmul_many for q/k/v and gate/up.
void bench_layer() {
  std::printf("\n== llama3-8b decode matmuls per token (weights only, no attention/norms) ==\n");
  const Shape mats[] = {{4096, 4096, "q"}, {4096, 1024, "k"}, {4096, 1024, "v"}, {4096, 4096, "o"},
                        {4096, 14336, "gate"}, {4096, 14336, "up"}, {14336, 4096, "down"}};
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::F16}) {
    std::vector<std::unique_ptr<WeightSet>> w;
    double bytes = 0;
    for (const Shape& s : mats) {
      w.push_back(make_weights(t, s.K, s.N, kRotateBytes / 4, split_layout_supported(t, s.K)));
      bytes += static_cast<double>(w.back()->bytes);
    }
    double ms = 0;
    for (const auto& m : w) ms += matmul_ms(*E->ops, *m, 1, 0, 50);
    // Fused: q/k/v share x, gate/up share x (x [14336, 1] zeros; its first 4096 serve the K = 4096 ones).
    DevTensor x(*E, DType::F32, 14336, 1);
    check(E->dev->memset(x.view.data, 0, x.view.nbytes(), *E->stream));
    std::vector<std::unique_ptr<DevTensor>> outs;
    std::vector<TensorView> ov;
    for (const Shape& s : mats) {
      outs.push_back(std::make_unique<DevTensor>(*E, DType::F32, s.N, 1));
      ov.push_back(outs.back()->view);
    }
    TensorView x4096 = x.view;
    x4096.ne[0] = 4096;
    const double many_ms = time_ms(50, [&](int i) {
      const TensorView qkv[3] = {w[0]->at(i), w[1]->at(i), w[2]->at(i)};
      const TensorView* pq[3] = {&qkv[0], &qkv[1], &qkv[2]};
      E->ops->matmul_many(3, pq, x4096, &ov[0]);
      E->ops->matmul(w[3]->at(i), x4096, ov[3]);
      const TensorView gu[2] = {w[4]->at(i), w[5]->at(i)};
      const TensorView* pg[2] = {&gu[0], &gu[1]};
      E->ops->matmul_many(2, pg, x4096, &ov[4]);
      E->ops->matmul(w[6]->at(i), x.view, ov[6]);
    });
    w.clear();
    auto head = make_weights(t, 4096, 128256, 0, split_layout_supported(t, 4096));
    const double head_ms = matmul_ms(*E->ops, *head, 1, 0, 20);
    const double step_bytes = 32 * bytes + static_cast<double>(head->bytes);
    for (int fused = 0; fused < 2; ++fused) {
      const double layer_ms = fused ? many_ms : ms;
      const double step_ms = 32 * layer_ms + head_ms;
      std::printf("%-5s %-8s layer %.3f ms, head %.3f ms -> %.2f ms/token, %.0f tok/s bound, %.0f GB/s (%.0f%% of copy)\n",
                  dtype_name(t), fused ? "many" : "separate", layer_ms, head_ms, step_ms, 1e3 / step_ms,
                  step_bytes / (step_ms * 1e6), 100.0 * step_bytes / (step_ms * 1e6) / g_copy_gbps);
      const std::string sfx = std::string(fused ? "many_" : "") + dtype_name(t);
      result("llama3_8b_decode_matmul_tok_s_" + sfx, 1e3 / step_ms, "tok/s");
      result("llama3_8b_decode_matmul_gbps_" + sfx, step_bytes / (step_ms * 1e6), "GB/s");
    }
  }
}

// A mixture-of-experts layer's experts (moe_experts with every expert in one group): the device kernels
// (cuda_ops_moe.cc) at their defaults, the same with the tensor-core prefill kernel off (moe_mma.cu vs the
// dp4a expert matvec), and Ops' default composition (host reads of the routing, one matvec per slot and
// token; small T only). qwen3-30b-a3b (d 2048, 128 experts of ffe 768, top 8, Q4_K) and gpt-oss-20b (d 2880,
// 32 experts of ffe 2880, top 4, MXFP4; without its biases and clamped SwiGLU, which cost the same either
// way). The stacks rotate over copies larger than L2, so the routed experts come from DRAM. GB/s: bytes of
// the distinct routed experts' gate / up / down rows per call; TFLOP/s: 2 x T x top-k x 3 x d x ffe per call.
void bench_moe_layer(const char* name, int64_t d, int64_t ffe, int64_t n_expert, int64_t k, DType t) {
  std::printf("\n== %s experts: moe_experts, d %lld, ffe %lld, %lld experts, top %lld, %s ==\n", name,
              static_cast<long long>(d), static_cast<long long>(ffe), static_cast<long long>(n_expert),
              static_cast<long long>(k), dtype_name(t));
  auto stack = [&](int64_t K, int64_t N) {
    auto w = make_weights(t, K, N * n_expert, kRotateBytes / 3);
    w->view.ne[1] = N;
    w->view.ne[2] = n_expert;
    w->view.nb[2] = w->view.nb[1] * static_cast<size_t>(N);
    w->view.nb[3] = w->view.nb[2] * static_cast<size_t>(n_expert);
    return w;
  };
  auto gate = stack(d, ffe), up = stack(d, ffe), down = stack(ffe, d);
  const double expert_bytes = 3.0 * static_cast<double>(gate->bytes) / static_cast<double>(n_expert);
  kernels::CudaOpsOptions plain_opt, matvec_opt;
  plain_opt.moe_kernels = false;
  matvec_opt.moe_mma = false;
  kernels::CudaOps plain(*E->ctx, plain_opt), matvec(*E->ctx, matvec_opt), fast(*E->ctx);
  std::mt19937 rng(5);
  std::printf("%6s %8s %12s %8s %8s %12s %8s %9s %12s\n", "T", "experts", "kernels us", "GB/s", "TFLOP/s",
              "no-mma us", "TFLOP/s", "mma gain", "default us");
  const std::string tag = std::string(name) + "_";
  for (int64_t T : {1, 16, 512, 1024}) {
    // Uniform routing: k distinct experts a token.
    std::vector<int32_t> ids(static_cast<size_t>(k * T));
    std::vector<int32_t> pool(static_cast<size_t>(n_expert));
    std::vector<bool> used(static_cast<size_t>(n_expert), false);
    for (int64_t tk = 0; tk < T; ++tk) {
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int64_t j = 0; j < k; ++j) {
        ids[static_cast<size_t>(tk * k + j)] = pool[static_cast<size_t>(j)];
        used[static_cast<size_t>(pool[static_cast<size_t>(j)])] = true;
      }
    }
    const int64_t distinct = std::count(used.begin(), used.end(), true);
    HostTensor hids(DType::I32, k, T), hw(DType::F32, k, T), hx(DType::F32, d, T);
    std::memcpy(hids.bytes.data(), ids.data(), ids.size() * 4);
    fill_uniform(rng, hw.data<float>(), hw.n(), 0.f, 0.2f);
    fill_uniform(rng, hx.data<float>(), hx.n());
    DevTensor dids(*E, hids), dw(*E, hw), dx(*E, hx), out(*E, DType::F32, d, T);
    DevTensor sg(*E, DType::F32, ffe, k, T), su(*E, DType::F32, ffe, k, T), sy(*E, DType::F32, d, k, T);
    const kernels::MoeScratch s{sg.view, su.view, sy.view};
    auto run = [&](kernels::CudaOps& ops, int i) {
      kernels::ExpertGroup g;
      g.gate = gate->at(i);
      g.up = up->at(i);
      g.down = down->at(i);
      ops.moe_experts(g, dx.view, dids.view, dw.view, s, false, out.view);
    };
    const int iters = T >= 512 ? 10 : 50;
    const double ms = time_ms(iters, [&](int i) { run(fast, i); });
    const double ms_mv = time_ms(iters, [&](int i) { run(matvec, i); });
    const double ms_plain = T <= 16 ? time_ms(5, [&](int i) { run(plain, i); }) : 0.0;
    const double bytes = static_cast<double>(distinct) * expert_bytes;
    const double flop = 2.0 * static_cast<double>(T * k) * 3.0 * static_cast<double>(d * ffe);
    std::printf("%6lld %8lld %12.1f %8.0f %8.2f %12.1f %8.2f %8.2fx %12.1f\n", static_cast<long long>(T),
                static_cast<long long>(distinct), ms * 1e3, bytes / (ms * 1e6), flop / (ms * 1e9), ms_mv * 1e3,
                flop / (ms_mv * 1e9), ms_mv / ms, ms_plain * 1e3);
    const std::string sfx = "_T" + std::to_string(T);
    result(tag + "moe_experts_us" + sfx, ms * 1e3, "us");
    result(tag + "moe_experts_tflops" + sfx, flop / (ms * 1e9), "TFLOP/s");
    result(tag + "moe_matvec_us" + sfx, ms_mv * 1e3, "us");
    if (T <= 16) result(tag + "moe_default_us" + sfx, ms_plain * 1e3, "us");
  }
}

void bench_moe() {
  bench_moe_layer("qwen3-30b-a3b", 2048, 768, 128, 8, DType::Q4_K);
  bench_moe_layer("gpt-oss-20b", 2880, 2880, 32, 4, DType::MXFP4);
  // The router alone (moe_route, 128 experts, top 8, softmax and normalised).
  kernels::CudaOps fast(*E->ctx);
  std::mt19937 rng(9);
  const int64_t n_expert = 128, k = 8;
  for (int64_t T : {1, 512}) {
    HostTensor hl(DType::F32, n_expert, T);
    fill_uniform(rng, hl.data<float>(), hl.n(), -4.f, 4.f);
    DevTensor dl(*E, hl), ids(*E, DType::I32, k, T), w(*E, DType::F32, k, T);
    kernels::MoeRoute r;
    r.n_used = static_cast<int32_t>(k);
    r.normalize = true;
    const double ms = time_ms(100, [&](int) { fast.moe_route(dl.view, r, ids.view, w.view); });
    std::printf("moe_route T=%lld: %.1f us\n", static_cast<long long>(T), ms * 1e3);
    result("moe_route_us_T" + std::to_string(T), ms * 1e3, "us");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  kernels::CudaScratchShape shape;
  shape.max_tokens = 4096;
  shape.max_k = 14336;
  shape.max_n = 14336;
  E = env(&why, 24ull << 30, shape);
  if (E == nullptr) {
    std::fprintf(stderr, "bench_cuda_ops: %s\n", why.c_str());
    return 1;
  }
  // An experiments build's FERRY_CUDA_* switches apply to the default CudaOps (decode_ab.sh's A/B of
  // `layer`); the benchmarks that compare kernels build their own CudaOps with explicit options.
  E->ops = std::make_unique<kernels::CudaOps>(*E->ctx, kernels::with_experiments({}));
  std::printf("bench_cuda_ops on %s, %d SMs, cc %d\n", E->dev->name().c_str(), E->ctx->sm_count(),
              E->ctx->compute_capability());
  const std::string only = argc > 1 ? argv[1] : "";
  auto want = [&](const char* s) { return only.empty() || only == s; };
  bench_copy();
  if (want("matvec")) bench_matvec();
  if (want("layer")) bench_layer();
  if (want("crossover")) bench_crossover();
  if (want("gemm")) bench_gemm();
  if (want("attention")) bench_attention();
  if (want("moe")) bench_moe();
  return 0;
}
