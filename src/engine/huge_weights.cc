// copy_weights_to_huge_pages: see huge_weights.h. The views are re-pointed by address: every view of
// ModelWeights (model::all_views) that lies inside a copied tensor moves by that tensor's displacement.
#include "engine/huge_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::engine {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

bool thp_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  if (!std::getline(f, s)) return false;
  return s.find("[never]") == std::string::npos;
}

// MemAvailable in bytes (0 when unknown).
size_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

struct Moved {
  const uint8_t* begin;
  const uint8_t* end;
  uint8_t* to;
};

}  // namespace

HugePageBuffer::~HugePageBuffer() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

std::unique_ptr<HugePageBuffer> copy_weights_to_huge_pages(const gguf::ModelFile& file, model::ModelWeights* w,
                                                           int n_threads) {
  if (!thp_enabled()) return nullptr;
  const bool tied = w->output.data != nullptr && w->output.data == w->token_embd.data;
  std::vector<const gguf::TensorInfo*> ts;
  size_t total = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.data == nullptr || t.nbytes == 0) continue;
    if (t.name == "token_embd.weight" && !tied) continue;  // one row per token is read
    ts.push_back(&t);
    total += (t.nbytes + 63) & ~size_t{63};
  }
  if (ts.empty()) return nullptr;
  const size_t avail = mem_available();
  if (avail == 0 || total > avail / 2) return nullptr;

  const size_t map_bytes = total + kHugePage;
  void* map = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  auto* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHugePage - 1) & ~(kHugePage - 1));
  ::madvise(data, total, MADV_HUGEPAGE);
  auto buf = std::make_unique<HugePageBuffer>(map, map_bytes, data, total);

  std::vector<Moved> moved;
  size_t off = 0;
  for (const gguf::TensorInfo* t : ts) {
    const auto* b = static_cast<const uint8_t*>(t->data);
    moved.push_back({b, b + t->nbytes, data + off});
    off += (t->nbytes + 63) & ~size_t{63};
  }
  // Copy in contiguous shares of the destination (each thread faults in its own huge pages), in pieces;
  // after each piece the file mapping's pages it read are dropped from this process (the page cache
  // keeps them), so the resident peak stays near one copy of the weights instead of two. Only whole
  // pages inside the piece, and only from a file mapping (a parsed buffer is the caller's): a page read
  // again later re-faults from the page cache.
  constexpr size_t kPiece = size_t{32} << 20;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const bool drop_source = file.file_backed();
  const int nth = std::max(1, std::min(n_threads > 0 ? n_threads : static_cast<int>(std::thread::hardware_concurrency()), 16));
  auto copy_share = [&](int ith) {
    const size_t lo = total * static_cast<size_t>(ith) / nth, hi = total * static_cast<size_t>(ith + 1) / nth;
    for (const Moved& m : moved) {
      const size_t d0 = static_cast<size_t>(m.to - data), d1 = d0 + static_cast<size_t>(m.end - m.begin);
      for (size_t a = std::max(d0, lo), e = std::min(d1, hi); a < e;) {
        const size_t n = std::min(kPiece, e - a);
        const uint8_t* src = m.begin + (a - d0);
        std::memcpy(data + a, src, n);
        const uintptr_t p0 = (reinterpret_cast<uintptr_t>(src) + page - 1) & ~(page - 1);
        const uintptr_t p1 = (reinterpret_cast<uintptr_t>(src) + n) & ~(page - 1);
        if (drop_source && p0 < p1) ::madvise(reinterpret_cast<void*>(p0), p1 - p0, MADV_DONTNEED);
        a += n;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < nth; ++i) threads.emplace_back(copy_share, i);
  copy_share(0);
  for (std::thread& t : threads) t.join();

  std::sort(moved.begin(), moved.end(), [](const Moved& a, const Moved& b) { return a.begin < b.begin; });
  auto remap = [&](TensorView& v) {
    if (v.data == nullptr) return;
    const auto* p = static_cast<const uint8_t*>(v.data);
    auto it = std::upper_bound(moved.begin(), moved.end(), p, [](const uint8_t* x, const Moved& m) { return x < m.begin; });
    if (it == moved.begin()) return;
    --it;
    if (p < it->end) v.data = it->to + (p - it->begin);
  };
  for (TensorView* v : model::all_views(*w)) remap(*v);
  return buf;
}

}  // namespace ferry::engine
