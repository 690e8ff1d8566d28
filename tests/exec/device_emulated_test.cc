// Tests of the device arena and the emulated device: budget refusal with numbers, best-fit reuse, stream
// ordering, events (record / wait / query / elapsed), copy validation, host registration (read-only
// mappings, whole pages, overlaps). They run in CI without a GPU.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "exec/device.h"
#include "exec/device_arena.h"
#include "exec/device_emulated.h"

namespace ferry::exec {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(DeviceArena, RefusesPastBudgetWithNumbers) {
  ArenaAllocator a(10 * kMiB, kArenaAlign);
  auto x = a.allocate(6 * kMiB, "weights");
  ASSERT_TRUE(x.has_value());
  auto y = a.allocate(5 * kMiB, "kv");
  ASSERT_FALSE(y.has_value());
  EXPECT_EQ(y.status().code(), ErrorCode::kOutOfMemory);
  const std::string& m = y.status().message();
  EXPECT_NE(m.find("'kv'"), std::string::npos) << m;
  EXPECT_NE(m.find("5.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("10.0 MiB"), std::string::npos) << m;  // the budget
  EXPECT_NE(m.find("6.0 MiB"), std::string::npos) << m;   // in use
  auto big = a.allocate(11 * kMiB, "huge");
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.status().message().find("whole budget"), std::string::npos);
}

TEST(DeviceArena, AlignsReusesAndMerges) {
  ArenaAllocator a(1 * kMiB, 256);
  auto b1 = a.allocate(100, "a");
  auto b2 = a.allocate(300, "b");
  auto b3 = a.allocate(256, "c");
  ASSERT_TRUE(b1 && b2 && b3);
  EXPECT_EQ(*b1 % 256, 0u);
  EXPECT_EQ(*b2 % 256, 0u);
  EXPECT_EQ(a.used(), 256u + 512u + 256u);
  EXPECT_TRUE(a.contains(*b2, 300));
  EXPECT_FALSE(a.contains(*b2, 600));
  EXPECT_TRUE(a.release(*b2));
  EXPECT_FALSE(a.release(*b2));
  EXPECT_FALSE(a.contains(*b2, 1));
  // Best fit: a 512-byte request goes into the hole b2 left, not the big tail.
  auto b4 = a.allocate(512, "d");
  ASSERT_TRUE(b4);
  EXPECT_EQ(*b4, *b2);
  EXPECT_TRUE(a.release(*b1));
  EXPECT_TRUE(a.release(*b4));
  EXPECT_TRUE(a.release(*b3));
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free(), 1 * kMiB);  // all merged back
  EXPECT_EQ(a.peak(), 256u + 512u + 256u);
}

std::unique_ptr<EmulatedDevice> make_dev(EmulatedOptions o = {}) {
  auto d = EmulatedDevice::create(o);
  EXPECT_TRUE(d.has_value()) << d.status().message();
  return std::move(d).value();
}

TEST(EmulatedDevice, BudgetAndMemoryInfo) {
  EmulatedOptions o;
  o.budget = 64 * kMiB;
  o.device_total = 80 * kMiB;
  auto dev = make_dev(o);
  auto a = dev->allocate(40 * kMiB, "weights");
  ASSERT_TRUE(a.has_value());
  auto b = dev->allocate(30 * kMiB, "ring");
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory);
  auto info = dev->memory_info();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->arena_capacity, 64 * kMiB);
  EXPECT_EQ(info->arena_used, 40 * kMiB);
  EXPECT_EQ(info->device_total, 80 * kMiB);
  EXPECT_EQ(info->device_free, 16 * kMiB);
  EXPECT_EQ(info->arena_largest_free, 24 * kMiB);
  DeviceBuffer buf = *a;
  dev->release(&buf);
  EXPECT_FALSE(buf);
  EXPECT_TRUE(dev->allocate(64 * kMiB, "all").has_value());
}

TEST(EmulatedDevice, FreshMemoryIsPoisoned) {
  auto dev = make_dev();
  auto a = dev->allocate(64, "x");
  ASSERT_TRUE(a.has_value());
  float f;
  std::memcpy(&f, a->ptr, 4);
  EXPECT_TRUE(std::isnan(f));
}

