// A decode step on the CPU device allocates nothing once the engine has seen a step of its size:
// this binary replaces the global operator new (plain and aligned) with counting versions, and the
// test counts the allocations made by a run of decode steps after a prefill (with the pool's
// parallel paths in use: matmuls, attention over > 128 cells, two threads).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "engine/engine.h"
#include "model/tiny_model.h"

namespace {
std::atomic<long> g_allocs{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

// Replacements for the whole test binary (libstdc++'s array forms call these). The nothrow forms are
// replaced too: under ASan its own nothrow new would otherwise pair with the free() below
// (std::stable_sort's temporary buffer takes memory that way).
void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace ferry::engine {
namespace {

using ferry::testing::TempDir;
using ferry::testing::TinyModel;

// Allocations made by n_steps decode steps after a prefill of n_prompt tokens (and 2 warm-up steps).
long decode_allocs(DType wtype, bool want_logits, int32_t n_prompt, int32_t n_steps) {
  TempDir dir;
  TinyModel m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_embd = 512;  // matmuls of 512 x 512 and more: split over the pool
  m.n_head = 8;
  m.n_kv_head = 2;
  m.head_dim = 64;
  m.n_ff = 1536;
  m.wtype = wtype;
  const std::string path = dir.file("alloc.gguf");
  Status st = write_tiny_model(m, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = n_prompt + n_steps + 8;
  o.n_batch = 64;
  o.device = "cpu";
  o.n_threads = 2;
  auto e = Engine::load(o);
  EXPECT_TRUE(e.has_value()) << e.status().message();
  if (!e) return -1;
  Engine& eng = **e;
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(m.n_vocab) * 64);
  Batch b;
  b.tokens.reserve(64);
  b.pos.reserve(64);
  b.seq.reserve(64);
  b.logits.reserve(64);
  for (int32_t i0 = 0; i0 < n_prompt; i0 += 64) {
    b.clear();
    for (int32_t i = i0; i < n_prompt && i < i0 + 64; ++i) b.add((7 * i + 3) % 290, i, 0, i == n_prompt - 1);
    logits.clear();
    EXPECT_TRUE(eng.step(b, &logits).is_ok());
  }
  auto decode = [&](int32_t pos) {
    b.clear();
    b.add((11 * pos + 5) % 290, pos, 0, true);
    logits.clear();
    EXPECT_TRUE(eng.step(b, want_logits ? &logits : nullptr).is_ok());
  };
  int32_t pos = n_prompt;
  for (int i = 0; i < 2; ++i) decode(pos++);
  const long before = g_allocs.load();
  for (int i = 0; i < n_steps; ++i) decode(pos++);
  return g_allocs.load() - before;
}

TEST(StepAlloc, CounterSeesAllocations) {
  const long before = g_allocs.load();
  auto* v = new std::vector<int>(100);
  delete v;
  EXPECT_GE(g_allocs.load() - before, 2);
}

TEST(StepAlloc, CpuDecodeStepsAllocateNothing) {
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0}) {
    EXPECT_EQ(decode_allocs(t, true, 150, 16), 0) << dtype_name(t) << " with logits";
    EXPECT_EQ(decode_allocs(t, false, 150, 16), 0) << dtype_name(t) << " without logits";
  }
}

}  // namespace
}  // namespace ferry::engine
