// GGUF reader: ModelFile::open (mmap, split files) and ModelFile::parse (in-memory buffer).
// Layout (v2/v3, little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x
// {string key, u32 type, value}, n_tensors x {string name, u32 n_dims, u64 ne[n_dims], u32 type,
// u64 offset}, padding to `general.alignment` (default 32), then the data section; tensor offsets
// are relative to it. A string is {u64 length, bytes}; an array {u32 elem type, u64 count, items}.
// Every count and length is checked against the bytes left before anything is allocated.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <set>

#include "base/mmap_file.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace ferry::gguf {

using internal::kMaxArrayDepth;
using internal::kMaxDims;
using internal::kMaxMetadataValues;

struct ModelFile::Split {
  std::string path;               // the name used in messages
  std::unique_ptr<MmapFile> map;  // null when parsed from memory
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t alignment = internal::kDefaultAlignment;
  uint64_t data_offset = 0;       // start of the aligned data section
  int64_t declared_tensors = -1;  // split.tensors.count, -1 when absent
};

namespace {

// A name from the file, safe to put in a one-line message: control bytes escaped, long names cut.
std::string printable(std::string_view s, size_t max_chars = 96) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max_chars) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Reads one split's header, metadata and tensor infos from a byte range. Holds no ownership.
class Parser {
 public:
  Parser(const std::string& label, const uint8_t* data, size_t size) : label_(label), p_(data), size_(size) {}

