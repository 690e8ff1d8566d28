// Internal helpers shared by the GGUF reader and writer (not part of the module's interface):
// the file constants, value type sizes, names of ggml tensor types ferry does not support, and the
// overflow-checked tensor size computation both sides must agree on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

namespace ferry::gguf::internal {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr size_t kDefaultAlignment = 32;
inline constexpr size_t kMaxAlignment = size_t{1} << 30;
inline constexpr int kMaxDims = 4;
// Arrays of arrays are legal; deeper than this is treated as hostile (keeps recursion bounded).
inline constexpr int kMaxArrayDepth = 8;
// Every metadata value costs ~48 bytes in memory however small it is in the file (a u8 array item:
// 1 byte), so the total is capped at 8M values (~400 MB worst case). Real models hold < 1M
// (llama3: 128k tokens + 280k merges + 128k token types).
inline constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;

inline bool value_type_valid(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

// Bytes of a fixed-size value; 0 for string and array.
inline size_t value_fixed_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

// The fewest bytes one value of type t can occupy in a file (a string: its u64 length; an array:
// its u32 element type + u64 count). Used to bound counts before anything is allocated.
inline size_t value_min_size(ValueType t) {
  if (t == ValueType::kString) return 8;
  if (t == ValueType::kArray) return 12;
  return value_fixed_size(t);
}

inline bool is_unsigned_type(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 || t == ValueType::kUint64;
}
inline bool is_signed_type(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 || t == ValueType::kInt64;
}

// Names of ggml tensor types that exist but ferry does not compute with (IQ*, TQ*, ...); nullptr
// for ids ggml never defined.
const char* unsupported_ggml_type_name(uint32_t id);

// Bytes of a tensor of the given type and shape (ne[0] innermost, unused dims 1). Returns false on a
// non-positive dim, ne[0] not a multiple of the block, or overflow of elements or bytes.
bool tensor_nbytes(const DTypeTraits& tr, const int64_t ne[4], size_t* out);

inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
inline bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace ferry::gguf::internal
