// ggml <-> split layout repacking (see repack.h): a byte shuffle per row, driven by the plane table.
#include "tensor/repack.h"

#include <cstring>

#include "base/status.h"

namespace ferry {

int split_planes(DType t, SplitPlane* planes) {
  // Offsets and sizes are those of the block structs in quant_blocks.h.
  switch (t) {
    case DType::Q4_0:
      planes[0] = {2, 16};   // qs
      planes[1] = {0, 2};    // d
      return 2;
    case DType::Q4_1:
      planes[0] = {4, 16};   // qs
      planes[1] = {0, 4};    // d, m
      return 2;
    case DType::Q5_0:
      planes[0] = {6, 16};   // qs
      planes[1] = {2, 4};    // qh
      planes[2] = {0, 2};    // d
      return 3;
    case DType::Q5_1:
      planes[0] = {8, 16};   // qs
      planes[1] = {4, 4};    // qh
      planes[2] = {0, 4};    // d, m
      return 3;
    case DType::Q8_0:
      planes[0] = {2, 32};   // qs
      planes[1] = {0, 2};    // d
      return 2;
    case DType::Q2_K:
      planes[0] = {16, 64};  // qs
      planes[1] = {0, 16};   // scales
      planes[2] = {80, 4};   // d, dmin
      return 3;
    case DType::Q3_K:
      planes[0] = {32, 64};  // qs
      planes[1] = {0, 32};   // hmask
      planes[2] = {96, 12};  // scales
      planes[3] = {108, 2};  // d
      return 4;
    case DType::Q6_K:
      planes[0] = {0, 128};    // ql
      planes[1] = {128, 64};   // qh
      planes[2] = {192, 16};   // scales
      planes[3] = {208, 2};    // d
      return 4;
    default:
      return 0;
  }
}

size_t split_plane_offset(DType t, int64_t K, int p) {
  SplitPlane planes[kMaxSplitPlanes];
  const int n = split_planes(t, planes);
  FERRY_ASSERT(p >= 0 && p < n);
  const size_t nblocks = static_cast<size_t>(K / traits(t).block_elems);
  size_t off = 0;
  for (int i = 0; i < p; ++i) off += nblocks * static_cast<size_t>(planes[i].bytes);
  return off;
}

bool split_layout_supported(DType t, int64_t K) {
  // The types whose split rows the CUDA kernels read (decode, prefill dequantization, embedding).
  constexpr DType kDeviceSplitTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                         DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q6_K};
  bool device = false;
  for (DType d : kDeviceSplitTypes) device |= d == t;
  if (!device) return false;
  SplitPlane planes[kMaxSplitPlanes];
  if (split_planes(t, planes) == 0) return false;
  const int64_t be = traits(t).block_elems;
  return K > 0 && K % be == 0 && row_bytes(t, K) % 16 == 0;
}

namespace {

void repack(DType t, int64_t K, int64_t rows, const void* src, void* dst, bool to_split) {
  FERRY_ASSERT_MSG(split_layout_supported(t, K), "no split layout for this type / row length");
  SplitPlane planes[kMaxSplitPlanes];
  const int np = split_planes(t, planes);
  const int64_t nblocks = K / traits(t).block_elems;
  const size_t bb = static_cast<size_t>(traits(t).block_bytes);
  const size_t rb = row_bytes(t, K);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* s = static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * rb;
    auto* d = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    size_t plane_off = 0;
    for (int p = 0; p < np; ++p) {
      const size_t n = static_cast<size_t>(planes[p].bytes);
      for (int64_t i = 0; i < nblocks; ++i) {
        const size_t g = static_cast<size_t>(i) * bb + static_cast<size_t>(planes[p].offset);  // ggml
        const size_t q = plane_off + static_cast<size_t>(i) * n;                                // split
        if (to_split) {
          std::memcpy(d + q, s + g, n);
        } else {
          std::memcpy(d + g, s + q, n);
        }
      }
      plane_off += static_cast<size_t>(nblocks) * n;
    }
    FERRY_ASSERT(plane_off == rb);
  }
}

}  // namespace

void repack_to_split(DType t, int64_t K, int64_t rows, const void* ggml_src, void* split_dst) {
  repack(t, K, rows, ggml_src, split_dst, true);
}

void repack_from_split(DType t, int64_t K, int64_t rows, const void* split_src, void* ggml_dst) {
  repack(t, K, rows, split_src, ggml_dst, false);
}

}  // namespace ferry