  Status fail(ErrorCode code, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return Status(code, label_ + ": " + buf);
  }

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (sizeof(T) > remaining())
      return fail(ErrorCode::kCorrupt, "truncated: file ends at offset %zu while reading %s", size_, what);
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const std::string& what) {
    const size_t at = pos_;
    uint64_t len = 0;
    FERRY_RETURN_IF_ERROR(read(&len, what.c_str()));
    if (len > remaining())
      return fail(ErrorCode::kCorrupt, "%s: string length %" PRIu64 " at offset %zu exceeds the %zu bytes left",
                  what.c_str(), len, at, remaining());
    out->assign(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::ok();
  }

  Status read_header(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
    uint32_t magic = 0;
    if (size_ < 4) return fail(ErrorCode::kCorrupt, "not a GGUF file (%zu bytes, too short for the magic)", size_);
    FERRY_RETURN_IF_ERROR(read(&magic, "the magic"));
    if (magic != internal::kMagic)
      return fail(ErrorCode::kCorrupt, "not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", p_[0], p_[1],
                  p_[2], p_[3]);
    FERRY_RETURN_IF_ERROR(read(version, "the version"));
    if (*version == 1) return fail(ErrorCode::kUnsupported, "GGUF version 1 is not supported (only 2 and 3)");
    if (*version != 2 && *version != 3) {
      if ((*version & 0xffff) == 0 && __builtin_bswap32(*version) <= 3)
        return fail(ErrorCode::kUnsupported, "big-endian GGUF files are not supported");
      return fail(ErrorCode::kUnsupported, "GGUF version %u is not supported (only 2 and 3)", *version);
    }
    FERRY_RETURN_IF_ERROR(read(n_tensors, "the tensor count"));
    FERRY_RETURN_IF_ERROR(read(n_kv, "the metadata count"));
    // Lower bounds on the bytes of one entry: a key/value is >= 8 + 4 + 1 bytes, a tensor info >= 24.
    if (*n_kv > remaining() / 13)
      return fail(ErrorCode::kCorrupt, "metadata count %" PRIu64 " is more than the file can hold (%zu bytes left)",
                  *n_kv, remaining());
    if (*n_tensors > remaining() / 24)
      return fail(ErrorCode::kCorrupt, "tensor count %" PRIu64 " is more than the file can hold (%zu bytes left)",
                  *n_tensors, remaining());
    return Status::ok();
  }

  Status read_value(ValueType t, Value* out, int depth, const std::string& what) {
    out->type = t;
    if (++n_values_ > kMaxMetadataValues)
      return fail(ErrorCode::kUnsupported, "%s: metadata holds more than %" PRIu64 " values", what.c_str(),
                  kMaxMetadataValues);
    switch (t) {
      case ValueType::kUint8: return read_uint<uint8_t>(out, what);
      case ValueType::kUint16: return read_uint<uint16_t>(out, what);
      case ValueType::kUint32: return read_uint<uint32_t>(out, what);
      case ValueType::kUint64: return read_uint<uint64_t>(out, what);
      case ValueType::kInt8: return read_int<int8_t>(out, what);
      case ValueType::kInt16: return read_int<int16_t>(out, what);
      case ValueType::kInt32: return read_int<int32_t>(out, what);
      case ValueType::kInt64: return read_int<int64_t>(out, what);
      case ValueType::kFloat32: {
        float f = 0;
        FERRY_RETURN_IF_ERROR(read(&f, what.c_str()));
        out->v = static_cast<double>(f);
        return Status::ok();
      }
      case ValueType::kFloat64: {
        double d = 0;
        FERRY_RETURN_IF_ERROR(read(&d, what.c_str()));
        out->v = d;
        return Status::ok();
      }
      case ValueType::kBool: {
        uint8_t b = 0;
        FERRY_RETURN_IF_ERROR(read(&b, what.c_str()));
        out->v = b != 0;  // like ggml: any non-zero byte is true
        return Status::ok();
      }
      case ValueType::kString: {
        std::string s;
        FERRY_RETURN_IF_ERROR(read_string(&s, what));
        out->v = std::move(s);
        return Status::ok();
      }
      case ValueType::kArray: return read_array(out, depth, what);
    }
    return fail(ErrorCode::kInternal, "%s: unhandled value type", what.c_str());
  }

  Status read_kv(uint64_t n_kv, std::vector<std::pair<std::string, Value>>* kv) {
    std::set<std::string, std::less<>> seen;
    kv->reserve(static_cast<size_t>(n_kv));  // bounded by the file size in read_header
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key;
      FERRY_RETURN_IF_ERROR(read_string(&key, "key #" + std::to_string(i)));
      if (key.empty()) return fail(ErrorCode::kCorrupt, "key #%" PRIu64 " is empty", i);
      const std::string what = "key '" + printable(key) + "'";
      if (!seen.insert(key).second) return fail(ErrorCode::kCorrupt, "duplicate %s", what.c_str());
      uint32_t type = 0;
      FERRY_RETURN_IF_ERROR(read(&type, (what + " type").c_str()));
      if (!internal::value_type_valid(type))
        return fail(ErrorCode::kCorrupt, "%s: unknown value type %u", what.c_str(), type);
      Value v;
      FERRY_RETURN_IF_ERROR(read_value(static_cast<ValueType>(type), &v, 0, what));
      kv->emplace_back(std::move(key), std::move(v));
    }
    return Status::ok();
  }

  Status read_tensor_info(uint64_t index, TensorInfo* ti) {
    FERRY_RETURN_IF_ERROR(read_string(&ti->name, "tensor #" + std::to_string(index) + " name"));
    if (ti->name.empty()) return fail(ErrorCode::kCorrupt, "tensor #%" PRIu64 " has an empty name", index);
    const std::string who = "tensor '" + printable(ti->name) + "'";
    uint32_t n_dims = 0;
    FERRY_RETURN_IF_ERROR(read(&n_dims, (who + " n_dims").c_str()));
    if (n_dims > static_cast<uint32_t>(kMaxDims))
      return fail(ErrorCode::kCorrupt, "%s: n_dims %u (at most %d)", who.c_str(), n_dims, kMaxDims);
    ti->n_dims = static_cast<int32_t>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      FERRY_RETURN_IF_ERROR(read(&ne, (who + " shape").c_str()));
      if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX))
        return fail(ErrorCode::kCorrupt, "%s: dimension %u is %" PRIu64 " (must be in 1..2^63-1)", who.c_str(), d,
                    ne);
      ti->ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type = 0;
    FERRY_RETURN_IF_ERROR(read(&type, (who + " type").c_str()));
    FERRY_RETURN_IF_ERROR(read(&ti->offset, (who + " offset").c_str()));
    const DTypeTraits* tr = dtype_traits(type);
    if (tr == nullptr) {
      if (const char* name = internal::unsupported_ggml_type_name(type))
        return fail(ErrorCode::kUnsupported, "%s: unsupported tensor type %s (id %u)", who.c_str(), name, type);
      return fail(ErrorCode::kUnsupported, "%s: unknown tensor type id %u", who.c_str(), type);
    }
    ti->dtype = tr->type;
    if (ti->ne[0] % tr->block_elems != 0)
      return fail(ErrorCode::kCorrupt, "%s: ne[0] = %" PRId64 " is not a multiple of the %s block size %d",
                  who.c_str(), ti->ne[0], tr->name, tr->block_elems);
    if (!internal::tensor_nbytes(*tr, ti->ne, &ti->nbytes))
      return fail(ErrorCode::kCorrupt, "%s: shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] %s is too large",
                  who.c_str(), ti->ne[0], ti->ne[1], ti->ne[2], ti->ne[3], tr->name);
    return Status::ok();
  }

 private:
  template <typename T>
  Status read_uint(Value* out, const std::string& what) {
    T x = 0;
    FERRY_RETURN_IF_ERROR(read(&x, what.c_str()));
    out->v = static_cast<uint64_t>(x);
    return Status::ok();
  }
  template <typename T>
  Status read_int(Value* out, const std::string& what) {
    T x = 0;
    FERRY_RETURN_IF_ERROR(read(&x, what.c_str()));
    out->v = static_cast<int64_t>(x);
    return Status::ok();
  }

  Status read_array(Value* out, int depth, const std::string& what) {
    const size_t at = pos_;
    uint32_t elem = 0;
    uint64_t count = 0;
    FERRY_RETURN_IF_ERROR(read(&elem, (what + " array type").c_str()));
    if (!internal::value_type_valid(elem))
      return fail(ErrorCode::kCorrupt, "%s: array of unknown value type %u at offset %zu", what.c_str(), elem, at);
    const auto et = static_cast<ValueType>(elem);
    if (et == ValueType::kArray && depth + 1 >= kMaxArrayDepth)
      return fail(ErrorCode::kCorrupt, "%s: arrays nested deeper than %d", what.c_str(), kMaxArrayDepth);
    FERRY_RETURN_IF_ERROR(read(&count, (what + " array count").c_str()));
    const size_t min_size = internal::value_min_size(et);
    if (count > remaining() / min_size)
      return fail(ErrorCode::kCorrupt,
                  "%s: array count %" PRIu64 " at offset %zu needs at least %zu bytes per %s, only %zu bytes left",
                  what.c_str(), count, at + 4, min_size, value_type_name(et), remaining());
    if (count > kMaxMetadataValues - n_values_)
      return fail(ErrorCode::kUnsupported, "%s: metadata holds more than %" PRIu64 " values", what.c_str(),
                  kMaxMetadataValues);
    auto arr = std::make_shared<Array>();
    arr->elem_type = et;
    arr->items.resize(static_cast<size_t>(count));  // bounded by the bytes left (checked above)
    if (internal::value_fixed_size(et) != 0) {
      // Fast path (vocabulary scores, token types): all items are known to be present, so no
      // per-item bounds check; values are decoded straight from the bytes.
      n_values_ += count;
      for (auto& item : arr->items) decode_fixed(et, &item);
    } else if (et == ValueType::kString) {  // vocabularies and merges: strings built in place
      n_values_ += count;
      const std::string item_what = what + " item";
      for (auto& item : arr->items) {
        item.type = et;
        FERRY_RETURN_IF_ERROR(read_string(&item.v.emplace<std::string>(), item_what));
      }
    } else {
      const std::string item_what = what + " item";
      for (auto& item : arr->items) FERRY_RETURN_IF_ERROR(read_value(et, &item, depth + 1, item_what));
    }
    out->v = std::move(arr);
    return Status::ok();
  }

  // Decodes one fixed-size value at pos_ (the caller checked that its bytes are there).
  void decode_fixed(ValueType t, Value* out) {
    out->type = t;
    const uint8_t* q = p_ + pos_;
    auto load = [q](auto x) {
      std::memcpy(&x, q, sizeof(x));
      return x;
    };
    switch (t) {
      case ValueType::kUint8: out->v = static_cast<uint64_t>(load(uint8_t{})); break;
      case ValueType::kUint16: out->v = static_cast<uint64_t>(load(uint16_t{})); break;
      case ValueType::kUint32: out->v = static_cast<uint64_t>(load(uint32_t{})); break;
      case ValueType::kUint64: out->v = load(uint64_t{}); break;
      case ValueType::kInt8: out->v = static_cast<int64_t>(load(int8_t{})); break;
      case ValueType::kInt16: out->v = static_cast<int64_t>(load(int16_t{})); break;
      case ValueType::kInt32: out->v = static_cast<int64_t>(load(int32_t{})); break;
      case ValueType::kInt64: out->v = load(int64_t{}); break;
      case ValueType::kFloat32: out->v = static_cast<double>(load(float{})); break;
      case ValueType::kFloat64: out->v = load(double{}); break;
      case ValueType::kBool: out->v = load(uint8_t{}) != 0; break;
      case ValueType::kString:
      case ValueType::kArray: FERRY_ASSERT(false);
    }
    pos_ += internal::value_fixed_size(t);
  }

  const std::string& label_;
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t n_values_ = 0;
};

