// Sampler tests: greedy and its tie-breaking, each filter (top-k, top-p, min-p), temperature, the
// repetition penalty and its window, seeding. Distribution checks use fixed seeds and many draws, with
// bounds several standard deviations wide so they are deterministic in practice and exact for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/sampler.h"

namespace ferry::engine {
namespace {

// Plain sampling: no filter, temperature 1, no penalty.
SamplerParams plain(uint64_t seed = 1) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

SamplerParams greedy() {
  SamplerParams p = plain();
  p.temp = 0.0f;
  return p;
}

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Frequencies of each token over `draws` samples.
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    int32_t t = s.sample(logits.data(), static_cast<int32_t>(logits.size()));
    EXPECT_GE(t, 0);
    EXPECT_LT(t, static_cast<int32_t>(logits.size()));
    f[t] += 1.0 / draws;
  }
  return f;
}

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s(greedy());
  std::vector<float> l = {0.1f, -2.0f, 3.5f, 3.4f, 1.0f};
  EXPECT_EQ(s.sample(l.data(), 5), 2);
}

TEST(Sampler, GreedyTiesPickLowestId) {
  Sampler s(greedy());
  std::vector<float> l = {1.0f, 7.0f, 3.0f, 7.0f, 7.0f};
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  std::vector<float> all_equal(100, -1.5f);
  EXPECT_EQ(s.sample(all_equal.data(), 100), 0);
}

