// The AMX panel kernels (src/kernels/cpu/kernels_amx.cc) compiled a second time with the tile
// instructions emulated in plain C++, so that a machine without AMX checks the pack layout, the tile
// shapes (config rows / bytes per row, with the hardware's consistency rules asserted) and the epilogue
// against the AVX-512 panel path (test_cpu_amx.cc). Exports only fill_amx_emulated. Compiled with the
// AVX-512 flags (tests.cmake); everything else has internal linkage (the ODR rule in kernels.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace ferry::kernels::cpu {
namespace {

// One thread's tile state, as LDTILECFG leaves it: the 64-byte config and 8 tiles of 16 x 64 bytes.
struct EmuTiles {
  uint8_t cfg[64];
  bool configured;
  uint8_t t[8][16][64];
};
thread_local EmuTiles emu;

[[noreturn]] void emu_fail(const char* what, int tile) {
  std::fprintf(stderr, "AMX emulation: %s (tile %d)\n", what, tile);
  std::abort();
}
int emu_rows(int i) { return emu.cfg[48 + i]; }
int emu_colsb(int i) { return emu.cfg[16 + 2 * i] | emu.cfg[17 + 2 * i] << 8; }
void emu_check(int i) {
  if (!emu.configured) emu_fail("tile instruction before LDTILECFG", i);
  if (i < 0 || i >= 8 || emu_rows(i) == 0 || emu_colsb(i) == 0) emu_fail("tile not configured", i);
}

void emu_config(const void* cfg) {
  std::memcpy(emu.cfg, cfg, 64);
  if (emu.cfg[0] != 1) emu_fail("palette is not 1", -1);
  for (int i = 0; i < 16; ++i) {
    const int rows = emu_rows(i), colsb = emu_colsb(i);
    if (i >= 8 && (rows != 0 || colsb != 0)) emu_fail("palette 1 has 8 tiles", i);
    if (rows > 16 || colsb > 64 || (rows == 0) != (colsb == 0)) emu_fail("bad tile shape", i);
  }
  std::memset(emu.t, 0, sizeof(emu.t));  // LDTILECFG zeroes the tiles
  emu.configured = true;
}
void emu_load(int i, const void* base, long stride) {
  emu_check(i);
  std::memset(emu.t[i], 0, sizeof(emu.t[i]));
  for (int r = 0; r < emu_rows(i); ++r)
    std::memcpy(emu.t[i][r], static_cast<const uint8_t*>(base) + r * stride, static_cast<size_t>(emu_colsb(i)));
}
void emu_store(int i, void* base, long stride) {
  emu_check(i);
  for (int r = 0; r < emu_rows(i); ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, emu.t[i][r], static_cast<size_t>(emu_colsb(i)));
}
void emu_zero(int i) {
  emu_check(i);
  std::memset(emu.t[i], 0, sizeof(emu.t[i]));
}
// TDPBSSD: C[m][n] += sum_k A[m][k] * B[k / 4][4 n + k % 4], all bytes signed.
void emu_dpbssd(int c, int a, int b) {
  emu_check(c);
  emu_check(a);
  emu_check(b);
  if (emu_rows(c) != emu_rows(a) || emu_colsb(c) != emu_colsb(b) || emu_colsb(a) != 4 * emu_rows(b) ||
      emu_colsb(c) % 4 != 0 || emu_colsb(a) % 4 != 0)
    emu_fail("TDPBSSD shapes do not match", c);
  for (int m = 0; m < emu_rows(c); ++m)
    for (int n = 0; n < emu_colsb(c) / 4; ++n) {
      int32_t acc;
      std::memcpy(&acc, &emu.t[c][m][4 * n], 4);
      for (int k = 0; k < emu_colsb(a); ++k)
        acc += static_cast<int8_t>(emu.t[a][m][k]) * static_cast<int8_t>(emu.t[b][k / 4][4 * n + k % 4]);
      std::memcpy(&emu.t[c][m][4 * n], &acc, 4);
    }
}

}  // namespace
}  // namespace ferry::kernels::cpu

#define FERRY_AMX_EMULATED 1
#define FERRY_TILE_CONFIG(cfg) emu_config(cfg)
#define FERRY_TILE_LOAD(t, base, stride) emu_load(t, base, static_cast<long>(stride))
#define FERRY_TILE_STORE(t, buf) emu_store(t, buf, 64)
#define FERRY_TILE_ZERO(t) emu_zero(t)
#define FERRY_TILE_DPBSSD(c, a, b) emu_dpbssd(c, a, b)
#define FERRY_AMX_FILL fill_amx_emulated
#include "kernels/cpu/kernels_amx.cc"
