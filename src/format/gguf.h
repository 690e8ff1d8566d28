// GGUF reading (mmap, v2 and v3, split files) and writing (streamed to disk).
// ModelFile validates every offset, size, count and string length before use: a truncated, corrupt or
// hostile file yields an error Status (ErrorCode::kCorrupt / kUnsupported), never a crash or an
// allocation larger than the file justifies.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace ferry::gguf {

// GGUF metadata value type ids (as stored in the file).
enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;
// An array keeps its element type (arrays of arrays are allowed: elements are Values).
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::kUint8;
  // Integers of every width are held in i64/u64, floats in f64; the original type is in `type`.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> v;

  bool is_integer() const;
  bool is_float() const;
  // Conversions that fail on the wrong type (return nullopt-like via Expected).
  Expected<int64_t> as_int() const;
  Expected<double> as_float() const;  // also accepts integers
  Expected<bool> as_bool() const;
  Expected<std::string> as_string() const;
  const Array* as_array() const;  // nullptr if not an array
  std::string to_string(size_t max_items = 8) const;  // human-readable, arrays abbreviated

  // Builders (used by writers and tests). make_uint/make_int take any integer type id of that
  // signedness (kUint8..kUint64 / kInt8..kInt64); make_float takes kFloat32 or kFloat64.
  static Value make_uint(ValueType t, uint64_t x);
  static Value make_int(ValueType t, int64_t x);
  static Value make_float(ValueType t, double x);
  static Value make_bool(bool x);
  static Value make_string(std::string x);
  static Value make_array(ValueType elem_type, std::vector<Value> items);
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  int32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] innermost, as in the file
  uint64_t offset = 0;           // relative to the data section of its split
  uint32_t split = 0;            // which split file holds it
  uint64_t file_offset = 0;      // absolute byte offset of the data in its split file
  size_t nbytes = 0;
  const void* data = nullptr;    // into the mmap, valid while the ModelFile lives

  TensorView view() const;       // host view over the mmap (const-cast: weights are never written)
};

// An open (possibly split) GGUF file. Read-only: nothing the user owns is ever modified.
class ModelFile {
 public:
  // Opens `path`; if it is named `*-00001-of-0000N.gguf`, the other splits are opened too.
  static Expected<std::unique_ptr<ModelFile>> open(const std::string& path);
  // Parses an in-memory buffer (used by the fuzzer and tests); the buffer must outlive the ModelFile.
  static Expected<std::unique_ptr<ModelFile>> parse(const void* data, size_t size, std::string name = "<memory>");
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  size_t alignment() const { return alignment_; }
  size_t file_bytes() const;  // total size over all splits
  uint32_t n_splits() const { return static_cast<uint32_t>(splits_.size()); }
  const std::string& split_path(uint32_t split) const;  // file name of a split (the label for parse())

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters: a present key of the wrong type is an error (the *_or forms return `fallback`
  // for it too); a missing key gives `fallback` when the *_or form is used and kNotFound otherwise.
  Expected<int64_t> get_int(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  Expected<double> get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double fallback) const;
  Expected<std::string> get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // True when the tensor bytes are read-only file mappings (open()); false for parse()'s caller-owned
  // buffer. Only file-backed pages may be dropped from the process (madvise) and re-read later.
  bool file_backed() const;
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  ModelFile() = default;
  struct Split;
  Status parse_split(const uint8_t* data, size_t size, uint32_t split_index);

  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<std::unique_ptr<Split>> splits_;
};

// Streams a GGUF v3 file: metadata and tensor infos first, then tensor data in order, written as it is
// produced (a 16 GB model needs no 16 GB of RAM). Usage: add_* for metadata, add_tensor_info for every
// tensor (name, type, shape), then begin_data(), then write_tensor_data() once per tensor in the same
// order, then finish(). The add_* metadata calls return nothing: their first error (duplicate key,
// malformed Value) is returned by begin_data()/finish(). `general.alignment` (also set by create()'s
// alignment argument) decides the padding. The bytes go to partial_path(path) until finish() renames it
// to `path`, so `path` never holds a truncated file (an interrupted process leaves only the partial one,
// which a CLI's signal handler can remove); a Writer destroyed before finish() deletes the partial file.
class Writer {
 public:
  static Expected<std::unique_ptr<Writer>> create(const std::string& path, size_t alignment = 32);
  static std::string partial_path(const std::string& path) { return path + ".partial"; }
  ~Writer();

  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_value(const std::string& key, const Value& v);  // any type, incl. nested arrays
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // Shape in ggml order (ne[0] innermost). Returns an error if ne[0] is not a multiple of the block.
  Status add_tensor_info(const std::string& name, DType type, std::vector<int64_t> ne);
  Status begin_data();
  Status write_tensor_data(const void* data, size_t nbytes);  // may be called in pieces per tensor
  Status finish();

 private:
  Writer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::gguf
