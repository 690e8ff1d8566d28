// HardwareProfile JSON: the GPU host fixture loads, a profile round-trips exactly, and the strict
// reader refuses every kind of bad input with an error naming the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/profile.h"
#include "plan/profiler.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

using json = nlohmann::ordered_json;

std::string fixture_path() { return fixtures::source_dir() + "/tests/data/profiles/h200-host.json"; }

TEST(Profile, GpuHostFixtureLoads) {
  auto p = load_profile(fixture_path());
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_EQ(p->source, "estimated");
  ASSERT_TRUE(p->has_gpu());
  EXPECT_EQ(p->gpu->name, "NVIDIA H200");
  EXPECT_DOUBLE_EQ(p->link->h2d_gbs, 55.0);
  EXPECT_DOUBLE_EQ(p->link->h2d_pageable_gbs, 8.6);
  EXPECT_DOUBLE_EQ(p->link->cpu_share_while_copying, 0.33);
  EXPECT_DOUBLE_EQ(p->gpu->mem_bw_gbs, 4300.0);
  EXPECT_EQ(p->cpu.threads, 16);
  EXPECT_DOUBLE_EQ(p->cpu.mem_bw.back().gbs, 85.0);
}

TEST(Profile, RoundTripIsExact) {
  auto p = load_profile(fixture_path());
  ASSERT_TRUE(p.has_value());
  const std::string a = profile_to_json(*p);
  auto q = parse_profile(a, "round trip");
  ASSERT_TRUE(q.has_value()) << q.status().message();
  EXPECT_EQ(profile_to_json(*q), a);
  const HardwareProfile s = fixtures::synth_profile({});
  auto r = parse_profile(profile_to_json(s));
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(profile_to_json(*r), profile_to_json(s));
}

TEST(Profile, NoGpuProfileHasNoLinkOrGpu) {
  fixtures::SynthHw hw;
  hw.gpu = false;
  const HardwareProfile s = fixtures::synth_profile(hw);
  const json j = json::parse(profile_to_json(s));
  EXPECT_FALSE(j.contains("gpu"));
  EXPECT_FALSE(j.contains("link"));
  auto r = parse_profile(j.dump());
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_FALSE(r->has_gpu());
}

// Parses the fixture after `edit`, expecting an error whose message contains `want`.
void expect_error(const std::function<void(json&)>& edit, const std::string& want) {
  auto p = load_profile(fixture_path());
  ASSERT_TRUE(p.has_value());
  json j = json::parse(profile_to_json(*p));
  edit(j);
  auto r = parse_profile(j.dump(), "edited.json");
  ASSERT_FALSE(r.has_value()) << "accepted: " << want;
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("edited.json"), std::string::npos) << r.status().message();
}

TEST(Profile, StrictErrorsNameTheKey) {
  expect_error([](json& j) { j["version"] = 2; }, "version");
  expect_error([](json& j) { j["schema"] = "something-else"; }, "schema");
  expect_error([](json& j) { j["source"] = "guessed"; }, "source");
  expect_error([](json& j) { j["cpu"]["mem_bw"][0]["gbs"] = -1; }, "cpu.mem_bw[0].gbs");
  expect_error([](json& j) { j["cpu"]["mem_bw"][0]["gbs"] = "fast"; }, "cpu.mem_bw[0].gbs");
  expect_error([](json& j) { j["cpu"].erase("threads"); }, "cpu.threads: missing");
  expect_error([](json& j) { j["cpu"]["matmul"][1]["tokens"][2] = 1; }, "cpu.matmul[1].tokens[2]");
  expect_error([](json& j) { j["cpu"]["matmul"][0]["gflops"].erase(0); }, "cpu.matmul[0].gflops");
  expect_error([](json& j) { j["cpu"]["matmul"][0]["gflops"][3] = 0; }, "cpu.matmul[0].gflops[3]");
  expect_error([](json& j) { j["cpu"]["matmul"][0]["dtype"] = "Q9_K"; }, "cpu.matmul[0].dtype");
  expect_error([](json& j) { j["cpu"]["matmul"].push_back(j["cpu"]["matmul"][0]); }, "second curve");
  expect_error([](json& j) { j["link"]["h2d_gbs"] = 0; }, "link.h2d_gbs");
  expect_error([](json& j) { j["link"]["cpu_share_while_copying"] = 1.5; }, "link.cpu_share_while_copying");
  expect_error([](json& j) { j["link"]["h2d_bandwidth"] = 55; }, "link.h2d_bandwidth: unknown key");
  expect_error([](json& j) { j["gpu"]["memory_bytes"] = 1.5; }, "gpu.memory_bytes");
  expect_error([](json& j) { j.erase("gpu"); }, "both present or both absent");
  expect_error([](json& j) { j["extra"] = 1; }, "extra: unknown key");
  expect_error([](json& j) { j["machine"].erase("cores"); }, "machine.cores");
  auto bad = parse_profile("{ not json", "x.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos);
}

TEST(Profile, FingerprintAndCachePath) {
  MachineInfo a;
  a.cpu_model = "cpu";
  a.cores = 16;
  a.simd = "avx512";
  MachineInfo b = a;
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 16u);
  b.gpu_name = "NVIDIA H200";
  b.gpu_driver = "550";
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  b.gpu_driver = "555";
  MachineInfo c = b;
  c.gpu_driver = "550";
  EXPECT_NE(b.fingerprint(), c.fingerprint());

  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/tmp/ferry-cache-test", 1);
  EXPECT_EQ(cached_profile_path(a), "/tmp/ferry-cache-test/ferry/profile-" + a.fingerprint() + ".json");
  if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else unsetenv("XDG_CACHE_HOME");
}

TEST(Profile, SaveAndLoad) {
  const HardwareProfile s = fixtures::synth_profile({});
  const std::string path = "/tmp/ferry-plan-test-dir/sub/profile.json";
  ASSERT_TRUE(save_profile(s, path).is_ok());
  auto r = load_profile(path);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(profile_to_json(*r), profile_to_json(s));
  auto missing = load_profile("/tmp/ferry-plan-test-dir/none.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

TEST(Profile, DetectMachine) {
  const MachineInfo m = detect_machine();
  EXPECT_GE(m.cores, 1);
  EXPECT_GE(m.logical_cpus, m.cores);
  EXPECT_FALSE(m.cpu_model.empty());
  EXPECT_FALSE(m.simd.empty());
}

}  // namespace
}  // namespace ferry::plan