const Value* find_kv(const std::vector<std::pair<std::string, Value>>& kv, std::string_view key) {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

// Recognizes `PREFIX-00001-of-00003.gguf`; fills the prefix, the 1-based index and the count.
bool parse_split_name(const std::string& path, std::string* prefix, int* no, int* count) {
  static constexpr std::string_view kTail = "-00000-of-00000.gguf";
  if (path.size() <= kTail.size()) return false;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail.size());
  int a = 0, b = 0;
  for (size_t i = 0; i < kTail.size(); ++i) {
    const char c = tail[i];
    if (kTail[i] == '0') {
      if (c < '0' || c > '9') return false;
      (i < 6 ? a : b) = (i < 6 ? a : b) * 10 + (c - '0');
    } else if (c != kTail[i]) {
      return false;
    }
  }
  if (a < 1 || b < 1 || a > b) return false;
  *prefix = path.substr(0, path.size() - kTail.size());
  *no = a;
  *count = b;
  return true;
}

std::string split_name(const std::string& prefix, int no, int count) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

}  // namespace

Status ModelFile::parse_split(const uint8_t* data, size_t size, uint32_t split_index) {
  Split& sp = *splits_[split_index];
  const uint32_t n_splits = static_cast<uint32_t>(splits_.size());
  Parser ps(sp.path, data, size);
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  FERRY_RETURN_IF_ERROR(ps.read_header(&version, &n_tensors, &n_kv));
  std::vector<std::pair<std::string, Value>> kv;
  FERRY_RETURN_IF_ERROR(ps.read_kv(n_kv, &kv));

  if (const Value* a = find_kv(kv, "general.alignment")) {
    if (!a->is_integer()) return ps.fail(ErrorCode::kCorrupt, "general.alignment is a %s, expected u32", value_type_name(a->type));
    const Expected<int64_t> al = a->as_int();
    if (!al || *al <= 0 || !internal::is_pow2(static_cast<uint64_t>(*al)) ||
        static_cast<uint64_t>(*al) > internal::kMaxAlignment)
      return ps.fail(ErrorCode::kCorrupt, "general.alignment = %s is not a power of two up to 2^30",
                     a->to_string().c_str());
    sp.alignment = static_cast<size_t>(*al);
  }

  // Split keys: a multi-file model must say which part each file is; a single file may carry them
  // (count 1, index 0).
  const Value* count_v = find_kv(kv, "split.count");
  const Value* no_v = find_kv(kv, "split.no");
  if (n_splits > 1 && (count_v == nullptr || no_v == nullptr))
    return ps.fail(ErrorCode::kCorrupt, "file %u of a %u-file split model lacks the split.count / split.no keys",
                   split_index + 1, n_splits);
  if (count_v != nullptr) {
    const Expected<int64_t> c = count_v->as_int();
    if (!c) return ps.fail(ErrorCode::kCorrupt, "split.count is a %s, expected an integer", value_type_name(count_v->type));
    if (*c != static_cast<int64_t>(n_splits)) {
      if (n_splits == 1)
        return ps.fail(ErrorCode::kInvalidArgument,
                       "split.count is %" PRId64 " but only this file was given (open the first split, named "
                       "NAME-00001-of-%05" PRId64 ".gguf)", *c, *c);
      return ps.fail(ErrorCode::kCorrupt, "split.count is %" PRId64 ", but the file names say %u splits", *c, n_splits);
    }
  }
  if (no_v != nullptr) {
    const Expected<int64_t> n = no_v->as_int();
    if (!n) return ps.fail(ErrorCode::kCorrupt, "split.no is a %s, expected an integer", value_type_name(no_v->type));
    if (*n != static_cast<int64_t>(split_index))
      return ps.fail(ErrorCode::kCorrupt, "split.no is %" PRId64 ", expected %u (0-based index of this file)", *n,
                     split_index);
  }
  if (const Value* t = find_kv(kv, "split.tensors.count")) {
    const Expected<int64_t> n = t->as_int();
    if (!n || *n < 0) return ps.fail(ErrorCode::kCorrupt, "split.tensors.count = %s is not a count", t->to_string().c_str());
    sp.declared_tensors = *n;
  }

  std::vector<TensorInfo> infos(static_cast<size_t>(n_tensors));  // bounded by the file size in read_header
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo& ti = infos[static_cast<size_t>(i)];
    FERRY_RETURN_IF_ERROR(ps.read_tensor_info(i, &ti));
    ti.split = split_index;
  }

  // The data section starts at the next multiple of the alignment (it may be absent when there is
  // no tensor data at all).
  sp.data_offset = internal::align_up(ps.pos(), sp.alignment);
  const uint64_t data_size = sp.data_offset < size ? size - sp.data_offset : 0;
  for (TensorInfo& ti : infos) {
    const std::string who = printable(ti.name);
    if (ti.offset % sp.alignment != 0)
      return ps.fail(ErrorCode::kCorrupt, "tensor '%s' offset %" PRIu64 " is not a multiple of the alignment %zu",
                     who.c_str(), ti.offset, sp.alignment);
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
      return ps.fail(ErrorCode::kCorrupt,
                     "tensor '%s' data [offset %" PRIu64 ", %zu bytes] extends past end of file (%zu bytes, data "
                     "section at %" PRIu64 ")", who.c_str(), ti.offset, ti.nbytes, size, sp.data_offset);
    ti.file_offset = sp.data_offset + ti.offset;
    ti.data = data + ti.file_offset;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(infos.size());
  for (const TensorInfo& ti : infos) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset)
      return ps.fail(ErrorCode::kCorrupt,
                     "tensors '%s' [offset %" PRIu64 ", %zu bytes] and '%s' [offset %" PRIu64 "] overlap",
                     printable(a.name).c_str(), a.offset, a.nbytes, printable(b.name).c_str(), b.offset);
  }

  for (TensorInfo& ti : infos) {
    if (tensor_index_.count(ti.name) != 0)
      return ps.fail(ErrorCode::kCorrupt, "duplicate tensor name '%s'", printable(ti.name).c_str());
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }
  if (split_index == 0) {
    version_ = version;
    alignment_ = sp.alignment;
    kv_ = std::move(kv);
    for (size_t i = 0; i < kv_.size(); ++i) kv_index_.emplace(kv_[i].first, i);
  }
  return Status::ok();
}

