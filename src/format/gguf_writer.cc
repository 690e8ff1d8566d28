// GGUF v3 writer. Metadata and tensor infos are kept in memory (they are small) and written by
// begin_data(); tensor data is streamed straight to the file as write_tensor_data() receives it,
// each tensor padded to the alignment, so memory use does not grow with the model.
// The add_* calls return nothing; their first error is kept and returned by begin_data()/finish().
// The file is written under partial_path(path) and renamed to path by finish(); a Writer destroyed before
// finish() removes the partial file.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace ferry::gguf {

using internal::align_up;

struct Writer::Impl {
  enum class State { kMeta, kData, kDone };
  struct Tensor {
    std::string name;
    DType dtype;
    uint32_t n_dims;
    int64_t ne[4];
    size_t nbytes;
    uint64_t offset;  // relative to the data section
  };

  std::string path;          // the final name, in messages
  std::string partial;       // where the bytes go until finish() renames it to path
  std::FILE* f = nullptr;
  std::vector<char> buffer;  // stdio buffer
  size_t alignment = internal::kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> kv;
  std::vector<Tensor> tensors;
  std::set<std::string, std::less<>> tensor_names;
  Status deferred;
  State state = State::kMeta;
  size_t cur = 0;          // tensor being written
  size_t cur_written = 0;  // bytes of it written so far
  uint64_t pos = 0;        // bytes written to the file

  Status io_error(const char* what) {
    return make_error(ErrorCode::kIo, "%s: %s failed: %s", path.c_str(), what, std::strerror(errno));
  }
  Status put(const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f) != n) return io_error("write");
    pos += n;
    return Status::ok();
  }
  Status pad_to_alignment() {
    static const char kZeros[64] = {};
    uint64_t n = align_up(pos, alignment) - pos;
    while (n > 0) {
      const size_t k = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
      FERRY_RETURN_IF_ERROR(put(kZeros, k));
      n -= k;
    }
    return Status::ok();
  }
  void defer(Status st) {
    if (deferred.is_ok()) deferred = std::move(st);
  }
};

namespace {

// Checks that a Value is well formed: its variant matches its type, integers fit their width,
// array items have the array's element type, nesting is bounded.
Status check_value(const Value& v, int depth, const std::string& key) {
  auto bad = [&](const char* why) {
    return make_error(ErrorCode::kInvalidArgument, "gguf writer: key '%s': %s value: %s", key.c_str(),
                      value_type_name(v.type), why);
  };
  auto fits_u = [&](uint64_t max) {
    const auto* u = std::get_if<uint64_t>(&v.v);
    if (u == nullptr) return bad("not held as an unsigned integer");
    if (*u > max) return bad("out of range");
    return Status::ok();
  };
  auto fits_i = [&](int64_t lo, int64_t hi) {
    const auto* i = std::get_if<int64_t>(&v.v);
    if (i == nullptr) return bad("not held as a signed integer");
    if (*i < lo || *i > hi) return bad("out of range");
    return Status::ok();
  };
  switch (v.type) {
    case ValueType::kUint8: return fits_u(UINT8_MAX);
    case ValueType::kUint16: return fits_u(UINT16_MAX);
    case ValueType::kUint32: return fits_u(UINT32_MAX);
    case ValueType::kUint64: return fits_u(UINT64_MAX);
    case ValueType::kInt8: return fits_i(INT8_MIN, INT8_MAX);
    case ValueType::kInt16: return fits_i(INT16_MIN, INT16_MAX);
    case ValueType::kInt32: return fits_i(INT32_MIN, INT32_MAX);
    case ValueType::kInt64: return fits_i(INT64_MIN, INT64_MAX);
    case ValueType::kFloat32:
    case ValueType::kFloat64: return std::holds_alternative<double>(v.v) ? Status::ok() : bad("not held as a double");
    case ValueType::kBool: return std::holds_alternative<bool>(v.v) ? Status::ok() : bad("not held as a bool");
    case ValueType::kString:
      return std::holds_alternative<std::string>(v.v) ? Status::ok() : bad("not held as a string");
    case ValueType::kArray: {
      const Array* a = v.as_array();
      if (a == nullptr) return bad("not held as an array");
      if (!internal::value_type_valid(static_cast<uint32_t>(a->elem_type))) return bad("unknown element type");
      if (a->elem_type == ValueType::kArray && depth + 1 >= internal::kMaxArrayDepth) return bad("nested too deep");
      for (const Value& item : a->items) {
        if (item.type != a->elem_type) return bad("an item's type differs from the element type");
        FERRY_RETURN_IF_ERROR(check_value(item, depth + 1, key));
      }
      return Status::ok();
    }
  }
  return bad("unknown type");
}

template <typename T>
void append_pod(std::string& out, T x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof(T));
}

