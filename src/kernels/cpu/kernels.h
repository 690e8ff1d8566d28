// The CPU kernel table: one set of function pointers per dispatch level (scalar, AVX2, AVX2 + AVX-VNNI,
// AVX-512, AMX),
// filled by per-ISA translation units compiled with their own -m flags (sources.cmake). CpuOps picks
// a table once from cpuid and never branches on the ISA again.
//
// Matmul: out[n, t] = sum_k W[k, n] x[k, t]. The activations are first converted once per call into
// the weight type's activation form ("act"); then either
//   direct: one weight row at a time against up to `direct_cols` act columns, decoding the weights in
//           registers (decode / small batches: memory-bound), or
//   panel:  kPanelRows weight rows are unpacked once into a lane-per-row panel (uint8 quads or floats)
//           and multiplied with kPanelCols act columns at a time (prefill: compute-bound).
// Quantized act layout (group size G = 32 for legacy types, 32 or 16 for k-quants):
//   [int8 q[K] | pad to 64][f32 dx[K/G] | pad][f32 sy[K/G] | pad][i32 qs[K/G] | pad] with
//   x[i] ~= dx[g] * q[i], qs[g] = sum(q of group g), sy[g] = dx[g] * qs[g] (Q8_1: ggml's fp16 s).
// Every weight group is unpacked as value[i] = scale[g] * u[i] + min[g] with u[i] unsigned 8-bit, so a
// group's dot is scale * dx * sum(u * q) + min * sy: one integer dot product and two float terms.
// Types whose min is a fixed multiple of the scale (Q4_0: -8, Q5_0: -16, Q8_0 as u = q + 128: -128;
// MXFP4 as u = (doubled E2M1 value) + 16 with the half E8M0 scale: -16)
// instead fold it into the integer dot exactly: sum((u - off) * q) = sum(u * q) - off * qs, as ggml's
// integer dot of signed levels.
//
// ODR rule for the per-ISA files: everything they define lives in an anonymous namespace and they call
// no external inline function (std templates, quant_blocks.h helpers): the linker could otherwise keep
// an AVX-512 copy of such a function for the whole program. Only fill_<isa>() is exported.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace ferry::kernels::cpu {

inline constexpr int kPanelRows = 16;  // panel rows: one 32-bit lane each (a zmm, or two ymm)
inline constexpr int kPanelCols = 8;   // act columns per panel-kernel call
inline constexpr int kMaxDirectCols = 4;

struct MatArgs {
  int64_t K = 0;
  const uint8_t* w = nullptr;    // first weight row (direct) or the packed panel (panel_mul)
  size_t w_stride = 0;           // bytes between weight rows (direct)
  int64_t n_rows = 0;            // direct: any; panel_mul: <= kPanelRows
  const uint8_t* act = nullptr;  // first act column
  size_t act_stride = 0;         // bytes between act columns
  int n_cols = 0;                // <= direct_cols (direct) or kPanelCols (panel_mul)
  float* out = nullptr;          // out[c * out_stride + r]
  size_t out_stride = 0;         // in floats
  bool accumulate = false;       // float panel kernels (K blocks after the first): out += the product
};

struct MatKernel {
  int group = 0;  // act group size; 0: float act (F32 values, or BF16 pairs when act_bf16)
  size_t (*act_bytes)(int64_t K) = nullptr;
  void (*quantize)(const float* x, int64_t K, void* act) = nullptr;
  void (*direct)(const MatArgs& a) = nullptr;
  int direct_cols = 1;
  // Panel path; pack == nullptr when this level has none for the type.
  size_t (*panel_bytes)(int64_t K) = nullptr;
  // Packs n_rows (<= kPanelRows) weight rows; rows past n_rows are zero. tmp: pack_tmp_bytes(K).
  void (*pack)(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t* tmp) = nullptr;
  size_t (*pack_tmp_bytes)(int64_t K) = nullptr;
  void (*panel_mul)(const MatArgs& a) = nullptr;  // null for float panels (they have panel_il)
  int panel_min_tokens = 1 << 30;  // use the panel path from this many act columns on
  // The panel path hands panel_mul the act's int8 levels as unsigned bytes q + 128 (the sign bit
  // flipped after quantize), for kernels that take the act as vpmaddubsw's unsigned operand.
  bool panel_act_u8 = false;
  // Float panels only ([K][kPanelRows] f32 panel, F32 act), optional:
  //   panel_il: one or two consecutive packed panels (a.w; a.w + a.w_stride when a.n_rows > kPanelRows)
  //             times up to panel_il_cols act columns held interleaved: a.act = [K][panel_il_cols] f32
  //             (element k of column c at k * panel_il_cols + c; a.act_stride unused);
  //   panel_k_block: K is walked in blocks of this many elements, each block applied to every column
  //             group before the next (the panels' block stays in L1), a.accumulate after the first.
  void (*panel_il)(const MatArgs& a) = nullptr;
  int panel_il_cols = 0;
  int64_t panel_k_block = 0;
};

