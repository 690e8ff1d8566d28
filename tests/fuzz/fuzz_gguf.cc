// libFuzzer target for the GGUF reader: parses the input as a whole GGUF file and, when it parses,
// reads everything the ModelFile exposes (every value, every tensor's bytes) so ASan/UBSan see any
// bad pointer, length or arithmetic. Built only with -DFERRY_FUZZ=ON (see scripts/fuzz_smoke.sh).
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

namespace {

uint64_t touch_value(const ferry::gguf::Value& v) {
  uint64_t h = static_cast<uint64_t>(v.type);
  if (v.is_integer() || v.is_float()) {
    auto i = v.as_int();
    if (i) h += static_cast<uint64_t>(*i);
    auto f = v.as_float();
    if (f && *f == *f) h += static_cast<uint64_t>(*f != 0);
  }
  if (auto b = v.as_bool()) h += *b;
  if (auto s = v.as_string()) h += s->size();
  if (const auto* a = v.as_array()) {
    h += static_cast<uint64_t>(a->elem_type);
    for (const auto& item : a->items) h += touch_value(item);
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = ferry::gguf::ModelFile::parse(data, size, "fuzz.gguf");
  if (!r) {
    volatile size_t n = r.status().message().size();
    (void)n;
    return 0;
  }
  const ferry::gguf::ModelFile& mf = **r;
  uint64_t h = mf.version() + mf.alignment() + mf.file_bytes() + mf.n_splits();
  for (const auto& [key, v] : mf.metadata()) {
    h += key.size() + touch_value(v) + v.to_string(4).size();
    if (mf.find(key) == nullptr) __builtin_trap();
  }
  h += static_cast<uint64_t>(mf.get_int_or("general.alignment", 0));
  h += mf.get_string_or("general.architecture", "").size();
  h += static_cast<uint64_t>(mf.get_float_or("general.x", 0.0) != 0.0);
  for (const auto& t : mf.tensors()) {
    if (mf.find_tensor(t.name) != &t) __builtin_trap();
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (p < data || t.file_offset + t.nbytes > size || p + t.nbytes > data + size) __builtin_trap();
    h += p[0] + p[t.nbytes - 1] + t.view().nbytes() + static_cast<uint64_t>(t.view().nelements());
  }
  volatile uint64_t sink = h;
  (void)sink;
  return 0;
}