Expected<std::unique_ptr<ModelFile>> ModelFile::open(const std::string& path) {
  std::unique_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = path;
  std::vector<std::string> paths;
  std::string prefix;
  int no = 0, count = 0;
  if (parse_split_name(path, &prefix, &no, &count) && count > 1) {
    for (int i = 1; i <= count; ++i) paths.push_back(split_name(prefix, i, count));
  } else {
    paths.push_back(path);
  }
  for (const std::string& p : paths) {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<MmapFile> map, MmapFile::open(p));
    auto sp = std::make_unique<Split>();
    sp->path = p;
    sp->data = map->data();
    sp->size = map->size();
    sp->map = std::move(map);
    mf->splits_.push_back(std::move(sp));
  }
  for (uint32_t i = 0; i < mf->splits_.size(); ++i)
    FERRY_RETURN_IF_ERROR(mf->parse_split(mf->splits_[i]->data, mf->splits_[i]->size, i));
  for (const auto& sp : mf->splits_)
    if (sp->declared_tensors >= 0 && static_cast<size_t>(sp->declared_tensors) != mf->tensors_.size())
      return make_error(ErrorCode::kCorrupt, "%s: split.tensors.count is %" PRId64 " but the splits hold %zu tensors",
                        sp->path.c_str(), sp->declared_tensors, mf->tensors_.size());
  return mf;
}