void append_string(std::string& out, const std::string& s) {
  append_pod<uint64_t>(out, s.size());
  out += s;
}

// Serializes a checked value (without its type id).
void append_value(std::string& out, const Value& v) {
  switch (v.type) {
    case ValueType::kUint8: append_pod(out, static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::kUint16: append_pod(out, static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::kUint32: append_pod(out, static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::kUint64: append_pod(out, std::get<uint64_t>(v.v)); break;
    case ValueType::kInt8: append_pod(out, static_cast<int8_t>(std::get<int64_t>(v.v))); break;
    case ValueType::kInt16: append_pod(out, static_cast<int16_t>(std::get<int64_t>(v.v))); break;
    case ValueType::kInt32: append_pod(out, static_cast<int32_t>(std::get<int64_t>(v.v))); break;
    case ValueType::kInt64: append_pod(out, std::get<int64_t>(v.v)); break;
    case ValueType::kFloat32: append_pod(out, static_cast<float>(std::get<double>(v.v))); break;
    case ValueType::kFloat64: append_pod(out, std::get<double>(v.v)); break;
    case ValueType::kBool: append_pod<uint8_t>(out, std::get<bool>(v.v) ? 1 : 0); break;
    case ValueType::kString: append_string(out, std::get<std::string>(v.v)); break;
    case ValueType::kArray: {
      const Array& a = *v.as_array();
      append_pod(out, static_cast<uint32_t>(a.elem_type));
      append_pod<uint64_t>(out, a.items.size());
      for (const Value& item : a.items) append_value(out, item);
      break;
    }
  }
}

}  // namespace

Expected<std::unique_ptr<Writer>> Writer::create(const std::string& path, size_t alignment) {
  if (!internal::is_pow2(alignment) || alignment > internal::kMaxAlignment)
    return make_error(ErrorCode::kInvalidArgument, "%s: alignment %zu is not a power of two up to 2^30", path.c_str(),
                      alignment);
  std::unique_ptr<Writer> w(new Writer());
  w->impl_ = std::make_unique<Impl>();
  Impl& im = *w->impl_;
  im.path = path;
  im.partial = partial_path(path);
  im.f = std::fopen(im.partial.c_str(), "wb");
  if (im.f == nullptr)
    return make_error(ErrorCode::kIo, "%s: cannot create: %s", path.c_str(), std::strerror(errno));
  im.buffer.resize(size_t{1} << 20);
  std::setvbuf(im.f, im.buffer.data(), _IOFBF, im.buffer.size());
  if (alignment != internal::kDefaultAlignment)
    w->add_value("general.alignment", Value::make_uint(ValueType::kUint32, alignment));
  return w;
}

Writer::~Writer() {
  if (impl_ && impl_->f != nullptr) {
    std::fclose(impl_->f);
    std::remove(impl_->partial.c_str());  // never leave a truncated file that looks like a model
  }
}

void Writer::add_value(const std::string& key, const Value& v) {
  Impl& im = *impl_;
  if (im.state != Impl::State::kMeta) {
    im.defer(make_error(ErrorCode::kInvalidArgument, "%s: key '%s' added after begin_data()", im.path.c_str(), key.c_str()));
    return;
  }
  if (key.empty()) {
    im.defer(make_error(ErrorCode::kInvalidArgument, "%s: empty metadata key", im.path.c_str()));
    return;
  }
  Status st = check_value(v, 0, key);
  if (!st) {
    im.defer(std::move(st));
    return;
  }
  const bool is_alignment = key == "general.alignment";
  if (is_alignment) {
    const Expected<int64_t> a = v.as_int();
    if (!a || *a <= 0 || !internal::is_pow2(static_cast<uint64_t>(*a)) ||
        static_cast<uint64_t>(*a) > internal::kMaxAlignment) {
      im.defer(make_error(ErrorCode::kInvalidArgument, "%s: general.alignment = %s is not a power of two up to 2^30",
                          im.path.c_str(), v.to_string().c_str()));
      return;
    }
    im.alignment = static_cast<size_t>(*a);
  }
  for (auto& [k, old] : im.kv) {
    if (k != key) continue;
    if (is_alignment) {  // set by create() and again by the caller: the last one wins
      old = v;
      return;
    }
    im.defer(make_error(ErrorCode::kInvalidArgument, "%s: duplicate metadata key '%s'", im.path.c_str(), key.c_str()));
    return;
  }
  im.kv.emplace_back(key, v);
}

void Writer::add_u32(const std::string& key, uint32_t v) { add_value(key, Value::make_uint(ValueType::kUint32, v)); }
void Writer::add_i32(const std::string& key, int32_t v) { add_value(key, Value::make_int(ValueType::kInt32, v)); }
void Writer::add_u64(const std::string& key, uint64_t v) { add_value(key, Value::make_uint(ValueType::kUint64, v)); }
void Writer::add_f32(const std::string& key, float v) { add_value(key, Value::make_float(ValueType::kFloat32, v)); }
void Writer::add_bool(const std::string& key, bool v) { add_value(key, Value::make_bool(v)); }
void Writer::add_string(const std::string& key, const std::string& v) { add_value(key, Value::make_string(v)); }

void Writer::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const std::string& s : v) items.push_back(Value::make_string(s));
  add_value(key, Value::make_array(ValueType::kString, std::move(items)));
}