TEST(EmulatedDevice, RoundTripInStreamOrder) {
  EmulatedOptions o;
  o.copy_gbps = 0.2;  // 1 MiB takes ~5 ms: later work must still wait for it
  auto dev = make_dev(o);
  auto s = dev->create_stream();
  ASSERT_TRUE(s.has_value());
  const size_t n = 1 << 18;
  std::vector<float> src(n), dst(n, 0.f);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i);
  auto buf = dev->allocate(n * 4, "x");
  ASSERT_TRUE(buf.has_value());
  std::vector<int> order;
  ASSERT_TRUE(dev->copy_h2d(buf->ptr, src.data(), n * 4, **s).is_ok());
  ASSERT_TRUE(dev->host_fn(**s, [&] { order.push_back(1); }).is_ok());
  ASSERT_TRUE(dev->copy_d2h(dst.data(), buf->ptr, n * 4, **s).is_ok());
  ASSERT_TRUE(dev->host_fn(**s, [&] { order.push_back(2); }).is_ok());
  ASSERT_TRUE(dev->sync(**s).is_ok());
  EXPECT_EQ(src, dst);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(dev->bytes_h2d(), n * 4);
  EXPECT_EQ(dev->bytes_d2h(), n * 4);
}

TEST(EmulatedDevice, EventOrdersTwoStreams) {
  EmulatedOptions o;
  o.copy_gbps = 0.1;  // 2 MiB ~ 20 ms on the copy stream
  auto dev = make_dev(o);
  auto copy = std::move(dev->create_stream()).value();
  auto compute = std::move(dev->create_stream()).value();
  auto ready = std::move(dev->create_event()).value();
  const size_t n = 2 * kMiB;
  std::vector<uint8_t> src(n, 7), out(n, 0);
  auto slot = std::move(dev->allocate(n, "ring.0")).value();
  auto other = std::move(dev->allocate(n, "act")).value();
  ASSERT_TRUE(dev->memset(slot.ptr, 0, n, *copy).is_ok());
  ASSERT_TRUE(dev->copy_h2d(slot.ptr, src.data(), n, *copy).is_ok());
  ASSERT_TRUE(dev->record(*ready, *copy).is_ok());
  auto q = dev->query(*ready);
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(*q);  // the throttled copy is still running
  ASSERT_TRUE(dev->wait(*compute, *ready).is_ok());
  ASSERT_TRUE(dev->copy_d2d(other.ptr, slot.ptr, n, *compute).is_ok());
  ASSERT_TRUE(dev->copy_d2h(out.data(), other.ptr, n, *compute).is_ok());
  ASSERT_TRUE(dev->sync(*compute).is_ok());
  EXPECT_EQ(out, src);  // compute saw the copy, not the memset
  EXPECT_TRUE(*dev->query(*ready));
}

TEST(EmulatedDevice, EventQueryElapsedAndNeverRecorded) {
  EmulatedOptions o;
  o.copy_gbps = 0.1;
  auto dev = make_dev(o);
  auto s = std::move(dev->create_stream()).value();
  auto e0 = std::move(dev->create_event()).value();
  auto e1 = std::move(dev->create_event()).value();
  auto never = std::move(dev->create_event()).value();
  EXPECT_TRUE(*dev->query(*never));
  EXPECT_TRUE(dev->sync(*never).is_ok());
  EXPECT_FALSE(dev->elapsed_ms(*never, *e1).has_value());
  const size_t n = 1 * kMiB;  // ~10 ms at 0.1 GB/s
  std::vector<uint8_t> host(n, 1);
  auto buf = std::move(dev->allocate(n, "x")).value();
  ASSERT_TRUE(dev->record(*e0, *s).is_ok());
  ASSERT_TRUE(dev->copy_h2d(buf.ptr, host.data(), n, *s).is_ok());
  ASSERT_TRUE(dev->record(*e1, *s).is_ok());
  ASSERT_TRUE(dev->sync(*e1).is_ok());
  auto ms = dev->elapsed_ms(*e0, *e1);
  ASSERT_TRUE(ms.has_value()) << ms.status().message();
  EXPECT_GE(*ms, 9.0f);
  EXPECT_LT(*ms, 2000.0f);
  auto untimed = std::move(dev->create_event(false)).value();
  ASSERT_TRUE(dev->record(*untimed, *s).is_ok());
  ASSERT_TRUE(dev->sync(*untimed).is_ok());
  EXPECT_FALSE(dev->elapsed_ms(*e0, *untimed).has_value());
}

