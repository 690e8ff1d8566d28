// gguf_dump: test helper for tests/python/test_gguf_compat.py.
//   gguf_dump FILE                           print FILE's metadata and tensor infos as one JSON object
//   gguf_dump --write-sample FILE [ALIGN]    write a fixed sample file with ferry's Writer
// Values are printed natively (arrays as nested JSON arrays); each tensor carries the FNV-1a 64
// hash of its data so the Python side can compare bytes without a second copy.
// Errors: one `error: ...` line on stderr, exit 1.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf.h"

namespace {

using ferry::DType;
using ferry::Status;
using ferry::gguf::ModelFile;
using ferry::gguf::Value;
using ferry::gguf::ValueType;
using ferry::gguf::Writer;
using nlohmann::json;

json to_json(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* b = std::get_if<bool>(&v.v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  json arr = json::array();
  if (const auto* a = v.as_array())
    for (const Value& item : a->items) arr.push_back(to_json(item));
  return arr;
}

std::string fnv1a64(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int dump(const std::string& path) {
  auto r = ModelFile::open(path);
  if (!r) {
    std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
    return 1;
  }
  const ModelFile& mf = **r;
  json out;
  out["version"] = mf.version();
  out["alignment"] = mf.alignment();
  out["n_splits"] = mf.n_splits();
  out["file_bytes"] = mf.file_bytes();
  json kv = json::array();
  for (const auto& [key, v] : mf.metadata()) {
    json e;
    e["key"] = key;
    e["type"] = ferry::gguf::value_type_name(v.type);
    if (const auto* a = v.as_array()) e["elem_type"] = ferry::gguf::value_type_name(a->elem_type);
    e["value"] = to_json(v);
    kv.push_back(std::move(e));
  }
  out["metadata"] = std::move(kv);
  json ts = json::array();
  for (const auto& t : mf.tensors()) {
    json e;
    e["name"] = t.name;
    e["type"] = ferry::dtype_name(t.dtype);
    e["type_id"] = static_cast<uint32_t>(t.dtype);
    e["ne"] = std::vector<int64_t>(t.ne, t.ne + t.n_dims);
    e["offset"] = t.offset;
    e["file_offset"] = t.file_offset;
    e["nbytes"] = t.nbytes;
    e["split"] = t.split;
    e["fnv1a64"] = fnv1a64(t.data, t.nbytes);
    ts.push_back(std::move(e));
  }
  out["tensors"] = std::move(ts);
  std::printf("%s\n", out.dump(1, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

std::vector<Value> uints(ValueType t, std::vector<uint64_t> xs) {
  std::vector<Value> v;
  for (uint64_t x : xs) v.push_back(Value::make_uint(t, x));
  return v;
}
std::vector<Value> ints(ValueType t, std::vector<int64_t> xs) {
  std::vector<Value> v;
  for (int64_t x : xs) v.push_back(Value::make_int(t, x));
  return v;
}

int write_sample(const std::string& path, size_t alignment) {
  auto w = Writer::create(path, alignment);
  if (!w) {
    std::fprintf(stderr, "error: %s\n", w.status().message().c_str());
    return 1;
  }
  Writer& wr = **w;
  wr.add_string("general.architecture", "llama");
  wr.add_string("general.name", "ferry sample \xe2\x9c\x93");
  wr.add_value("sample.u8", Value::make_uint(ValueType::kUint8, 200));
  wr.add_value("sample.i8", Value::make_int(ValueType::kInt8, -100));
  wr.add_value("sample.u16", Value::make_uint(ValueType::kUint16, 60000));
  wr.add_value("sample.i16", Value::make_int(ValueType::kInt16, -30000));
  wr.add_u32("sample.u32", 4000000000u);
  wr.add_i32("sample.i32", -2000000000);
  wr.add_u64("sample.u64", (1ull << 63) + 5);
  wr.add_value("sample.i64", Value::make_int(ValueType::kInt64, -(1ll << 62)));
  wr.add_f32("sample.f32", 0.5f);
  wr.add_value("sample.f64", Value::make_float(ValueType::kFloat64, -1.25e-10));
  wr.add_bool("sample.bool", true);
  wr.add_value("sample.arr_u8", Value::make_array(ValueType::kUint8, uints(ValueType::kUint8, {1, 2, 255})));
  wr.add_value("sample.arr_i8", Value::make_array(ValueType::kInt8, ints(ValueType::kInt8, {-1, 127})));
  wr.add_value("sample.arr_u16", Value::make_array(ValueType::kUint16, uints(ValueType::kUint16, {7, 65535})));
  wr.add_value("sample.arr_i16", Value::make_array(ValueType::kInt16, ints(ValueType::kInt16, {-7})));
  wr.add_value("sample.arr_u32", Value::make_array(ValueType::kUint32, uints(ValueType::kUint32, {0, 4294967295u})));
  wr.add_i32_array("sample.arr_i32", {-1, 0, 1});
  wr.add_value("sample.arr_u64", Value::make_array(ValueType::kUint64, uints(ValueType::kUint64, {1ull << 60})));
  wr.add_value("sample.arr_i64", Value::make_array(ValueType::kInt64, ints(ValueType::kInt64, {-(1ll << 60)})));
  wr.add_f32_array("sample.arr_f32", {0.25f, -2.0f});
  wr.add_value("sample.arr_f64", Value::make_array(ValueType::kFloat64, {Value::make_float(ValueType::kFloat64, 1e100)}));
  wr.add_value("sample.arr_bool", Value::make_array(ValueType::kBool, {Value::make_bool(false), Value::make_bool(true)}));
  wr.add_string_array("sample.arr_str", {"a", "", "\xc3\xbc"});
  wr.add_value("sample.nested", Value::make_array(ValueType::kArray,
                                                  {Value::make_array(ValueType::kInt32, ints(ValueType::kInt32, {1, 2})),
                                                   Value::make_array(ValueType::kInt32, ints(ValueType::kInt32, {3}))}));
  wr.add_value("sample.nested_str",
               Value::make_array(ValueType::kArray, {Value::make_array(ValueType::kString, {Value::make_string("x")}),
                                                     Value::make_array(ValueType::kString, {Value::make_string("y"),
                                                                                            Value::make_string("z")})}));
  struct T {
    const char* name;
    DType type;
    std::vector<int64_t> ne;
  };
  const std::vector<T> tensors = {
      {"t.f32", DType::F32, {8, 2}},    {"t.f16", DType::F16, {16}},      {"t.bf16", DType::BF16, {4, 2}},
      {"t.q8_0", DType::Q8_0, {64, 2}}, {"t.q4_0", DType::Q4_0, {32}},    {"t.q4_1", DType::Q4_1, {32}},
      {"t.q5_0", DType::Q5_0, {32}},    {"t.q5_1", DType::Q5_1, {32}},    {"t.q2_k", DType::Q2_K, {256}},
      {"t.q3_k", DType::Q3_K, {256}},   {"t.q4_k", DType::Q4_K, {256}},   {"t.q5_k", DType::Q5_K, {256, 1, 2}},
      {"t.q6_k", DType::Q6_K, {256}},   {"t.i32", DType::I32, {4, 1, 1, 2}},
  };
  for (const T& t : tensors) {
    Status st = wr.add_tensor_info(t.name, t.type, t.ne);
    if (!st) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
  }
  Status st = wr.begin_data();
  uint32_t seed = 1;
  for (size_t i = 0; st && i < tensors.size(); ++i) {
    int64_t ne[4] = {1, 1, 1, 1};
    for (size_t d = 0; d < tensors[i].ne.size(); ++d) ne[d] = tensors[i].ne[d];
    std::vector<uint8_t> data(ferry::row_bytes(tensors[i].type, ne[0]) * static_cast<size_t>(ne[1] * ne[2] * ne[3]));
    for (auto& b : data) b = static_cast<uint8_t>((seed = seed * 1103515245u + 12345u) >> 16);
    // Two pieces, to exercise streaming writes.
    const size_t half = data.size() / 2;
    st = wr.write_tensor_data(data.data(), half);
    if (st) st = wr.write_tensor_data(data.data() + half, data.size() - half);
  }
  if (st) st = wr.finish();
  if (!st) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--help") != 0) return dump(argv[1]);
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "--write-sample") == 0)
    return write_sample(argv[2], argc == 4 ? std::strtoul(argv[3], nullptr, 10) : 32);
  std::fprintf(stderr, "usage: gguf_dump FILE | gguf_dump --write-sample FILE [ALIGNMENT]\n");
  return 2;
}