void Writer::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(Value::make_float(ValueType::kFloat32, x));
  add_value(key, Value::make_array(ValueType::kFloat32, std::move(items)));
}

void Writer::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(Value::make_int(ValueType::kInt32, x));
  add_value(key, Value::make_array(ValueType::kInt32, std::move(items)));
}

Status Writer::add_tensor_info(const std::string& name, DType type, std::vector<int64_t> ne) {
  Impl& im = *impl_;
  const char* path = im.path.c_str();
  if (im.state != Impl::State::kMeta)
    return make_error(ErrorCode::kInvalidArgument, "%s: tensor '%s' added after begin_data()", path, name.c_str());
  if (name.empty()) return make_error(ErrorCode::kInvalidArgument, "%s: empty tensor name", path);
  if (im.tensor_names.count(name) != 0)
    return make_error(ErrorCode::kInvalidArgument, "%s: duplicate tensor name '%s'", path, name.c_str());
  if (ne.empty() || ne.size() > static_cast<size_t>(internal::kMaxDims))
    return make_error(ErrorCode::kInvalidArgument, "%s: tensor '%s' has %zu dims (1..4 allowed)", path, name.c_str(),
                      ne.size());
  Impl::Tensor t;
  t.name = name;
  t.dtype = type;
  t.n_dims = static_cast<uint32_t>(ne.size());
  for (int d = 0; d < internal::kMaxDims; ++d) t.ne[d] = d < static_cast<int>(ne.size()) ? ne[d] : 1;
  const DTypeTraits& tr = traits(type);
  if (t.ne[0] > 0 && t.ne[0] % tr.block_elems != 0)
    return make_error(ErrorCode::kInvalidArgument, "%s: tensor '%s': ne[0] = %" PRId64
                      " is not a multiple of the %s block size %d", path, name.c_str(), t.ne[0], tr.name, tr.block_elems);
  if (!internal::tensor_nbytes(tr, t.ne, &t.nbytes))
    return make_error(ErrorCode::kInvalidArgument, "%s: tensor '%s': bad shape [%" PRId64 ", %" PRId64 ", %" PRId64
                      ", %" PRId64 "]", path, name.c_str(), t.ne[0], t.ne[1], t.ne[2], t.ne[3]);
  t.offset = 0;  // assigned in begin_data, when the alignment is final
  im.tensor_names.insert(name);
  im.tensors.push_back(std::move(t));
  return Status::ok();
}

