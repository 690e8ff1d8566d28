// The statistic every profiled figure is made of. A figure is a series of samples, each tens of
// milliseconds of the same work, taken in rounds interleaved with the other figures' samples (so a
// burst of other work slows one sample of many figures, not every sample of one). Samples scatter on
// both sides: another process or a frequency dip slows one down, a lucky cache state or a timer edge
// speeds one up. The interquartile mean drops both tails and averages the middle, so a few outliers
// either way leave the figure where the clean samples are.
#pragma once

#include <vector>

namespace ferry::plan {

// Samples dropped from each end of a sorted series of n: a quarter, rounded to nearest ((n + 1) / 4),
// so 3-6 samples drop one each side, 7-10 drop two, 11-14 three. 0 for n < 3.
int trimmed_per_side(int n);

// The mean of `samples` without their trimmed_per_side lowest and highest values; the median of 3, the
// mean of 1 or 2; 0 for none. Non-finite samples count as outliers: they sort to the ends (NaN and
// +inf high, -inf low) and, trimmed, do not reach the mean.
double robust_mean(std::vector<double> samples);

// (q75 - q25) / median of `samples`, a relative spread for reports; 0 for fewer than 3 or a 0 median.
double relative_spread(std::vector<double> samples);

}  // namespace ferry::plan
