// GGUF writer -> reader round trips: every metadata value type (nested arrays too), tensors of
// several dtypes written in pieces, custom alignment, split files, typed getters, writer misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "format/gguf.h"
#include "gguf_test_util.h"

namespace ferry::gguf {
namespace {

using testing::ScratchDir;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

// Every scalar type, strings with odd bytes, and arrays of every type incl. arrays of arrays.
std::vector<std::pair<std::string, Value>> sample_metadata() {
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("t.u8", Value::make_uint(ValueType::kUint8, 255));
  kv.emplace_back("t.i8", Value::make_int(ValueType::kInt8, -128));
  kv.emplace_back("t.u16", Value::make_uint(ValueType::kUint16, 65535));
  kv.emplace_back("t.i16", Value::make_int(ValueType::kInt16, -32768));
  kv.emplace_back("t.u32", Value::make_uint(ValueType::kUint32, 4000000000u));
  kv.emplace_back("t.i32", Value::make_int(ValueType::kInt32, -2000000000));
  kv.emplace_back("t.u64", Value::make_uint(ValueType::kUint64, UINT64_MAX));
  kv.emplace_back("t.i64", Value::make_int(ValueType::kInt64, INT64_MIN));
  kv.emplace_back("t.f32", Value::make_float(ValueType::kFloat32, 0.15625));
  kv.emplace_back("t.f64", Value::make_float(ValueType::kFloat64, 3.141592653589793));
  kv.emplace_back("t.bool", Value::make_bool(true));
  kv.emplace_back("t.str", Value::make_string(std::string("h\xc3\xa9llo\n\0x", 9)));
  kv.emplace_back("t.str_empty", Value::make_string(""));
  kv.emplace_back("t.arr_u8", Value::make_array(ValueType::kUint8, {Value::make_uint(ValueType::kUint8, 1),
                                                                     Value::make_uint(ValueType::kUint8, 2)}));
  kv.emplace_back("t.arr_i16", Value::make_array(ValueType::kInt16, {Value::make_int(ValueType::kInt16, -5)}));
  kv.emplace_back("t.arr_u64", Value::make_array(ValueType::kUint64, {Value::make_uint(ValueType::kUint64, 1ull << 40)}));
  kv.emplace_back("t.arr_i64", Value::make_array(ValueType::kInt64, {Value::make_int(ValueType::kInt64, -(1ll << 40))}));
  kv.emplace_back("t.arr_f64", Value::make_array(ValueType::kFloat64, {Value::make_float(ValueType::kFloat64, 1e300)}));
  kv.emplace_back("t.arr_bool", Value::make_array(ValueType::kBool, {Value::make_bool(true), Value::make_bool(false)}));
  kv.emplace_back("t.arr_empty", Value::make_array(ValueType::kFloat32, {}));
  std::vector<Value> rows;
  for (int r = 0; r < 3; ++r) {
    std::vector<Value> row;
    for (int c = 0; c <= r; ++c) row.push_back(Value::make_string("r" + std::to_string(r) + "c" + std::to_string(c)));
    rows.push_back(Value::make_array(ValueType::kString, std::move(row)));
  }
  kv.emplace_back("t.arr_arr_str", Value::make_array(ValueType::kArray, std::move(rows)));
  // Three levels: [[[1], []], []]
  Value inner = Value::make_array(ValueType::kUint32, {Value::make_uint(ValueType::kUint32, 1)});
  Value empty_u32 = Value::make_array(ValueType::kUint32, {});
  Value mid = Value::make_array(ValueType::kArray, {inner, empty_u32});
  Value empty_arr = Value::make_array(ValueType::kArray, {});
  kv.emplace_back("t.arr3", Value::make_array(ValueType::kArray, {mid, empty_arr}));
  return kv;
}

void expect_same_value(const Value& a, const Value& b, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_EQ(a.type, b.type);
  if (a.type == ValueType::kFloat32) {
    EXPECT_EQ(static_cast<float>(std::get<double>(a.v)), static_cast<float>(std::get<double>(b.v)));
    return;
  }
  if (a.type != ValueType::kArray) {
    EXPECT_TRUE(a.v == b.v) << a.to_string() << " vs " << b.to_string();
    return;
  }
  const Array* x = a.as_array();
  const Array* y = b.as_array();
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  ASSERT_EQ(x->elem_type, y->elem_type);
  ASSERT_EQ(x->items.size(), y->items.size());
  for (size_t i = 0; i < x->items.size(); ++i) expect_same_value(x->items[i], y->items[i], key + "[" + std::to_string(i) + "]");
}

struct TensorSpec {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  size_t nbytes;
};

std::vector<TensorSpec> sample_tensors() {
  return {
      {"tok_embd.weight", DType::F32, {8, 3}, 8 * 3 * 4},
      {"blk.0.attn_q.weight", DType::Q4_0, {64, 2}, 2 * 2 * 18},
      {"blk.0.ffn.weight", DType::Q4_K, {256, 1, 2}, 2 * 144},
      {"blk.0.norm", DType::F16, {5}, 10},
      {"blk.0.bf", DType::BF16, {3, 1, 1, 2}, 12},
      {"out.weight", DType::Q8_0, {32, 4}, 4 * 34},
  };
}

void write_sample(const std::string& path, size_t alignment, size_t piece) {
  auto w = Writer::create(path, alignment);
  ASSERT_TRUE(w) << w.status().message();
  for (const auto& [k, v] : sample_metadata()) (*w)->add_value(k, v);
  for (const auto& t : sample_tensors()) ASSERT_TRUE((*w)->add_tensor_info(t.name, t.type, t.ne).is_ok());
  ASSERT_TRUE((*w)->begin_data().is_ok());
  uint8_t seed = 1;
  for (const auto& t : sample_tensors()) {
    auto data = pattern(t.nbytes, seed++);
    for (size_t off = 0; off < data.size(); off += piece) {
      Status st = (*w)->write_tensor_data(data.data() + off, std::min(piece, data.size() - off));
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
  }
  Status st = (*w)->finish();
  ASSERT_TRUE(st.is_ok()) << st.message();
}

void check_sample(const ModelFile& mf, size_t alignment) {
  EXPECT_EQ(mf.version(), 3u);
  EXPECT_EQ(mf.alignment(), alignment);
  auto expect_kv = sample_metadata();
  size_t extra = alignment != 32 ? 1 : 0;  // general.alignment comes first
  ASSERT_EQ(mf.metadata().size(), expect_kv.size() + extra);
  for (size_t i = 0; i < expect_kv.size(); ++i) {
    EXPECT_EQ(mf.metadata()[i + extra].first, expect_kv[i].first);
    expect_same_value(mf.metadata()[i + extra].second, expect_kv[i].second, expect_kv[i].first);
  }
  auto specs = sample_tensors();
  ASSERT_EQ(mf.tensors().size(), specs.size());
  uint8_t seed = 1;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& ti = mf.tensors()[i];
    SCOPED_TRACE(ti.name);
    EXPECT_EQ(ti.name, specs[i].name);
    EXPECT_EQ(ti.dtype, specs[i].type);
    EXPECT_EQ(ti.n_dims, static_cast<int32_t>(specs[i].ne.size()));
    for (int d = 0; d < 4; ++d) EXPECT_EQ(ti.ne[d], d < ti.n_dims ? specs[i].ne[d] : 1);
    EXPECT_EQ(ti.nbytes, specs[i].nbytes);
    EXPECT_EQ(ti.offset % alignment, 0u);
    EXPECT_EQ(ti.file_offset % alignment, 0u);
    auto want = pattern(specs[i].nbytes, seed++);
    EXPECT_EQ(std::memcmp(ti.data, want.data(), want.size()), 0);
    EXPECT_EQ(mf.find_tensor(ti.name), &ti);
    TensorView v = ti.view();
    EXPECT_EQ(v.nbytes(), ti.nbytes);
    EXPECT_EQ(v.data, ti.data);
  }
  EXPECT_EQ(mf.find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, AllValueTypesAndTensors) {
  ScratchDir dir;
  for (size_t alignment : {32, 64, 1, 4096}) {
    for (size_t piece : {1, 7, 1 << 20}) {
      SCOPED_TRACE("alignment " + std::to_string(alignment) + " piece " + std::to_string(piece));
      const std::string path = dir.file("m.gguf");
      write_sample(path, alignment, piece);
      auto mf = ModelFile::open(path);
      ASSERT_TRUE(mf) << mf.status().message();
      check_sample(**mf, alignment);
      EXPECT_EQ((*mf)->file_bytes(), std::filesystem::file_size(path));
      EXPECT_EQ((*mf)->n_splits(), 1u);
      // The same bytes parse from memory.
      auto bytes = testing::read_all(path);
      auto mem = ModelFile::parse(bytes.data(), bytes.size(), "mem");
      ASSERT_TRUE(mem) << mem.status().message();
      check_sample(**mem, alignment);
    }
  }
}

TEST(GgufRoundTrip, TypedGetters) {
  ScratchDir dir;
  const std::string path = dir.file("g.gguf");
  write_sample(path, 32, 1 << 20);
  auto r = ModelFile::open(path);
  ASSERT_TRUE(r);
  const ModelFile& mf = **r;
  EXPECT_EQ(*mf.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(*mf.get_int("t.i8"), -128);
  EXPECT_FALSE(mf.get_int("t.u64"));  // 2^64-1 does not fit in i64
  EXPECT_EQ(mf.get_int("missing").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(mf.get_int("t.str").status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(mf.get_int("t.str").status().message().find("t.str"), std::string::npos);
  EXPECT_EQ(mf.get_int_or("missing", 7), 7);
  EXPECT_EQ(mf.get_int_or("t.str", 7), 7);
  EXPECT_FLOAT_EQ(static_cast<float>(*mf.get_float("t.f32")), 0.15625f);
  EXPECT_DOUBLE_EQ(*mf.get_float("t.u16"), 65535.0);
  EXPECT_DOUBLE_EQ(mf.get_float_or("missing", 2.5), 2.5);
  EXPECT_EQ(*mf.get_string("t.str"), std::string("h\xc3\xa9llo\n\0x", 9));
  EXPECT_EQ(mf.get_string_or("t.u8", "fb"), "fb");
  EXPECT_TRUE(mf.get_bool_or("t.bool", false));
  EXPECT_TRUE(mf.get_bool_or("missing", true));
  const Value* a = mf.find("t.arr_arr_str");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a->as_array(), nullptr);
  EXPECT_EQ(a->to_string(), "[[\"r0c0\"], [\"r1c0\", \"r1c1\"], [\"r2c0\", \"r2c1\", \"r2c2\"]]");
  EXPECT_EQ(mf.find("t.u8")->to_string(), "255");
  EXPECT_EQ(mf.find("t.arr3")->to_string(), "[[[1], []], []]");
}

TEST(GgufRoundTrip, ConvenienceAdders) {
  ScratchDir dir;
  const std::string path = dir.file("c.gguf");
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    (*w)->add_u32("a.u32", 7);
    (*w)->add_i32("a.i32", -7);
    (*w)->add_u64("a.u64", 1ull << 50);
    (*w)->add_f32("a.f32", 1.5f);
    (*w)->add_bool("a.bool", false);
    (*w)->add_string("a.str", "x");
    (*w)->add_string_array("a.sa", {"a", "", "ccc"});
    (*w)->add_f32_array("a.fa", {1.0f, -2.0f});
    (*w)->add_i32_array("a.ia", {3, -4, 5});
    ASSERT_TRUE((*w)->finish().is_ok());  // no tensors: begin_data is implied
  }
  auto mf = ModelFile::open(path);
  ASSERT_TRUE(mf) << mf.status().message();
  EXPECT_TRUE((*mf)->tensors().empty());
  EXPECT_EQ((*mf)->find("a.u32")->type, ValueType::kUint32);
  EXPECT_EQ((*mf)->find("a.i32")->type, ValueType::kInt32);
  EXPECT_EQ(*(*mf)->get_int("a.u64"), 1ll << 50);
  EXPECT_EQ((*mf)->find("a.sa")->to_string(), "[\"a\", \"\", \"ccc\"]");
  EXPECT_EQ((*mf)->find("a.fa")->to_string(), "[1, -2]");
  EXPECT_EQ((*mf)->find("a.ia")->to_string(), "[3, -4, 5]");
  EXPECT_FALSE((*mf)->get_bool_or("a.bool", true));
}

// Writes NAME-0000i-of-0000n.gguf files, each with the split keys, tensors spread over them.
void write_splits(const std::string& prefix, int n, int64_t declared_tensors, int bad_no_at = -1) {
  int tensor_id = 0;
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "-%05d-of-%05d.gguf", i + 1, n);
    auto w = Writer::create(prefix + name);
    ASSERT_TRUE(w);
    if (i == 0) (*w)->add_string("general.architecture", "llama");
    (*w)->add_value("split.no", Value::make_uint(ValueType::kUint16, i == bad_no_at ? 0 : i));
    (*w)->add_value("split.count", Value::make_uint(ValueType::kUint16, n));
    (*w)->add_i32("split.tensors.count", static_cast<int32_t>(declared_tensors));
    const int here = i + 1;  // split i holds i + 1 tensors
    for (int k = 0; k < here; ++k)
      ASSERT_TRUE((*w)->add_tensor_info("t" + std::to_string(tensor_id + k), DType::F32, {4, k + 1}).is_ok());
    ASSERT_TRUE((*w)->begin_data().is_ok());
    for (int k = 0; k < here; ++k) {
      std::vector<float> v(4 * (k + 1), static_cast<float>(tensor_id + k));
      ASSERT_TRUE((*w)->write_tensor_data(v.data(), v.size() * 4).is_ok());
    }
    ASSERT_TRUE((*w)->finish().is_ok());
    tensor_id += here;
  }
}

TEST(GgufSplit, OpensAllSplits) {
  ScratchDir dir;
  const std::string prefix = dir.file("model");
  write_splits(prefix, 3, 6);
  for (int first : {1, 2}) {  // opening any split opens them all
    char name[64];
    std::snprintf(name, sizeof(name), "-%05d-of-00003.gguf", first);
    auto mf = ModelFile::open(prefix + name);
    ASSERT_TRUE(mf) << mf.status().message();
    EXPECT_EQ((*mf)->n_splits(), 3u);
    EXPECT_EQ((*mf)->split_path(2), prefix + "-00003-of-00003.gguf");
    EXPECT_EQ((*mf)->get_string_or("general.architecture", ""), "llama");
    ASSERT_EQ((*mf)->tensors().size(), 6u);
    const uint32_t want_split[6] = {0, 1, 1, 2, 2, 2};
    for (int t = 0; t < 6; ++t) {
      const TensorInfo* ti = (*mf)->find_tensor("t" + std::to_string(t));
      ASSERT_NE(ti, nullptr);
      EXPECT_EQ(ti->split, want_split[t]);
      const float* f = static_cast<const float*>(ti->data);
      for (int64_t e = 0; e < ti->ne[0] * ti->ne[1]; ++e) EXPECT_EQ(f[e], static_cast<float>(t));
    }
    size_t total = 0;
    for (int i = 1; i <= 3; ++i) {
      std::snprintf(name, sizeof(name), "-%05d-of-00003.gguf", i);
      total += std::filesystem::file_size(prefix + name);
    }
    EXPECT_EQ((*mf)->file_bytes(), total);
  }
}

TEST(GgufSplit, Errors) {
  ScratchDir dir;
  {
    write_splits(dir.file("cnt"), 2, 5);  // holds 3 tensors
    auto mf = ModelFile::open(dir.file("cnt-00001-of-00002.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_EQ(mf.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(mf.status().message().find("split.tensors.count is 5"), std::string::npos) << mf.status().message();
  }
  {
    write_splits(dir.file("no"), 3, 6, /*bad_no_at=*/2);
    auto mf = ModelFile::open(dir.file("no-00001-of-00003.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_NE(mf.status().message().find("no-00003-of-00003.gguf: split.no is 0, expected 2"), std::string::npos)
        << mf.status().message();
  }
  {
    write_splits(dir.file("miss"), 3, 6);
    std::filesystem::remove(dir.file("miss-00002-of-00003.gguf"));
    auto mf = ModelFile::open(dir.file("miss-00001-of-00003.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_EQ(mf.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(mf.status().message().find("miss-00002-of-00003.gguf"), std::string::npos);
  }
  {
    // A split renamed so that it does not look like one: split.count 2 but only one file.
    write_splits(dir.file("ren"), 2, 3);
    std::filesystem::rename(dir.file("ren-00001-of-00002.gguf"), dir.file("ren.gguf"));
    auto mf = ModelFile::open(dir.file("ren.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_EQ(mf.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(mf.status().message().find("split.count is 2"), std::string::npos) << mf.status().message();
  }
  {
    // The same tensor name in two splits.
    for (int i = 0; i < 2; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "dup-%05d-of-00002.gguf", i + 1);
      auto w = Writer::create(dir.file(name));
      ASSERT_TRUE(w);
      (*w)->add_u32("split.no", i);
      (*w)->add_u32("split.count", 2);
      ASSERT_TRUE((*w)->add_tensor_info("same", DType::F32, {4}).is_ok());
      ASSERT_TRUE((*w)->begin_data().is_ok());
      float v[4] = {};
      ASSERT_TRUE((*w)->write_tensor_data(v, sizeof(v)).is_ok());
      ASSERT_TRUE((*w)->finish().is_ok());
    }
    auto mf = ModelFile::open(dir.file("dup-00001-of-00002.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_NE(mf.status().message().find("duplicate tensor name 'same'"), std::string::npos) << mf.status().message();
  }
  {
    // Split files without the split keys.
    for (int i = 0; i < 2; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "nokeys-%05d-of-00002.gguf", i + 1);
      auto w = Writer::create(dir.file(name));
      ASSERT_TRUE(w);
      ASSERT_TRUE((*w)->finish().is_ok());
    }
    auto mf = ModelFile::open(dir.file("nokeys-00001-of-00002.gguf"));
    ASSERT_FALSE(mf);
    EXPECT_NE(mf.status().message().find("lacks the split.count"), std::string::npos) << mf.status().message();
  }
}

TEST(GgufWriter, Misuse) {
  ScratchDir dir;
  const std::string path = dir.file("w.gguf");
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    Writer& wr = **w;
    EXPECT_EQ(wr.add_tensor_info("q", DType::Q4_0, {33}).code(), ErrorCode::kInvalidArgument);  // not a block multiple
    EXPECT_FALSE(wr.add_tensor_info("z", DType::F32, {4, 0}).is_ok());
    EXPECT_FALSE(wr.add_tensor_info("five", DType::F32, {1, 1, 1, 1, 1}).is_ok());
    EXPECT_FALSE(wr.add_tensor_info("", DType::F32, {1}).is_ok());
    EXPECT_TRUE(wr.add_tensor_info("a", DType::F32, {2}).is_ok());
    EXPECT_FALSE(wr.add_tensor_info("a", DType::F32, {2}).is_ok());
    EXPECT_TRUE(wr.add_tensor_info("b", DType::F32, {2}).is_ok());
    ASSERT_TRUE(wr.begin_data().is_ok());
    EXPECT_FALSE(wr.begin_data().is_ok());
    float x[3] = {1, 2, 3};
    EXPECT_FALSE(wr.write_tensor_data(x, sizeof(x)).is_ok());  // 12 bytes > 8 left
    EXPECT_TRUE(wr.write_tensor_data(x, 8).is_ok());
    Status st = wr.finish();  // 'b' not written
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("'b'"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // unfinished files are removed
  EXPECT_FALSE(std::filesystem::exists(Writer::partial_path(path)));
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    (*w)->add_u32("k", 1);
    (*w)->add_u32("k", 2);
    Status st = (*w)->begin_data();
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("duplicate metadata key 'k'"), std::string::npos) << st.message();
  }
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    (*w)->add_value("bad", Value::make_uint(ValueType::kUint8, 300));
    EXPECT_FALSE((*w)->begin_data().is_ok());
  }
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    (*w)->add_value("mixed", Value::make_array(ValueType::kUint8, {Value::make_string("x")}));
    EXPECT_FALSE((*w)->begin_data().is_ok());
  }
  EXPECT_FALSE(Writer::create(path, 3));
  EXPECT_FALSE(Writer::create(dir.file("no/such/dir.gguf")));
}

TEST(GgufWriter, FinalNameOnlyAfterFinish) {
  ScratchDir dir;
  const std::string path = dir.file("p.gguf");
  const std::string partial = Writer::partial_path(path);
  {
    auto w = Writer::create(path);
    ASSERT_TRUE(w);
    ASSERT_TRUE((*w)->add_tensor_info("a", DType::F32, {4}).is_ok());
    ASSERT_TRUE((*w)->begin_data().is_ok());
    float x[4] = {1, 2, 3, 4};
    ASSERT_TRUE((*w)->write_tensor_data(x, sizeof(x)).is_ok());
    EXPECT_FALSE(std::filesystem::exists(path));  // an interrupted writer leaves no file under the name
    EXPECT_TRUE(std::filesystem::exists(partial));
    ASSERT_TRUE((*w)->finish().is_ok());
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(partial));
  EXPECT_TRUE(ModelFile::open(path));
  {
    auto w = Writer::create(path);  // over an existing file: the old one stays until finish()
    ASSERT_TRUE(w);
    ASSERT_TRUE((*w)->add_tensor_info("a", DType::F32, {4}).is_ok());
    ASSERT_TRUE((*w)->begin_data().is_ok());
  }  // abandoned
  EXPECT_FALSE(std::filesystem::exists(partial));
  EXPECT_TRUE(ModelFile::open(path));
}

TEST(GgufWriter, AlignmentKeyFromCaller) {
  ScratchDir dir;
  const std::string path = dir.file("a.gguf");
  auto w = Writer::create(path);
  ASSERT_TRUE(w);
  (*w)->add_u32("general.alignment", 128);
  ASSERT_TRUE((*w)->add_tensor_info("a", DType::F32, {3}).is_ok());
  ASSERT_TRUE((*w)->add_tensor_info("b", DType::F32, {3}).is_ok());
  ASSERT_TRUE((*w)->begin_data().is_ok());
  float x[3] = {1, 2, 3};
  ASSERT_TRUE((*w)->write_tensor_data(x, sizeof(x)).is_ok());
  ASSERT_TRUE((*w)->write_tensor_data(x, sizeof(x)).is_ok());
  ASSERT_TRUE((*w)->finish().is_ok());
  auto mf = ModelFile::open(path);
  ASSERT_TRUE(mf) << mf.status().message();
  EXPECT_EQ((*mf)->alignment(), 128u);
  EXPECT_EQ((*mf)->tensors()[1].offset, 128u);
  EXPECT_EQ((*mf)->tensors()[1].file_offset % 128, 0u);
}

}  // namespace
}  // namespace ferry::gguf
