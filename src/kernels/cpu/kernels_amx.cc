// AMX-INT8 panel kernels (quantized prefill) for CPUs with AMX tiles (Sapphire Rapids and later),
// layered over the AVX-512 table by fill_amx only when dispatch finds AMX usable (cpuid, XCR0 and the
// Linux permission request: base/cpu_info amx_usable). Direct (decode) kernels stay AVX-512.
//   panel: the AVX-512 panel layout (kernels_avx512_panel.cc: quads [K/4][16] of 4 levels per row, then
//          scale[K/G][16] and min[K/G][16] as floats) with SIGNED levels u - Off (Q4_0: u - 8, Q5_0:
//          u - 16, Q8_0: the raw q; the other types' levels are < 64 and unchanged). A group's G/4 quad
//          rows are then exactly a TDPBSSD B tile in the VNNI layout (G/4 rows of 16 x 4 bytes).
//   A tile: n_cols act columns as they lie (row t = column t's G int8 of the group, act_stride apart).
//   C tile: C[t][r] = sum((u - Off) * q), the same exact int32 as the AVX-512 kernel's offset-folded
//          integer dot; one TDPBSSD per group (K of a tile = G, so each group's sum stays separate).
// Epilogue per group and column, in the AVX-512 kernel's order: acc += cvt(C[t]) * (scale * dx), and
// for Off == 0 acc += min * sy: results equal the AVX-512 panel path bit for bit (tests/kernels/
// test_cpu_amx.cc). Tile config (LDTILECFG) is per thread: each call checks a thread-local copy of what
// this thread last loaded. Same ODR rule as kernels.h; tests compile this file a second time with the
// tile instructions emulated (FERRY_AMX_EMULATED, tests/kernels/amx_emulated.cc).
#include <immintrin.h>

#include "kernels/cpu/dot_vnni256.h"

#include "kernels/cpu/panel_impl.h"

#ifndef FERRY_AMX_EMULATED
// Own wrappers instead of GCC's _tile_* macros, whose ldtilecfg declares 8 of its 64 bytes as read.
// The tile loads read only act and panel bytes, which nothing writes while a kernel runs (no memory
// operand needed); a tile store declares the 1 KB buffer it writes, which orders the epilogue's reads.
#define FERRY_TILE_CONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(cfg)))
#define FERRY_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)))
#define FERRY_TILE_STORE(t, buf)                                                     \
  __asm__ volatile("tilestored %%tmm" #t ", (%1,%2,1)"                               \
                   : "=m"(*reinterpret_cast<int32_t(*)[kTileInts]>(buf)) \
                   : "r"(buf), "r"(64L))
#define FERRY_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
// C += A . B on signed bytes (AT&T operand order: B, A, C).
#define FERRY_TILE_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define FERRY_AMX_FILL fill_amx
#endif

