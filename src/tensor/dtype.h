// Element types of tensors. The numeric values are GGUF/ggml's type ids (they are stored in files).
// Traits are one data table (name, elements per block, bytes per block); see dtype.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct DTypeTraits {
  DType type;
  const char* name;      // GGUF spelling: "F32", "Q4_K", ...
  int32_t block_elems;   // elements per block (1 for plain types)
  int32_t block_bytes;   // bytes per block
  bool quantized;        // block-quantized weight type
  bool weight_type;      // a type models may store weights in (supported by matmul)
};

// Traits of a known type; nullptr for an id ferry does not know (e.g. IQ types read from a file).
const DTypeTraits* dtype_traits(uint32_t id);
const DTypeTraits& traits(DType t);
inline const char* dtype_name(DType t) { return traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers that read
// files: use row_bytes_checked).
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = traits(t);
  return static_cast<size_t>(n / tr.block_elems) * static_cast<size_t>(tr.block_bytes);
}

// All weight types ferry computes with, in a stable order (tests iterate over this).
inline constexpr DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                         DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                                         DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Weight types only mixture-of-experts tensors come in (gpt-oss's experts): every Ops computes with them, the
// CUDA kernels in ggml's layout only (no split layout, no v2 decode kernels), so they stay out of kWeightTypes
// (whose tests cover those too).
inline constexpr DType kExpertWeightTypes[] = {DType::MXFP4};

// One past the largest DType id (tables indexed by id).
inline constexpr uint32_t kDTypeIdLimit = 40;

}  // namespace ferry
