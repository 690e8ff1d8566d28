// AVX-512 panel kernels (prefill): the shared panel kernels of panel_impl.h on 512-bit vectors (V512),
// one zmm lane per panel row, vpdpbusd for the quantized types. All 8 act columns of a call stay in
// registers: 16 int32 accumulators (two chains per column), 8 float accumulators, 2 panel rows.
#include <immintrin.h>

#include "kernels/cpu/dot_vnni256.h"

#include "kernels/cpu/panel_float_impl.h"

namespace ferry::kernels::cpu {
namespace {

// Float panels: 12 interleaved columns (24 accumulators + 2 panel rows + a broadcast fill the 32 zmm,
// 14 spilled) and K blocks of 512: a pair's block is 64 KB (L2; the act's block 24 KB), so the panels of
// a group (4 x 16 rows; up to 3.7 MB at K = 14336) are not streamed from the LLC once per column group.
// Larger K blocks run slightly faster on one thread (bench_cpu_kernels matmul/F16/avx512/512); 512
// keeps a pair's block in L2.
constexpr int kFIlCols = 12;
constexpr int64_t kFKBlock = 512;

}  // namespace

void fill_avx512_panel(KernelTable* t) {
  // From this many tokens the panel path beats the direct one (bench/micro: matmul by tokens).
  constexpr int kMinQ = 8, kMinF = 8;
  set_qpanels<V512>(t, kMinQ);
  set_fpanels<V512, kFIlCols>(t, kMinF, kFKBlock);
}

}  // namespace ferry::kernels::cpu
