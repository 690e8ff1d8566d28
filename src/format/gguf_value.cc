// GGUF metadata values (typed accessors, builders, printing) and the small tables shared by the
// reader and the writer (unsupported ggml type names, checked tensor sizes).
#include <cinttypes>
#include <cstdio>
#include <limits>

#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace ferry::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "unknown";
}

bool Value::is_integer() const { return internal::is_unsigned_type(type) || internal::is_signed_type(type); }
bool Value::is_float() const { return type == ValueType::kFloat32 || type == ValueType::kFloat64; }

Expected<int64_t> Value::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return make_error(ErrorCode::kCorrupt, "integer %" PRIu64 " does not fit in i64", *u);
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  return make_error(ErrorCode::kCorrupt, "expected an integer, got %s", value_type_name(type));
}

Expected<double> Value::as_float() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return make_error(ErrorCode::kCorrupt, "expected a number, got %s", value_type_name(type));
}

Expected<bool> Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return make_error(ErrorCode::kCorrupt, "expected a bool, got %s", value_type_name(type));
}

Expected<std::string> Value::as_string() const {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return make_error(ErrorCode::kCorrupt, "expected a string, got %s", value_type_name(type));
}

const Array* Value::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<Array>>(&v)) return a->get();
  return nullptr;
}

namespace {

void append_quoted(std::string& out, const std::string& s, size_t max_chars) {
  out += '"';
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == max_chars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void append_value(std::string& out, const Value& val, size_t max_items) {
  char buf[64];
  if (const auto* u = std::get_if<uint64_t>(&val.v)) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64, *u);
    out += buf;
  } else if (const auto* i = std::get_if<int64_t>(&val.v)) {
    std::snprintf(buf, sizeof(buf), "%" PRId64, *i);
    out += buf;
  } else if (const auto* d = std::get_if<double>(&val.v)) {
    std::snprintf(buf, sizeof(buf), "%.9g", *d);
    out += buf;
  } else if (const auto* b = std::get_if<bool>(&val.v)) {
    out += *b ? "true" : "false";
  } else if (const auto* s = std::get_if<std::string>(&val.v)) {
    append_quoted(out, *s, 200);
  } else if (const Array* a = val.as_array()) {
    out += '[';
    const size_t n = a->items.size();
    for (size_t k = 0; k < n && k < max_items; ++k) {
      if (k) out += ", ";
      append_value(out, a->items[k], max_items);
    }
    if (n > max_items) {
      std::snprintf(buf, sizeof(buf), ", ... %zu more", n - max_items);
      out += buf;
    }
    out += ']';
  }
}

}  // namespace

std::string Value::to_string(size_t max_items) const {
  std::string out;
  append_value(out, *this, max_items);
  return out;
}

Value Value::make_uint(ValueType t, uint64_t x) {
  FERRY_ASSERT(internal::is_unsigned_type(t));
  Value r;
  r.type = t;
  r.v = x;
  return r;
}

Value Value::make_int(ValueType t, int64_t x) {
  FERRY_ASSERT(internal::is_signed_type(t));
  Value r;
  r.type = t;
  r.v = x;
  return r;
}

Value Value::make_float(ValueType t, double x) {
  FERRY_ASSERT(t == ValueType::kFloat32 || t == ValueType::kFloat64);
  Value r;
  r.type = t;
  r.v = x;
  return r;
}

Value Value::make_bool(bool x) {
  Value r;
  r.type = ValueType::kBool;
  r.v = x;
  return r;
}

Value Value::make_string(std::string x) {
  Value r;
  r.type = ValueType::kString;
  r.v = std::move(x);
  return r;
}

Value Value::make_array(ValueType elem_type, std::vector<Value> items) {
  auto a = std::make_shared<Array>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  Value r;
  r.type = ValueType::kArray;
  r.v = std::move(a);
  return r;
}

TensorView TensorInfo::view() const {
  return TensorView::make(dtype, const_cast<void*>(data), ne[0], ne[1], ne[2], ne[3]);
}

namespace internal {

const char* unsupported_ggml_type_name(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2 (removed from ggml)";
    case 5: return "Q4_3 (removed from ggml)";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 29: return "IQ1_M";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    case 39: return "MXFP4";
  }
  return nullptr;
}

bool tensor_nbytes(const DTypeTraits& tr, const int64_t ne[4], size_t* out) {
  for (int d = 0; d < kMaxDims; ++d)
    if (ne[d] <= 0) return false;
  if (ne[0] % tr.block_elems != 0) return false;
  int64_t nel = 1;
  for (int d = 0; d < kMaxDims; ++d)
    if (__builtin_mul_overflow(nel, ne[d], &nel)) return false;
  const uint64_t blocks_per_row = static_cast<uint64_t>(ne[0] / tr.block_elems);
  uint64_t row = 0, bytes = 0;
  if (__builtin_mul_overflow(blocks_per_row, static_cast<uint64_t>(tr.block_bytes), &row)) return false;
  if (__builtin_mul_overflow(row, static_cast<uint64_t>(nel / ne[0]), &bytes)) return false;
  if (bytes > std::numeric_limits<size_t>::max() / 2) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

}  // namespace internal
}  // namespace ferry::gguf