struct KernelTable {
  CpuIsa isa = CpuIsa::kScalar;
  MatKernel mat[kDTypeIdLimit];  // indexed by DType id; only weight types are set

  // Rows of n floats.
  double (*sum_sq)(const float* x, int64_t n) = nullptr;
  void (*mul_scale)(const float* x, float s, const float* w, float* y, int64_t n) = nullptr;  // y = x*s*w
  void (*add)(const float* a, const float* b, float* y, int64_t n) = nullptr;
  void (*scale)(const float* x, float s, float* y, int64_t n) = nullptr;
  // silu(g) * u, or gelu_tanh(g) * u with ggml's F16 GELU (x <= -10: 0; x >= 10: x; else the value
  // of fp16(x) rounded to fp16), or ggml's swiglu_oai (scalar, libm expf).
  void (*glu)(const float* g, const float* u, float* y, int64_t n, Activation act) = nullptr;
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n) = nullptr;
  // Rotates pairs (x[i0], x[i1]) by angles with cos cs[i], sin sn[i], i < half; neox: i1 = i + half.
  void (*rope)(float* x, const float* cs, const float* sn, int64_t half, bool neox) = nullptr;

  // Attention over F16 K/V rows. q: ng heads of hd floats (q_stride apart); cells: n cell indices.
  // scores: s[g * n + j] = softcap(scale * q_g . k_cell_j).
  void (*attn_scores)(const float* q, int64_t q_stride, int ng, const uint8_t* k, size_t k_stride,
                      const int32_t* cells, int n, int hd, float scale, float softcap, float* s) = nullptr;
  // In place: s[j] = fp16(exp(s[j] - max) / sum) (ggml rounds the probabilities to F16 for the V
  // product; the sum is taken in double). sink: a logit that joins max and sum without a value row
  // (attention sinks), -inf for none.
  void (*softmax)(float* s, int n, float sink) = nullptr;
  // In place: s[j] = exp(s[j] - m) in F32; returns their sum (the vision tower's online softmax).
  float (*exp_sum)(float* s, int64_t n, float m) = nullptr;
  // A small F32 GEMM of row-major tiles: c[i * ldc + j] (+= with accumulate) sum_k a[i * lda + k] *
  // b[k * ldb + j], i < m, j < n (attention_segments' Q.K^T and P.V tiles).
  void (*gemm_f32)(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                   int64_t n, int64_t k, bool accumulate) = nullptr;
  // y = fp16(x) as floats (ggml's conversion of q for the F16 K product).
  void (*round_f16)(const float* x, float* y, int64_t n) = nullptr;
  // out[g * hd + i] = sum_j p[g * n + j] * v_cell_j[i].
  void (*attn_values)(const float* p, int ng, const uint8_t* v, size_t v_stride, const int32_t* cells, int n,
                      int hd, float* out) = nullptr;

  // Decode attention split over cells (null where the level has none; CpuOps then splits by head).
  // A cell's K / V row holds all n_kv heads (n_kv * hd halfs, contiguous), so walking cells streams
  // the cache; walking one head's slices instead touches 2 * hd of every n_kv * 2 * hd bytes and runs
  // at DRAM latency rather than bandwidth. q: n_kv * group heads of hd floats (head h *
  // group + g uses KV head h), already rounded to F16 values.
  // s[head * s_stride + j] = softcap(scale * q_head . k_cell_j) for j < n.
  void (*attn_cells_scores)(const float* q, int n_kv, int group, int hd, const uint8_t* k, size_t k_stride,
                            const int32_t* cells, int n, float scale, float softcap, float* s,
                            int64_t s_stride) = nullptr;
  // out[head * hd + i] += sum_j p[head * p_stride + j] * v_cell_j[head / group][i], j in order.
  void (*attn_cells_values)(const float* p, int64_t p_stride, int n_kv, int group, int hd, const uint8_t* v,
                            size_t v_stride, const int32_t* cells, int n, float* out) = nullptr;
  int attn_cells_hd_multiple = 0;  // the cells kernels need hd % this == 0
};

// The table of a supported level (built once, immutable).
const KernelTable& kernel_table(CpuIsa isa);

// Fillers, one per ISA translation unit.
void fill_scalar(KernelTable* t);
void fill_avx2(KernelTable* t);
void fill_avx2_vnni(KernelTable* t);  // over fill_avx2: the quantized kernels with AVX-VNNI
void fill_avx512(KernelTable* t);
void fill_avx512_panel(KernelTable* t);
void fill_avx512_kquants(KernelTable* t);
void fill_avx512_legacy(KernelTable* t);  // needs AVX512_VBMI too (checks cpuid itself)
// AMX-INT8 panel kernels for the quantized types (kernels_amx.cc); call only when amx_usable().
void fill_amx(KernelTable* t);

}  // namespace ferry::kernels::cpu