TEST(EmulatedDevice, WaitCapturesTheRecordAtCallTime) {
  // A wait issued before the event's next record must not wait for that later record.
  auto dev = make_dev();
  auto a = std::move(dev->create_stream()).value();
  auto b = std::move(dev->create_stream()).value();
  auto e = std::move(dev->create_event()).value();
  std::atomic<bool> release{false};
  ASSERT_TRUE(dev->record(*e, *a).is_ok());
  ASSERT_TRUE(dev->sync(*e).is_ok());
  ASSERT_TRUE(dev->wait(*b, *e).is_ok());  // refers to the completed record
  ASSERT_TRUE(dev->host_fn(*a, [&] { while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1)); }).is_ok());
  ASSERT_TRUE(dev->record(*e, *a).is_ok());  // a new record, blocked behind the host_fn
  std::atomic<bool> ran{false};
  ASSERT_TRUE(dev->host_fn(*b, [&] { ran = true; }).is_ok());
  ASSERT_TRUE(dev->sync(*b).is_ok());  // must not deadlock
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(*dev->query(*e));
  release = true;
  ASSERT_TRUE(dev->synchronize().is_ok());
  EXPECT_TRUE(*dev->query(*e));
}

TEST(EmulatedDevice, RejectsBadAddresses) {
  EmulatedOptions o;
  o.require_pinned = true;
  auto dev = make_dev(o);
  auto s = std::move(dev->create_stream()).value();
  auto buf = std::move(dev->allocate(4096, "x")).value();
  std::vector<uint8_t> pageable(4096);
  // Pageable host memory while pinned is required.
  Status st = dev->copy_h2d(buf.ptr, pageable.data(), 4096, *s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  auto pinned = std::move(dev->allocate_pinned(4096)).value();
  EXPECT_TRUE(dev->copy_h2d(buf.ptr, pinned.ptr, 4096, *s).is_ok());
  // Past the end of the block, a host pointer as device pointer, a device pointer as host pointer.
  EXPECT_FALSE(dev->copy_h2d(buf.ptr, pinned.ptr, 4096 + 256, *s).is_ok());
  EXPECT_FALSE(dev->copy_h2d(pinned.ptr, pinned.ptr, 16, *s).is_ok());
  EXPECT_FALSE(dev->copy_d2h(buf.ptr, buf.ptr, 16, *s).is_ok());
  // A released block is no longer a valid target.
  DeviceBuffer gone = buf;
  dev->release(&gone);
  EXPECT_FALSE(dev->memset(buf.ptr, 0, 16, *s).is_ok());
  auto info = std::move(dev->memory_info()).value();
  EXPECT_EQ(info.pinned_bytes, 4096u);
  ASSERT_TRUE(dev->synchronize().is_ok());
  dev->release_pinned(&pinned);
  EXPECT_EQ(std::move(dev->memory_info()).value().pinned_bytes, 0u);
}

// register_host pins a read-only mapping in place: whole pages, copies from inside it pass the pinned
// check, overlaps and empty ranges are refused, unregistering makes it pageable again.
TEST(EmulatedDevice, RegisterHostReadOnlyMapping) {
  EmulatedOptions o;
  o.require_pinned = true;
  auto dev = make_dev(o);
  auto s = std::move(dev->create_stream()).value();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_bytes = 8 * page;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(m);
  std::memset(base, 7, map_bytes);
  ASSERT_EQ(mprotect(m, map_bytes, PROT_READ), 0);  // as the model file's mmap
  auto buf = std::move(dev->allocate(4 * page, "x")).value();
  EXPECT_FALSE(dev->copy_h2d(buf.ptr, base + page + 100, 1000, *s).is_ok());  // pageable
  // An unaligned range inside pages 1..2 registers pages 1..2 whole.
  auto h = dev->register_host(base + page + 100, page);
  ASSERT_TRUE(h.has_value()) << h.status().message();
  EXPECT_EQ(h->ptr, base + page);
  EXPECT_EQ(h->bytes, 2 * page);
  EXPECT_TRUE(dev->is_registered(base + page, 2 * page));
  EXPECT_FALSE(dev->is_registered(base + page, 2 * page + 1));
  EXPECT_EQ(std::move(dev->memory_info()).value().registered_bytes, 2 * page);
  EXPECT_EQ(std::move(dev->memory_info()).value().pinned_bytes, 0u);
  EXPECT_TRUE(dev->copy_h2d(buf.ptr, base + page, 2 * page, *s).is_ok());
  EXPECT_FALSE(dev->copy_h2d(buf.ptr, base + 2 * page, 2 * page, *s).is_ok());  // runs past the range
  ASSERT_TRUE(dev->synchronize().is_ok());
  EXPECT_EQ(static_cast<uint8_t*>(buf.ptr)[2 * page - 1], 7);
  // Overlapping pages are refused (as CUDA's "already registered"); a disjoint range is fine.
  EXPECT_FALSE(dev->register_host(base + 2 * page + 10, 10).has_value());
  EXPECT_FALSE(dev->register_host(base, page + 1).has_value());
  auto h2 = dev->register_host(base + 3 * page, page);
  ASSERT_TRUE(h2.has_value()) << h2.status().message();
  EXPECT_FALSE(dev->register_host(base, 0).has_value());
  EXPECT_FALSE(dev->register_host(buf.ptr, 16).has_value());  // device memory
  EXPECT_EQ(dev->register_calls(), 2);
  dev->unregister_host(&*h);
  EXPECT_FALSE(*h);
  EXPECT_FALSE(dev->is_registered(base + page, 1));
  EXPECT_FALSE(dev->copy_h2d(buf.ptr, base + page, 16, *s).is_ok());
  dev->unregister_host(&*h2);
  EXPECT_EQ(std::move(dev->memory_info()).value().registered_bytes, 0u);
  dev->release(&buf);
  munmap(m, map_bytes);

  o.refuse_register = true;
  auto refusing = make_dev(o);
  std::vector<uint8_t> host(64);
  auto r = refusing->register_host(host.data(), host.size());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kDevice);
}

