// AVX2 + AVX-VNNI kernels: the quantized direct (decode) and panel (prefill) kernels of the AVX2 level
// with the 256-bit vpdpbusd as their int8 dot (exact for any unsigned level, one instruction where
// AVX2 needs vpmaddubsw + vpmaddwd), layered over fill_avx2 for the kAvx2Vnni level. Same templates as
// the AVX2 and AVX-512 files (simd_direct_impl.h, panel_impl.h); compiled with the AVX2 flags plus
// -mavxvnni (sources.cmake); see the ODR rule in kernels.h.
#include <immintrin.h>

#include "kernels/cpu/dot_avxvnni256.h"

#include "kernels/cpu/panel_impl.h"

namespace ferry::kernels::cpu {

void fill_avx2_vnni(KernelTable* t) {
  constexpr int kMinQ = 8;  // as the AVX2 level's
  t->isa = CpuIsa::kAvx2Vnni;
  set_direct_quant(t);
  set_qpanels<V256>(t, kMinQ);
}

}  // namespace ferry::kernels::cpu
