// The profiler's statistic: the interquartile mean of a figure's samples.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "plan/profile_stats.h"

namespace ferry::plan {
namespace {

TEST(ProfileStats, TrimsAQuarterEachSide) {
  EXPECT_EQ(trimmed_per_side(0), 0);
  EXPECT_EQ(trimmed_per_side(2), 0);
  EXPECT_EQ(trimmed_per_side(3), 1);
  EXPECT_EQ(trimmed_per_side(5), 1);
  EXPECT_EQ(trimmed_per_side(6), 1);
  EXPECT_EQ(trimmed_per_side(7), 2);
  EXPECT_EQ(trimmed_per_side(9), 2);
  EXPECT_EQ(trimmed_per_side(11), 3);
}

// The clean series scatters ±1 % around 100 GFLOP/s; a busy moment slows samples down (40, 55), a
// cache-resident or mistimed sample speeds one up (310), a failed one is NaN. The figure stays within
// 1 % of the clean value wherever the outliers land in the series.
TEST(ProfileStats, ASeriesWithInjectedOutliersGivesTheCleanValue) {
  const std::vector<double> clean = {99.0, 100.5, 101.0, 99.5, 100.0};
  EXPECT_NEAR(robust_mean(clean), 100.0, 0.5);
  std::vector<double> dirty = clean;
  dirty.insert(dirty.begin() + 1, 40.0);
  dirty.push_back(310.0);
  EXPECT_NEAR(robust_mean(dirty), 100.0, 1.0);  // 7 samples: 2 dropped each side
  dirty.insert(dirty.begin() + 3, 55.0);
  dirty.push_back(std::numeric_limits<double>::quiet_NaN());
  EXPECT_NEAR(robust_mean(dirty), 100.0, 1.0);  // 9 samples, 2 slow + 2 fast / failed outliers
  // Seven rounds with one burst of other work slowing two samples 3x: the plain mean would be 19 % low.
  const std::vector<double> rounds = {100.0, 33.0, 101.0, 99.0, 34.0, 100.5, 99.5};
  EXPECT_NEAR(robust_mean(rounds), 100.0, 1.0);
}

TEST(ProfileStats, SmallSeries) {
  EXPECT_EQ(robust_mean({}), 0.0);
  EXPECT_EQ(robust_mean({7.0}), 7.0);
  EXPECT_EQ(robust_mean({6.0, 8.0}), 7.0);
  EXPECT_EQ(robust_mean({1.0, 50.0, 7.0}), 7.0);  // the median of 3
}

TEST(ProfileStats, RelativeSpread) {
  EXPECT_EQ(relative_spread({1.0, 2.0}), 0.0);
  EXPECT_NEAR(relative_spread({100.0, 100.0, 100.0, 100.0, 100.0}), 0.0, 1e-12);
  // q25 = 95, q75 = 105, median 100 (linear between order statistics).
  EXPECT_NEAR(relative_spread({90.0, 95.0, 100.0, 105.0, 110.0}), 0.10, 1e-12);
}

}  // namespace
}  // namespace ferry::plan