TEST(EmulatedDevice, SynchronizeWaitsForAllStreams) {
  EmulatedOptions o;
  o.copy_gbps = 0.5;
  auto dev = make_dev(o);
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<DeviceBuffer> bufs;
  std::vector<uint8_t> host(kMiB, 3);
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::move(dev->create_stream()).value());
    bufs.push_back(std::move(dev->allocate(kMiB, "b")).value());
    ASSERT_TRUE(dev->copy_h2d(bufs.back().ptr, host.data(), kMiB, *streams.back()).is_ok());
  }
  ASSERT_TRUE(dev->synchronize().is_ok());
  EXPECT_EQ(dev->bytes_h2d(), 4 * kMiB);
  for (auto& b : bufs) EXPECT_EQ(static_cast<uint8_t*>(b.ptr)[kMiB - 1], 3);
}

TEST(DeviceFactory, NamesAndCudaAbsence) {
  auto e = make_device("emulated", 0, 32 * kMiB);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)->kind(), DeviceKind::kEmulated);
  EXPECT_STREQ(device_kind_name((*e)->kind()), "emulated");
  auto bad = make_device("tpu", 0, 0);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  std::string why;
  if (!cuda_available(&why)) {
    EXPECT_FALSE(why.empty());
    auto c = make_cuda_device(0, 0);
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.status().code(), ErrorCode::kDevice);
    EXPECT_NE(c.status().message().find("no usable CUDA GPU"), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace ferry::exec
