// AVX512_BF16 kernels: placeholder.
#include "kernels/cpu/kernels.h"

namespace ferry::kernels::cpu {
void fill_avx512_bf16(KernelTable*) {}
}  // namespace ferry::kernels::cpu