bool ModelFile::file_backed() const {
  for (const std::unique_ptr<Split>& sp : splits_)
    if (sp->map == nullptr) return false;
  return !splits_.empty();
}

Expected<std::unique_ptr<ModelFile>> ModelFile::parse(const void* data, size_t size, std::string name) {
  std::unique_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = name;
  auto sp = std::make_unique<Split>();
  sp->path = std::move(name);
  sp->data = static_cast<const uint8_t*>(data);
  sp->size = size;
  mf->splits_.push_back(std::move(sp));
  FERRY_RETURN_IF_ERROR(mf->parse_split(static_cast<const uint8_t*>(data), size, 0));
  const Split& s0 = *mf->splits_[0];
  if (s0.declared_tensors >= 0 && static_cast<size_t>(s0.declared_tensors) != mf->tensors_.size())
    return make_error(ErrorCode::kCorrupt, "%s: split.tensors.count is %" PRId64 " but the file holds %zu tensors",
                      s0.path.c_str(), s0.declared_tensors, mf->tensors_.size());
  return mf;
}

ModelFile::~ModelFile() = default;

size_t ModelFile::file_bytes() const {
  size_t total = 0;
  for (const auto& sp : splits_) total += sp->size;
  return total;
}

const std::string& ModelFile::split_path(uint32_t split) const {
  FERRY_ASSERT(split < splits_.size());
  return splits_[split]->path;
}

