// The run-time profile check: in band it does nothing; off band with a cached profile it re-measures the
// CPU figures the model uses and rewrites only those (or says they held); a --profile FILE only warns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "plan/profile_check.h"
#include "sleepy_ops.h"

namespace ferry::plan {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Sleepy kernels slowed by *slowdown (a busy machine), counting the Ops they make; host bandwidth
// 10 GB/s a thread, slowed the same way.
struct BusyMachine {
  double slowdown = 1.0;
  int ops_made = 0;
  CpuKernels kernels() {
    CpuKernels k = sleepy();
    k.make_ops = [this](int32_t) -> std::unique_ptr<kernels::Ops> {
      ++ops_made;
      return std::make_unique<SleepyOps>(&slowdown);
    };
    return k;
  }
  ProfileOptions options() {
    ProfileOptions o;
    o.quick = true;
    fast_sampling(&o);
    o.sample_s = 0.02;
    o.buffer_bytes = 32ull << 20;
    o.read_bw = [this](int32_t threads, double) { return 10.0 * threads / slowdown; };
    return o;
  }
};

const ThroughputCurve* curve(const HardwareProfile& p, DType t) {
  for (const ThroughputCurve& c : p.cpu.matmul)
    if (c.dtype == t) return &c;
  return nullptr;
}

class ProfileCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/profile_check_" + std::to_string(::getpid()) + ".json";
    // The profile was measured while the machine was 3x slower than it is now.
    machine_.slowdown = 3.0;
    Expected<HardwareProfile> p = measure_profile(machine_.kernels(), nullptr, machine_.options());
    ASSERT_TRUE(p.has_value()) << p.status().message();
    ASSERT_TRUE(save_profile(*p, path_).is_ok());
    machine_.slowdown = 1.0;
    machine_.ops_made = 0;
  }
  void TearDown() override { std::remove(path_.c_str()); }

  Expected<std::string> check(double ratio, bool cached) {
    ProfileRecheck r;
    r.cpu_vs_profile = ratio;
    r.weight_types = {DType::Q4_K};
    r.profile_path = path_;
    r.cached = cached;
    return recheck_profile_after_run(r, machine_.kernels(), machine_.options());
  }

  std::string path_;
  BusyMachine machine_;
};

TEST_F(ProfileCheck, InBandDoesNothing) {
  const std::string before = read_file(path_);
  for (double ratio : {0.5, 1.0, 1.6, 2.5}) {
    Expected<std::string> said = check(ratio, true);
    ASSERT_TRUE(said.has_value()) << said.status().message();
    EXPECT_EQ(*said, "") << ratio;
  }
  EXPECT_EQ(machine_.ops_made, 0);
  EXPECT_EQ(read_file(path_), before);
}

TEST_F(ProfileCheck, AProfileFileIsOnlyWarnedAbout) {
  const std::string before = read_file(path_);
  Expected<std::string> said = check(0.3, /*cached=*/false);
  ASSERT_TRUE(said.has_value()) << said.status().message();
  EXPECT_EQ(said->rfind("warning: the CPU sub-layers ran 3.3x faster", 0), 0u) << *said;
  EXPECT_NE(said->find("ferry profile -o " + path_), std::string::npos) << *said;
  EXPECT_EQ(machine_.ops_made, 0);
  EXPECT_EQ(read_file(path_), before);
}

// The run went 3x faster than planned: the model's Q4_K curve and the bandwidth are measured again and
// written; F16's curve (not this model's) and everything else stay. A second off-band run on the
// updated profile finds the figures holding and leaves the file alone.
TEST_F(ProfileCheck, ReMeasuresOnlyWhatTheModelUsesAndUpdatesTheCache) {
  Expected<HardwareProfile> before = load_profile(path_);
  ASSERT_TRUE(before.has_value());
  Expected<std::string> said = check(0.33, true);
  ASSERT_TRUE(said.has_value()) << said.status().message();
  EXPECT_NE(said->find("re-measured the host bandwidth and the CPU kernels of Q4_K"), std::string::npos) << *said;
  EXPECT_NE(said->find(path_ + " updated"), std::string::npos) << *said;
  EXPECT_GT(machine_.ops_made, 0);
  Expected<HardwareProfile> after = load_profile(path_);
  ASSERT_TRUE(after.has_value()) << after.status().message();
  for (size_t i = 0; i < after->cpu.mem_bw.size(); ++i)
    EXPECT_NEAR(after->cpu.mem_bw[i].gbs, 3 * before->cpu.mem_bw[i].gbs, 1e-9);
  const ThroughputCurve *q_before = curve(*before, DType::Q4_K), *q_after = curve(*after, DType::Q4_K);
  ASSERT_TRUE(q_before && q_after);
  // One-token calls sleep ~1.6 ms; 3x faster within sleep overshoot.
  EXPECT_GT(q_after->gflops[0], 2.0 * q_before->gflops[0]);
  const ThroughputCurve *f_before = curve(*before, DType::F16), *f_after = curve(*after, DType::F16);
  ASSERT_TRUE(f_before && f_after);
  EXPECT_EQ(f_after->gflops, f_before->gflops);
  EXPECT_EQ(after->created, before->created);
  EXPECT_NE(after->notes.find("host bandwidth and CPU kernels of Q4_K re-measured"), std::string::npos) << after->notes;

  const std::string updated = read_file(path_);
  said = check(3.0, true);
  ASSERT_TRUE(said.has_value()) << said.status().message();
  EXPECT_NE(said->find("they hold"), std::string::npos) << *said;
  EXPECT_NE(said->find("the profile is unchanged"), std::string::npos) << *said;
  EXPECT_EQ(read_file(path_), updated);
}

TEST_F(ProfileCheck, AMissingProfileIsAnError) {
  std::remove(path_.c_str());
  Expected<std::string> said = check(3.0, true);
  EXPECT_FALSE(said.has_value());
}

TEST(ProfileCheckTypes, TheModelsMatrixTypes) {
  std::vector<model::SubLayer> subs(3);
  subs[0].kind = model::SubLayerKind::kEmbed;
  subs[0].weights = {{"token_embd.weight", DType::Q8_0, 32000, 4096, 0}};
  subs[1].kind = model::SubLayerKind::kFfn;
  subs[1].weights = {{"blk.0.ffn_norm.weight", DType::F32, 1, 4096, 0},
                     {"blk.0.ffn_up.weight", DType::Q4_K, 14336, 4096, 0},
                     {"blk.0.ffn_down.weight", DType::Q6_K, 4096, 14336, 0}};
  subs[2].kind = model::SubLayerKind::kHead;
  subs[2].weights = {{"output.weight", DType::Q6_K, 32000, 4096, 0}};
  EXPECT_EQ(matmul_weight_types(subs), (std::vector<DType>{DType::Q4_K, DType::Q6_K}));
  // Expert-only types (gpt-oss's MXFP4) count too: the check measures them though no profile has them yet.
  subs[1].weights.push_back({"blk.0.ffn_up_exps.weight", DType::MXFP4, 2880, 2880, 0});
  EXPECT_EQ(matmul_weight_types(subs), (std::vector<DType>{DType::Q4_K, DType::Q6_K, DType::MXFP4}));
  EXPECT_TRUE(cpu_time_off(0.49));
  EXPECT_FALSE(cpu_time_off(1.6));
  EXPECT_TRUE(cpu_time_off(2.6));
}

}  // namespace
}  // namespace ferry::plan