TEST(Sampler, GreedyIgnoresFiltersAndSeed) {
  SamplerParams p = greedy();
  p.top_k = 3;
  p.top_p = 0.5f;
  p.min_p = 0.3f;
  p.seed = 12345;
  Sampler s(p);
  std::vector<float> l = {0.0f, 0.5f, 0.25f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  Sampler s(plain(7));
  std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  auto f = frequencies(s, log_probs(probs), 40000);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(f[i], probs[i], 0.012) << "token " << i;
}

TEST(Sampler, LowTemperatureSharpens) {
  SamplerParams p = plain(11);
  p.temp = 0.5f;  // p_i proportional to p_i^2
  Sampler s(p);
  std::vector<double> probs = {0.6, 0.3, 0.1};
  auto f = frequencies(s, log_probs(probs), 40000);
  double z = 0.36 + 0.09 + 0.01;
  EXPECT_NEAR(f[0], 0.36 / z, 0.012);
  EXPECT_NEAR(f[1], 0.09 / z, 0.012);
  EXPECT_NEAR(f[2], 0.01 / z, 0.006);
}

TEST(Sampler, HighTemperatureFlattens) {
  SamplerParams p = plain(13);
  p.temp = 2.0f;  // p_i proportional to sqrt(p_i)
  Sampler s(p);
  std::vector<double> probs = {0.64, 0.36};
  auto f = frequencies(s, log_probs(probs), 40000);
  EXPECT_NEAR(f[0], 0.8 / 1.4, 0.012);
  EXPECT_NEAR(f[1], 0.6 / 1.4, 0.012);
}

TEST(Sampler, TopKKeepsKBest) {
  SamplerParams p = plain(3);
  p.top_k = 2;
  Sampler s(p);
  std::vector<double> probs = {0.1, 0.4, 0.2, 0.3};  // the two best: ids 1 (0.4) and 3 (0.3)
  auto f = frequencies(s, log_probs(probs), 30000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[1], 0.4 / 0.7, 0.015);
  EXPECT_NEAR(f[3], 0.3 / 0.7, 0.015);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplerParams p = plain(5);
  p.top_k = 1;
  p.temp = 5.0f;
  Sampler s(p);
  std::vector<float> l = {0.0f, 0.1f, 0.05f, -3.0f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  SamplerParams p = plain(17);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3: keeps ids 0 and 1
  Sampler s(p);
  std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  auto f = frequencies(s, log_probs(probs), 30000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.015);
  EXPECT_NEAR(f[1], 0.3 / 0.8, 0.015);
}

TEST(Sampler, TopPKeepsAtLeastOne) {
  SamplerParams p = plain(19);
  p.top_p = 0.01f;
  Sampler s(p);
  std::vector<double> probs = {0.2, 0.5, 0.3};
  auto l = log_probs(probs);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, TopPUsesTemperatureOneProbabilities) {
  // llama.cpp applies temperature after top-p: a low temperature must not change which tokens survive.
  SamplerParams p = plain(23);
  p.top_p = 0.75f;
  p.temp = 3.0f;
  Sampler s(p);
  std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  auto f = frequencies(s, log_probs(probs), 20000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_GT(f[1], 0.3);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfBest) {
  SamplerParams p = plain(29);
  p.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1: keeps 0.5, 0.3, 0.15; drops 0.05
  Sampler s(p);
  std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
  auto f = frequencies(s, log_probs(probs), 30000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.5 / 0.95, 0.015);
  EXPECT_NEAR(f[2], 0.15 / 0.95, 0.015);
  EXPECT_NEAR(f[3], 0.3 / 0.95, 0.015);
}

TEST(Sampler, FiltersCompose) {
  SamplerParams p = plain(31);
  p.top_k = 3;     // drops id 4 (0.02)
  p.top_p = 0.95f; // over the rest at temperature 1: 0.4, 0.3, 0.2 -> cumulative 0.4/0.9.. keeps all 3
  p.min_p = 0.6f;  // threshold 0.24: keeps 0.4 and 0.3
  Sampler s(p);
  std::vector<double> probs = {0.3, 0.4, 0.2, 0.08, 0.02};
  auto f = frequencies(s, log_probs(probs), 30000);
  EXPECT_EQ(f[2] + f[3] + f[4], 0.0);
  EXPECT_NEAR(f[1], 0.4 / 0.7, 0.015);
}

TEST(Sampler, RepeatPenaltyDividesPositiveLogits) {
  SamplerParams p = greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.9f, -1.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  s.accept(0);  // 2.0 / 1.5 = 1.33 < 1.9
  EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, RepeatPenaltyMultipliesNegativeLogits) {
  SamplerParams p = greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> l = {-1.0f, -1.2f, -5.0f};
  s.accept(0);  // -1.0 * 1.5 = -1.5 < -1.2
  EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, RepeatPenaltyOncePerDistinctToken) {
  SamplerParams p = greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.0f};
  for (int i = 0; i < 5; ++i) s.accept(0);  // 2.0 / 1.5 = 1.33 (not 2 / 1.5^5 = 0.26)
  EXPECT_EQ(s.sample(l.data(), 2), 0);
}

TEST(Sampler, RepeatPenaltyWindow) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 4;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f, 0.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(l.data(), 3), 1);  // token 0 in the window
  for (int i = 0; i < 4; ++i) s.accept(2);
  EXPECT_EQ(s.sample(l.data(), 3), 0);  // token 0 slid out of the last 4
  s.accept(0);
  s.reset();
  EXPECT_EQ(s.sample(l.data(), 3), 0);  // reset forgets history
}

TEST(Sampler, RepeatPenaltyIgnoresOutOfRangeTokens) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  s.accept(-1);
  s.accept(1000);
  std::vector<float> l = {1.0f, 2.0f};
  EXPECT_EQ(s.sample(l.data(), 2), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> l = log_probs({0.25, 0.25, 0.25, 0.25});
  Sampler a(plain(42)), b(plain(42)), c(plain(43));
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(l.data(), 4));
    sb.push_back(b.sample(l.data(), 4));
    sc.push_back(c.sample(l.data(), 4));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  a.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 64; ++i) again.push_back(a.sample(l.data(), 4));
  EXPECT_EQ(sa, again);
}

TEST(Sampler, NegativeInfinityNeverSampled) {
  Sampler s(plain(47));
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> l = {ninf, 0.0f, ninf, 0.0f};
  auto f = frequencies(s, l, 5000);
  EXPECT_EQ(f[0] + f[2], 0.0);
}

TEST(Sampler, LargeVocabulary) {
  SamplerParams p = plain(53);
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  Sampler s(p);
  std::vector<float> l(262144);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.0f;
  for (int i = 0; i < 20; ++i) {
    int32_t t = s.sample(l.data(), static_cast<int32_t>(l.size()));
    ASSERT_GE(t, 0);
    EXPECT_GT(l[t], 9.0f);
  }
}

}  // namespace
}  // namespace ferry::engine
