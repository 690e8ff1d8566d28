// Split layout (tensor/repack.h): the supported-shape rule, plane offsets, ggml -> split -> ggml round trips
// over random bytes with odd row counts, and that each split plane holds exactly its ggml field.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/repack.h"

namespace ferry {
namespace {

constexpr DType kSplitTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                  DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q6_K};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Repack, SupportedRule) {
  EXPECT_TRUE(split_layout_supported(DType::Q4_0, 256));
  EXPECT_TRUE(split_layout_supported(DType::Q4_0, 4096));
  EXPECT_TRUE(split_layout_supported(DType::Q4_0, 14336));
  EXPECT_FALSE(split_layout_supported(DType::Q4_0, 128));   // 4 blocks x 18 B = 72 B
  EXPECT_FALSE(split_layout_supported(DType::Q4_0, 4000));  // not a whole number of blocks
  EXPECT_FALSE(split_layout_supported(DType::Q4_0, 0));
  EXPECT_TRUE(split_layout_supported(DType::Q8_0, 256));
  EXPECT_FALSE(split_layout_supported(DType::Q8_0, 96));
  EXPECT_TRUE(split_layout_supported(DType::Q6_K, 2048));
  EXPECT_TRUE(split_layout_supported(DType::Q6_K, 4096));
  EXPECT_TRUE(split_layout_supported(DType::Q6_K, 14336));   // 56 super-blocks
  EXPECT_FALSE(split_layout_supported(DType::Q6_K, 256));
  EXPECT_FALSE(split_layout_supported(DType::Q6_K, 5120));   // 20 super-blocks x 210 B
  EXPECT_TRUE(split_layout_supported(DType::Q5_1, 64));
  EXPECT_FALSE(split_layout_supported(DType::Q5_1, 32));
  EXPECT_TRUE(split_layout_supported(DType::Q4_1, 128));
  EXPECT_FALSE(split_layout_supported(DType::Q4_1, 64));
  EXPECT_TRUE(split_layout_supported(DType::Q5_0, 256));
  EXPECT_FALSE(split_layout_supported(DType::Q5_0, 128));
  EXPECT_TRUE(split_layout_supported(DType::Q2_K, 1024));
  EXPECT_FALSE(split_layout_supported(DType::Q2_K, 512));
  EXPECT_TRUE(split_layout_supported(DType::Q3_K, 2048));
  EXPECT_FALSE(split_layout_supported(DType::Q3_K, 1024));
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_K, DType::Q5_K, DType::Q8_1, DType::Q8_K}) {
    EXPECT_FALSE(split_layout_supported(t, 4096)) << dtype_name(t);
  }
  // The rule is exactly: a split layout exists and the row size is a multiple of 16.
  for (DType t : kSplitTypes) {
    const int be = traits(t).block_elems;
    for (int64_t K = be; K <= 64 * 256; K += be) {
      EXPECT_EQ(split_layout_supported(t, K), row_bytes(t, K) % 16 == 0) << dtype_name(t) << " K=" << K;
    }
  }
}

TEST(Repack, PlanesCoverTheBlock) {
  for (DType t : kSplitTypes) {
    SplitPlane p[kMaxSplitPlanes];
    const int n = split_planes(t, p);
    ASSERT_GT(n, 0);
    std::vector<int> seen(static_cast<size_t>(traits(t).block_bytes), 0);
    for (int i = 0; i < n; ++i)
      for (int b = 0; b < p[i].bytes; ++b) ++seen[static_cast<size_t>(p[i].offset + b)];
    for (size_t b = 0; b < seen.size(); ++b) EXPECT_EQ(seen[b], 1) << dtype_name(t) << " byte " << b;
    // Quants first, so they start the row; plane offsets add up.
    const int64_t K = 4096, nb = K / traits(t).block_elems;
    EXPECT_EQ(split_plane_offset(t, K, 0), 0u);
    for (int i = 1; i < n; ++i)
      EXPECT_EQ(split_plane_offset(t, K, i), split_plane_offset(t, K, i - 1) + static_cast<size_t>(nb * p[i - 1].bytes));
  }
  EXPECT_EQ(split_plane_offset(DType::Q4_0, 4096, 1), 2048u);  // d after 128 x 16 B of nibbles
  EXPECT_EQ(split_plane_offset(DType::Q8_0, 4096, 1), 4096u);
  EXPECT_EQ(split_plane_offset(DType::Q6_K, 4096, 1), 2048u);  // qh
  EXPECT_EQ(split_plane_offset(DType::Q6_K, 4096, 2), 3072u);  // scales
  EXPECT_EQ(split_plane_offset(DType::Q6_K, 4096, 3), 3328u);  // d
}

TEST(Repack, RoundTripAndFieldPlacement) {
  uint32_t seed = 1;
  for (DType t : kSplitTypes) {
    SplitPlane p[kMaxSplitPlanes];
    const int np = split_planes(t, p);
    const int be = traits(t).block_elems;
    const size_t bb = static_cast<size_t>(traits(t).block_bytes);
    for (int64_t K : {64, 128, 256, 1024, 2048, 4096, 14336}) {
      if (!split_layout_supported(t, K)) continue;
      for (int64_t rows : {1, 3, 7, 33}) {
        const size_t rb = row_bytes(t, K);
        const auto src = random_bytes(rb * static_cast<size_t>(rows), seed++);
        std::vector<uint8_t> split(src.size(), 0), back(src.size(), 0);
        repack_to_split(t, K, rows, src.data(), split.data());
        repack_from_split(t, K, rows, split.data(), back.data());
        EXPECT_EQ(back, src) << dtype_name(t) << " K=" << K << " rows=" << rows;
        // Every field of every block sits where repack.h says.
        const int64_t nb = K / be;
        bool ok = true;
        for (int64_t r = 0; r < rows && ok; ++r) {
          for (int pl = 0; pl < np && ok; ++pl) {
            const size_t base = static_cast<size_t>(r) * rb + split_plane_offset(t, K, pl);
            for (int64_t i = 0; i < nb && ok; ++i) {
              ok = std::memcmp(split.data() + base + static_cast<size_t>(i * p[pl].bytes),
                               src.data() + static_cast<size_t>(r) * rb + static_cast<size_t>(i) * bb +
                                   static_cast<size_t>(p[pl].offset),
                               static_cast<size_t>(p[pl].bytes)) == 0;
            }
          }
        }
        EXPECT_TRUE(ok) << dtype_name(t) << " K=" << K << " rows=" << rows;
      }
    }
  }
}

// Rows are independent: repacking a row range equals the same range of the whole repack (TensorView::rows
// slices of a split tensor stay valid).
TEST(Repack, RowsAreIndependent) {
  for (DType t : kSplitTypes) {
    const int64_t K = 4096, rows = 9;
    const size_t rb = row_bytes(t, K);
    const auto src = random_bytes(rb * rows, 99);
    std::vector<uint8_t> all(src.size()), part(rb * 4);
    repack_to_split(t, K, rows, src.data(), all.data());
    repack_to_split(t, K, 4, src.data() + 3 * rb, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), all.data() + 3 * rb, part.size())) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferry
