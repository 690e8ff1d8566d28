// Hostile and broken GGUF input: every truncation point and many flipped bytes of a small valid
// file, and hand-made files aimed at one check each. Every case must be a clean one-line error
// naming the file (or, for harmless flips, a file that parses and whose contents can all be read).
#include <gtest/gtest.h>

#include <random>

#include "format/gguf.h"
#include "gguf_test_util.h"

namespace ferry::gguf {
namespace {

using testing::RawGguf;
using testing::ScratchDir;

// A small valid file holding every kind of metadata (incl. nested arrays) and three tensors.
std::vector<uint8_t> small_valid_file() {
  ScratchDir dir;
  const std::string path = dir.file("small.gguf");
  auto w = Writer::create(path);
  FERRY_ASSERT(w.has_value());
  Writer& wr = **w;
  wr.add_string("general.architecture", "llama");
  wr.add_u32("llama.block_count", 1);
  wr.add_f32("llama.rope.freq_base", 10000.0f);
  wr.add_bool("flag", true);
  wr.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "bc"});
  wr.add_value("nested", Value::make_array(ValueType::kArray, {Value::make_array(ValueType::kInt16,
                                                                  {Value::make_int(ValueType::kInt16, -3)})}));
  FERRY_ASSERT(wr.add_tensor_info("a", DType::F32, {4}).is_ok());
  FERRY_ASSERT(wr.add_tensor_info("b", DType::Q8_0, {32, 2}).is_ok());
  FERRY_ASSERT(wr.add_tensor_info("c", DType::F16, {3, 1, 2}).is_ok());
  FERRY_ASSERT(wr.begin_data().is_ok());
  std::vector<uint8_t> data(68, 0x3c);
  FERRY_ASSERT(wr.write_tensor_data(data.data(), 16).is_ok());
  FERRY_ASSERT(wr.write_tensor_data(data.data(), 68).is_ok());
  FERRY_ASSERT(wr.write_tensor_data(data.data(), 12).is_ok());
  FERRY_ASSERT(wr.finish().is_ok());
  return testing::read_all(path);
}

// Reads everything a parsed file exposes, so ASan sees any bad pointer or length.
void touch_all(const ModelFile& mf, const uint8_t* base, size_t size) {
  size_t sink = 0;
  for (const auto& [k, v] : mf.metadata()) sink += k.size() + v.to_string(1000).size();
  for (const TensorInfo& ti : mf.tensors()) {
    ASSERT_GE(static_cast<const uint8_t*>(ti.data), base);
    ASSERT_LE(ti.file_offset + ti.nbytes, size);
    const auto* p = static_cast<const uint8_t*>(ti.data);
    for (size_t i = 0; i < ti.nbytes; ++i) sink += p[i];
    EXPECT_EQ(ti.view().nbytes(), ti.nbytes);
  }
  EXPECT_GE(sink, 0u);
}

void expect_clean_error(const Status& st, const std::string& name) {
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_EQ(st.message().rfind(name + ": ", 0), 0u) << st.message();
}

// The parse result of `bytes` as an error status (ok if it parsed, after touching everything).
Status parse_status(const std::vector<uint8_t>& bytes, const std::string& name = "bad.gguf") {
  auto r = ModelFile::parse(bytes.data(), bytes.size(), name);
  if (!r) return r.status();
  touch_all(**r, bytes.data(), bytes.size());
  return Status::ok();
}

TEST(GgufBadInput, SmallValidFileParses) {
  auto bytes = small_valid_file();
  auto r = ModelFile::parse(bytes.data(), bytes.size(), "small.gguf");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ((*r)->tensors().size(), 3u);
  EXPECT_EQ((*r)->metadata().size(), 6u);
}

TEST(GgufBadInput, TruncatedAtEveryByte) {
  auto bytes = small_valid_file();
  auto full = ModelFile::parse(bytes.data(), bytes.size(), "x");
  ASSERT_TRUE(full);
  size_t data_end = 0;  // the file is valid once every tensor's bytes are present
  for (const TensorInfo& ti : (*full)->tensors()) data_end = std::max<size_t>(data_end, ti.file_offset + ti.nbytes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    // A fresh heap copy of exactly `cut` bytes, so ASan catches any read past the end.
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    part.shrink_to_fit();
    Status st = parse_status(part, "trunc.gguf");
    if (cut >= data_end) {
      EXPECT_TRUE(st.is_ok()) << st.message();
    } else {
      expect_clean_error(st, "trunc.gguf");
      EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.message();
    }
  }
}

TEST(GgufBadInput, FlippedBytesNeverCrash) {
  auto bytes = small_valid_file();
  size_t n_ok = 0, n_err = 0;
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
      auto copy = bytes;
      copy[pos] ^= mask;
      Status st = parse_status(copy, "flip.gguf");
      if (st.is_ok()) {
        ++n_ok;
      } else {
        ++n_err;
        expect_clean_error(st, "flip.gguf");
      }
    }
  }
  EXPECT_GT(n_err, 0u);
  EXPECT_GT(n_ok, 0u);  // flips inside tensor data are harmless
}

TEST(GgufBadInput, RandomMultiByteCorruption) {
  auto bytes = small_valid_file();
  std::mt19937 rng(1234);
  const uint8_t interesting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x05, 0x09, 0x0c, 0x20, 0x40};
  for (int iter = 0; iter < 3000; ++iter) {
    auto copy = bytes;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      const size_t pos = rng() % copy.size();
      copy[pos] = rng() % 2 ? interesting[rng() % sizeof(interesting)] : static_cast<uint8_t>(rng());
    }
    Status st = parse_status(copy, "rand.gguf");
    if (!st.is_ok()) expect_clean_error(st, "rand.gguf");
  }
}

// A hand-made file and the error it must give.
struct Case {
  std::string what;
  std::vector<uint8_t> bytes;
  ErrorCode code;
  std::string needle;  // part of the message
};

std::vector<Case> hostile_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string what, RawGguf raw, ErrorCode code, std::string needle) {
    cases.push_back({std::move(what), std::move(raw.bytes), code, std::move(needle)});
  };
  // One F32 tensor of 4 elements at offset `off` (data section of `data_bytes` bytes).
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t off, size_t data_bytes) {
    RawGguf r;
    r.header(1, 0).tensor("w", std::move(ne), type, off).pad().zeros(data_bytes);
    return r;
  };
  RawGguf r;

  add("empty file", RawGguf{}, ErrorCode::kCorrupt, "not a GGUF file");
  r = RawGguf{};
  r.bytes = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  add("wrong magic", r, ErrorCode::kCorrupt, "not a GGUF file (magic 47 47 4d 4c");
  add("version 1", RawGguf{}.header(0, 0, 1), ErrorCode::kUnsupported, "GGUF version 1 is not supported");
  add("version 99", RawGguf{}.header(0, 0, 99), ErrorCode::kUnsupported, "GGUF version 99 is not supported");
  add("big-endian", RawGguf{}.header(0, 0, 0x03000000), ErrorCode::kUnsupported, "big-endian");
  add("version only", RawGguf{}.u32(0x46554747).u32(3), ErrorCode::kCorrupt, "truncated");
  add("huge n_tensors", RawGguf{}.header(1ull << 62, 0), ErrorCode::kCorrupt, "tensor count 4611686018427387904");
  add("huge n_kv", RawGguf{}.header(0, UINT64_MAX).zeros(64), ErrorCode::kCorrupt, "metadata count");
  add("huge key length", RawGguf{}.header(0, 1).u64(1ull << 60).zeros(32), ErrorCode::kCorrupt,
      "key #0: string length 1152921504606846976");
  add("huge string value", RawGguf{}.header(0, 1).str("k").u32(8).u64(1ull << 60).zeros(16), ErrorCode::kCorrupt,
      "key 'k': string length 1152921504606846976");
  add("huge array count", RawGguf{}.header(0, 1).str("k").u32(9).u32(0).u64(1ull << 40).zeros(16),
      ErrorCode::kCorrupt, "array count 1099511627776");
  add("huge string array", RawGguf{}.header(0, 1).str("k").u32(9).u32(8).u64(5).u64(1).u8('a').zeros(30),
      ErrorCode::kCorrupt, "array count 5");
  add("array of huge arrays", RawGguf{}.header(0, 1).str("k").u32(9).u32(9).u64(1).u32(6).u64(UINT64_MAX),
      ErrorCode::kCorrupt, "array count 18446744073709551615");
  add("unknown value type", RawGguf{}.header(0, 1).str("k").u32(13).u32(0), ErrorCode::kCorrupt,
      "key 'k': unknown value type 13");
  add("unknown array type", RawGguf{}.header(0, 1).str("k").u32(9).u32(77).u64(0), ErrorCode::kCorrupt,
      "array of unknown value type 77");
  {
    RawGguf deep;
    deep.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 100; ++i) deep.u32(9).u64(1);
    deep.u32(0).u64(0);
    add("deeply nested arrays", deep, ErrorCode::kCorrupt, "nested deeper than");
  }
  add("empty key", RawGguf{}.header(0, 1).str("").u32(4).u32(1), ErrorCode::kCorrupt, "key #0 is empty");
  add("duplicate key", RawGguf{}.header(0, 2).kv_u32("k", 1).kv_u32("k", 2), ErrorCode::kCorrupt, "duplicate key 'k'");
  add("key name with newline", RawGguf{}.header(0, 2).kv_u32("a\nb", 1).kv_u32("a\nb", 2), ErrorCode::kCorrupt,
      "duplicate key 'a\\x0ab'");
  add("alignment 3", RawGguf{}.header(0, 1).kv_u32("general.alignment", 3), ErrorCode::kCorrupt,
      "general.alignment = 3 is not a power of two");
  add("alignment 0", RawGguf{}.header(0, 1).kv_u32("general.alignment", 0), ErrorCode::kCorrupt, "general.alignment");
  add("alignment string", RawGguf{}.header(0, 1).kv_str("general.alignment", "32"), ErrorCode::kCorrupt,
      "general.alignment is a string");
  add("split.count in one file", RawGguf{}.header(0, 1).kv_u32("split.count", 3), ErrorCode::kInvalidArgument,
      "split.count is 3 but only this file was given");
  add("split.no in one file", RawGguf{}.header(0, 1).kv_u32("split.no", 1), ErrorCode::kCorrupt, "split.no is 1");
  add("split.tensors.count wrong", RawGguf{}.header(0, 1).kv_u32("split.tensors.count", 2), ErrorCode::kCorrupt,
      "split.tensors.count is 2");
  add("n_dims 5", one_tensor({4, 1, 1, 1, 1}, 0, 0, 16), ErrorCode::kCorrupt, "tensor 'w': n_dims 5 (at most 4)");
  add("dim 0", one_tensor({4, 0}, 0, 0, 16), ErrorCode::kCorrupt, "tensor 'w': dimension 1 is 0");
  add("dim 2^63", one_tensor({4, 1ull << 63}, 0, 0, 16), ErrorCode::kCorrupt, "dimension 1 is 9223372036854775808");
  add("element count overflow", one_tensor({1ull << 32, 1ull << 32}, 0, 0, 16), ErrorCode::kCorrupt, "is too large");
  add("byte count overflow", one_tensor({1ull << 62}, 0, 0, 16), ErrorCode::kCorrupt, "is too large");
  add("ne0 not a block multiple", one_tensor({33}, 2, 0, 64), ErrorCode::kCorrupt,
      "ne[0] = 33 is not a multiple of the Q4_0 block size 32");
  add("unknown dtype", one_tensor({4}, 99, 0, 16), ErrorCode::kUnsupported, "unknown tensor type id 99");
  add("IQ2_XXS dtype", one_tensor({256}, 16, 0, 256), ErrorCode::kUnsupported, "unsupported tensor type IQ2_XXS (id 16)");
  add("misaligned offset", one_tensor({4}, 0, 4, 64), ErrorCode::kCorrupt,
      "tensor 'w' offset 4 is not a multiple of the alignment 32");
  add("past end", one_tensor({1024}, 0, 0, 100), ErrorCode::kCorrupt,
      "tensor 'w' data [offset 0, 4096 bytes] extends past end of file");
  add("offset past end", one_tensor({4}, 0, 1ull << 62, 100), ErrorCode::kCorrupt, "extends past end of file");
  add("offset + size wraps", one_tensor({8}, 0, UINT64_MAX - 31, 100), ErrorCode::kCorrupt, "extends past end of file");
  add("no data section", RawGguf{}.header(1, 0).tensor("w", {4}, 0, 0), ErrorCode::kCorrupt, "extends past end of file");
  add("overlap", RawGguf{}.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad().zeros(128),
      ErrorCode::kCorrupt, "tensors 'a' [offset 0, 64 bytes] and 'b' [offset 32] overlap");
  add("same offset", RawGguf{}.header(2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 0).pad().zeros(128),
      ErrorCode::kCorrupt, "overlap");
  add("duplicate tensor", RawGguf{}.header(2, 0).tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).pad().zeros(64),
      ErrorCode::kCorrupt, "duplicate tensor name 'a'");
  add("empty tensor name", RawGguf{}.header(1, 0).tensor("", {4}, 0, 0).pad().zeros(64), ErrorCode::kCorrupt,
      "tensor #0 has an empty name");
  add("huge tensor name", RawGguf{}.header(1, 0).u64(1ull << 61).zeros(40), ErrorCode::kCorrupt,
      "tensor #0 name: string length");
  add("tensor count lies", RawGguf{}.header(3, 0).tensor("a", {4}, 0, 0).pad().zeros(64), ErrorCode::kCorrupt,
      "tensor #1");
  return cases;
}

TEST(GgufBadInput, HostileFiles) {
  for (const Case& c : hostile_cases()) {
    SCOPED_TRACE(c.what);
    auto bytes = c.bytes;
    bytes.shrink_to_fit();
    auto r = ModelFile::parse(bytes.data(), bytes.size(), "evil.gguf");
    ASSERT_FALSE(r) << "parsed";
    expect_clean_error(r.status(), "evil.gguf");
    EXPECT_EQ(r.status().code(), c.code) << r.status().message();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
}

// The hostile files also fail cleanly through open() (mmap path), and the message names the path.
TEST(GgufBadInput, HostileFilesFromDisk) {
  ScratchDir dir;
  const std::string path = dir.file("evil.gguf");
  for (const Case& c : hostile_cases()) {
    SCOPED_TRACE(c.what);
    testing::write_all(path, c.bytes);
    auto r = ModelFile::open(path);
    ASSERT_FALSE(r);
    expect_clean_error(r.status(), path);
    EXPECT_EQ(r.status().code(), c.code);
  }
}

TEST(GgufBadInput, TruncatedFromDisk) {
  ScratchDir dir;
  auto bytes = small_valid_file();
  const std::string path = dir.file("t.gguf");
  for (size_t cut : {size_t{0}, size_t{3}, size_t{24}, bytes.size() / 2, bytes.size() - 40}) {
    testing::write_all(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut)));
    auto r = ModelFile::open(path);
    ASSERT_FALSE(r) << cut;
    expect_clean_error(r.status(), path);
  }
}

TEST(GgufBadInput, MissingFileAndDirectory) {
  ScratchDir dir;
  auto r = ModelFile::open(dir.file("nope.gguf"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.gguf"), std::string::npos);
  auto d = ModelFile::open(dir.path());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.status().code(), ErrorCode::kIo);
}

// A u8 array that really is in the file but holds more values than the metadata cap (each value
// costs far more memory than its one byte on disk): refused before anything is allocated.
TEST(GgufBadInput, TooManyMetadataValues) {
  const uint64_t n = (uint64_t{1} << 23) + 1;
  RawGguf r;
  r.header(0, 1).str("big").u32(9).u32(0).u64(n).zeros(static_cast<size_t>(n));
  auto mf = ModelFile::parse(r.bytes.data(), r.bytes.size(), "big.gguf");
  ASSERT_FALSE(mf);
  EXPECT_EQ(mf.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(mf.status().message().find("more than 8388608 values"), std::string::npos) << mf.status().message();
}

// GGUF v2 has the same layout as v3 for little-endian files; it must be accepted.
TEST(GgufBadInput, Version2Accepted) {
  RawGguf r;
  r.header(1, 1, 2).kv_str("general.architecture", "llama").tensor("w", {4}, 0, 0).pad().zeros(16);
  auto mf = ModelFile::parse(r.bytes.data(), r.bytes.size(), "v2.gguf");
  ASSERT_TRUE(mf) << mf.status().message();
  EXPECT_EQ((*mf)->version(), 2u);
  EXPECT_EQ((*mf)->tensors()[0].nbytes, 16u);
}

}  // namespace
}  // namespace ferry::gguf