Status Writer::begin_data() {
  Impl& im = *impl_;
  FERRY_RETURN_IF_ERROR(im.deferred);
  if (im.state != Impl::State::kMeta)
    return make_error(ErrorCode::kInvalidArgument, "%s: begin_data() called twice", im.path.c_str());
  std::string head;
  append_pod(head, internal::kMagic);
  append_pod(head, internal::kWriteVersion);
  append_pod<uint64_t>(head, im.tensors.size());
  append_pod<uint64_t>(head, im.kv.size());
  for (const auto& [key, v] : im.kv) {
    append_string(head, key);
    append_pod(head, static_cast<uint32_t>(v.type));
    append_value(head, v);
  }
  uint64_t offset = 0;
  for (Impl::Tensor& t : im.tensors) {
    t.offset = align_up(offset, im.alignment);
    offset = t.offset + t.nbytes;
    append_string(head, t.name);
    append_pod(head, t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) append_pod<uint64_t>(head, static_cast<uint64_t>(t.ne[d]));
    append_pod(head, static_cast<uint32_t>(t.dtype));
    append_pod(head, t.offset);
  }
  FERRY_RETURN_IF_ERROR(im.put(head.data(), head.size()));
  FERRY_RETURN_IF_ERROR(im.pad_to_alignment());
  im.state = Impl::State::kData;
  return Status::ok();
}

Status Writer::write_tensor_data(const void* data, size_t nbytes) {
  Impl& im = *impl_;
  const char* path = im.path.c_str();
  if (im.state != Impl::State::kData)
    return make_error(ErrorCode::kInvalidArgument, "%s: write_tensor_data() outside begin_data()..finish()", path);
  if (nbytes == 0) return Status::ok();
  if (im.cur >= im.tensors.size())
    return make_error(ErrorCode::kInvalidArgument, "%s: %zu bytes of tensor data after the last tensor", path, nbytes);
  const Impl::Tensor& t = im.tensors[im.cur];
  const size_t left = t.nbytes - im.cur_written;
  if (nbytes > left)
    return make_error(ErrorCode::kInvalidArgument, "%s: tensor '%s': %zu bytes given, only %zu of its %zu bytes left",
                      path, t.name.c_str(), nbytes, left, t.nbytes);
  FERRY_RETURN_IF_ERROR(im.put(data, nbytes));
  im.cur_written += nbytes;
  if (im.cur_written == t.nbytes) {
    FERRY_RETURN_IF_ERROR(im.pad_to_alignment());
    ++im.cur;
    im.cur_written = 0;
  }
  return Status::ok();
}

Status Writer::finish() {
  Impl& im = *impl_;
  if (im.state == Impl::State::kMeta) FERRY_RETURN_IF_ERROR(begin_data());
  if (im.state != Impl::State::kData)
    return make_error(ErrorCode::kInvalidArgument, "%s: finish() called twice", im.path.c_str());
  FERRY_RETURN_IF_ERROR(im.deferred);
  if (im.cur < im.tensors.size()) {
    const Impl::Tensor& t = im.tensors[im.cur];
    return make_error(ErrorCode::kInvalidArgument, "%s: finish() before all tensor data was written: tensor '%s' has "
                      "%zu of %zu bytes", im.path.c_str(), t.name.c_str(), im.cur_written, t.nbytes);
  }
  im.state = Impl::State::kDone;
  std::FILE* f = im.f;
  im.f = nullptr;
  const bool flush_ok = std::fflush(f) == 0;
  const int flush_errno = errno;
  const bool close_ok = std::fclose(f) == 0;
  if (!flush_ok || !close_ok) {
    errno = flush_ok ? errno : flush_errno;
    Status st = im.io_error("flush/close");
    std::remove(im.partial.c_str());
    return st;
  }
  if (std::rename(im.partial.c_str(), im.path.c_str()) != 0) {
    Status st = im.io_error("rename of the partial file");
    std::remove(im.partial.c_str());
    return st;
  }
  return Status::ok();
}

}  // namespace ferry::gguf