const Value* ModelFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* ModelFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

template <typename T>
Expected<T> with_key(const std::string& path, std::string_view key, Expected<T> r) {
  if (r) return r;
  return Status(r.status().code(), path + ": key '" + std::string(key) + "': " + r.status().message());
}

}  // namespace

Expected<int64_t> ModelFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return make_error(ErrorCode::kNotFound, "%s: key '%.*s' not found", path_.c_str(), (int)key.size(), key.data());
  return with_key(path_, key, v->as_int());
}

int64_t ModelFile::get_int_or(std::string_view key, int64_t fallback) const {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  Expected<int64_t> r = v->as_int();
  return r ? *r : fallback;
}

Expected<double> ModelFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return make_error(ErrorCode::kNotFound, "%s: key '%.*s' not found", path_.c_str(), (int)key.size(), key.data());
  return with_key(path_, key, v->as_float());
}

double ModelFile::get_float_or(std::string_view key, double fallback) const {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  Expected<double> r = v->as_float();
  return r ? *r : fallback;
}

Expected<std::string> ModelFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return make_error(ErrorCode::kNotFound, "%s: key '%.*s' not found", path_.c_str(), (int)key.size(), key.data());
  return with_key(path_, key, v->as_string());
}

std::string ModelFile::get_string_or(std::string_view key, std::string fallback) const {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  Expected<std::string> r = v->as_string();
  return r ? std::move(r).value() : fallback;
}

bool ModelFile::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  Expected<bool> r = v->as_bool();
  return r ? *r : fallback;
}

}  // namespace ferry::gguf