namespace ferry::kernels::cpu {
namespace {

static_assert(R == 16, "a C tile row holds 16 int32: one per panel row");
static_assert(kPanelCols <= 8, "amx_panel_cols dispatches up to 8 act columns (tile rows <= 16)");
constexpr int kTileInts = 16 * R;  // a C tile of up to 16 x 16 int32, stored with 64-byte rows

// ---- tile configuration ----------------------------------------------------------------------------
// Palette 1. Tiles 0-3: C (M x 16 int32), 4-5: A (M x G bytes), 6-7: B (G/4 x 64 bytes). Unused tiles
// must be 0 x 0.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// The (G, M) this thread's tiles are configured for; 0: none yet. A mirror of per-thread CPU state,
// so that a call whose shape matches the last one skips the LDTILECFG.
thread_local uint32_t tls_tile_shape = 0;

inline void configure_tiles(int G, int M) {
  const uint32_t shape = static_cast<uint32_t>(G) << 8 | static_cast<uint32_t>(M);
  if (tls_tile_shape == shape) return;
  TileConfig cfg;
  for (int i = 0; i < 4; ++i) {
    cfg.rows[i] = static_cast<uint8_t>(M);
    cfg.colsb[i] = 4 * R;
  }
  for (int i = 4; i < 6; ++i) {
    cfg.rows[i] = static_cast<uint8_t>(M);
    cfg.colsb[i] = static_cast<uint16_t>(G);
  }
  for (int i = 6; i < 8; ++i) {
    cfg.rows[i] = static_cast<uint8_t>(G / 4);
    cfg.colsb[i] = 4 * R;
  }
  FERRY_TILE_CONFIG(&cfg);
  tls_tile_shape = shape;
}

// ---- pack: the AVX-512 panel with signed levels (unpack_row_legacy<Dec, true>) --------------------
// ---- multiply ----------------------------------------------------------------------------------------
// M act columns (tile rows) times one panel. Groups go 4 at a time through C tiles 0-3 (A and B tiles
// alternate 4/6 and 5/7; the C tiles land in a 4 KB stack buffer, L1), so that out-of-order execution
// can run the next step's tile products during this step's epilogue. The epilogue bounds the speed: per
// group and column 3 vector ops (Off == 0: 4) for 16 rows x G, against the VNNI kernel's G/4 vpdpbusd
// plus the same float work (estimate, SPR ports p0/p5: ~4x the AVX-512 panel kernel for Q4_0).
template <int G, int Off, int M>
void amx_panel_mul(const MatArgs& a) {
  configure_tiles(G, M);
  const int64_t K = a.K, ng = K / G;
  const uint8_t* pq = a.w;  // group g's B tile: G / 4 rows of 64 bytes at pq + g * G * R
  const auto* psc = reinterpret_cast<const float*>(a.w + static_cast<size_t>(K) * R);
  const float* pmn = psc + ng * R;
  const ActView v0 = act_view(a.act, K, G);
  const size_t off_dx = reinterpret_cast<const uint8_t*>(v0.dx) - a.act;
  const size_t off_sy = reinterpret_cast<const uint8_t*>(v0.sy) - a.act;
  const size_t S = a.act_stride;
  alignas(64) int32_t cbuf[4][kTileInts];
  __m512 acc[M];
  for (int t = 0; t < M; ++t) acc[t] = _mm512_setzero_ps();
  constexpr size_t kB = static_cast<size_t>(G) * R;  // bytes of one group's B tile
  for (int64_t g = 0; g < ng; g += 4) {
    const int n = static_cast<int>(ng - g < 4 ? ng - g : 4);  // groups in this step
    const uint8_t* q = a.act + g * G;
    const uint8_t* b = pq + static_cast<size_t>(g) * kB;
    FERRY_TILE_LOAD(4, q, S);
    FERRY_TILE_LOAD(6, b, 4 * R);
    FERRY_TILE_ZERO(0);
    FERRY_TILE_DPBSSD(0, 4, 6);
    if (n > 1) {
      FERRY_TILE_LOAD(5, q + G, S);
      FERRY_TILE_LOAD(7, b + kB, 4 * R);
      FERRY_TILE_ZERO(1);
      FERRY_TILE_DPBSSD(1, 5, 7);
    }
    if (n > 2) {
      FERRY_TILE_LOAD(4, q + 2 * G, S);
      FERRY_TILE_LOAD(6, b + 2 * kB, 4 * R);
      FERRY_TILE_ZERO(2);
      FERRY_TILE_DPBSSD(2, 4, 6);
    }
    if (n > 3) {
      FERRY_TILE_LOAD(5, q + 3 * G, S);
      FERRY_TILE_LOAD(7, b + 3 * kB, 4 * R);
      FERRY_TILE_ZERO(3);
      FERRY_TILE_DPBSSD(3, 5, 7);
    }
    FERRY_TILE_STORE(0, cbuf[0]);
    if (n > 1) FERRY_TILE_STORE(1, cbuf[1]);
    if (n > 2) FERRY_TILE_STORE(2, cbuf[2]);
    if (n > 3) FERRY_TILE_STORE(3, cbuf[3]);
    // Epilogue, groups in order (the AVX-512 kernel's float order).
    for (int j = 0; j < n; ++j) {
      const __m512 sc = _mm512_loadu_ps(psc + (g + j) * R);
      const uint8_t* dxp = a.act + off_dx + 4 * (g + j);
      for (int t = 0; t < M; ++t) {
        const __m512 dx = _mm512_set1_ps(*reinterpret_cast<const float*>(dxp + t * S));
        const __m512i ci = _mm512_load_si512(cbuf[j] + t * R);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, dx), acc[t]);
        if constexpr (Off == 0) {
          const __m512 sy = _mm512_set1_ps(*reinterpret_cast<const float*>(a.act + off_sy + 4 * (g + j) + t * S));
          acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(pmn + (g + j) * R), sy, acc[t]);
        }
      }
    }
  }
  const __mmask16 m = static_cast<__mmask16>((1u << a.n_rows) - 1);
  for (int t = 0; t < M; ++t) _mm512_mask_storeu_ps(a.out + t * a.out_stride, m, acc[t]);
}

template <int G, int Off>
void amx_panel_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return amx_panel_mul<G, Off, 1>(a);
    case 2: return amx_panel_mul<G, Off, 2>(a);
    case 3: return amx_panel_mul<G, Off, 3>(a);
    case 4: return amx_panel_mul<G, Off, 4>(a);
    case 5: return amx_panel_mul<G, Off, 5>(a);
    case 6: return amx_panel_mul<G, Off, 6>(a);
    case 7: return amx_panel_mul<G, Off, 7>(a);
    default: return amx_panel_mul<G, Off, 8>(a);
  }
}

template <int G, int Off = 0>
void set_panel(KernelTable* t, DType type, void (*pk)(int64_t, const uint8_t*, size_t, int, uint8_t*, uint8_t*)) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = qpanel_bytes<G>;
  m.pack_tmp_bytes = qpanel_tmp_bytes<G>;
  m.pack = pk;
  m.panel_mul = amx_panel_cols<G, Off>;
  // panel_min_tokens: the AVX-512 level's (the direct kernels below it are the same).
}

}  // namespace

void FERRY_AMX_FILL(KernelTable* t) {
  set_panel<32, 8>(t, DType::Q4_0, qpack<V512, 32, unpack_row_legacy<DecQ4_0, true>>);
  set_panel<32>(t, DType::Q4_1, qpack<V512, 32, unpack_row_legacy<DecQ4_1, true>>);
  set_panel<32, 16>(t, DType::Q5_0, qpack<V512, 32, unpack_row_legacy<DecQ5_0, true>>);
  set_panel<32>(t, DType::Q5_1, qpack<V512, 32, unpack_row_legacy<DecQ5_1, true>>);
  set_panel<32, 128>(t, DType::Q8_0, qpack<V512, 32, unpack_row_legacy<DecQ8_0, true>>);
  set_panel<16>(t, DType::Q2_K, qpack<V512, 16, unpack_row_kquant<DecQ2_K>>);
  set_panel<16>(t, DType::Q3_K, qpack<V512, 16, unpack_row_kquant<DecQ3_K>>);
  set_panel<32>(t, DType::Q4_K, qpack<V512, 32, unpack_row_kquant<DecQ4_K>>);
  set_panel<32>(t, DType::Q5_K, qpack<V512, 32, unpack_row_kquant<DecQ5_K>>);
  set_panel<16>(t, DType::Q6_K, qpack<V512, 16, unpack_row_kquant<DecQ6_K>>);
}

}  // namespace ferry::kernels::cpu
