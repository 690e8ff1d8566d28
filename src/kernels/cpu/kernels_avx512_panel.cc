// AVX-512 panel kernels (prefill): placeholder while the panel path is written.
#include "kernels/cpu/kernels.h"

namespace ferry::kernels::cpu {
void fill_avx512_panel(KernelTable*) {}
}  // namespace ferry::kernels::cpu
