// The dtype traits table.
#include "tensor/dtype.h"

#include <cctype>

#include "base/status.h"
#include "tensor/quant_blocks.h"

namespace ferry {
namespace {

constexpr DTypeTraits kTable[] = {
    {DType::F32, "F32", 1, 4, false, true},
    {DType::F16, "F16", 1, 2, false, true},
    {DType::Q4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0), true, true},
    {DType::Q4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1), true, true},
    {DType::Q5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0), true, true},
    {DType::Q5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1), true, true},
    {DType::Q8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0), true, true},
    {DType::Q8_1, "Q8_1", kQK8_1, sizeof(BlockQ8_1), true, false},
    {DType::Q2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K), true, true},
    {DType::Q3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K), true, true},
    {DType::Q4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), true, true},
    {DType::Q5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K), true, true},
    {DType::Q6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), true, true},
    {DType::Q8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K), true, false},
    {DType::I8, "I8", 1, 1, false, false},
    {DType::I16, "I16", 1, 2, false, false},
    {DType::I32, "I32", 1, 4, false, false},
    {DType::I64, "I64", 1, 8, false, false},
    {DType::F64, "F64", 1, 8, false, false},
    {DType::BF16, "BF16", 1, 2, false, true},
    {DType::MXFP4, "MXFP4", kQKMXFP4, sizeof(BlockMXFP4), true, true},
};

}  // namespace

const DTypeTraits* dtype_traits(uint32_t id) {
  for (const auto& t : kTable)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const DTypeTraits& traits(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  FERRY_ASSERT(tr != nullptr);
  return *tr;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTable) {
    std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(name[i])) != n[i]) eq = false;
    if (eq) return t.type;
  }
  return std::nullopt;
}

}  // namespace ferry
