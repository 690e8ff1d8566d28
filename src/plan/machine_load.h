// What else the machine is doing while the profiler measures it: CPU time taken by other processes
// and by the hypervisor (steal), and file writes still in flight (a model file just downloaded or
// written: its writeback takes CPU time and memory bandwidth for seconds).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ferry::plan {

// Cores' worth of CPU time since construction: busy time from /proc/stat minus this process's own
// (/proc/self/stat), and steal time. Zeros where /proc is unreadable.
class MachineLoadMeter {
 public:
  MachineLoadMeter();
  struct Load {
    double other_cores = 0;  // average cores busy with other processes
    double steal_cores = 0;  // average cores the hypervisor gave to other guests
  };
  Load since_start() const;

 private:
  struct Ticks {
    double busy = 0, steal = 0, self = 0;
  };
  static Ticks read();
  Ticks start_;
  std::chrono::steady_clock::time_point t0_;
};

// Dirty + under-writeback file pages (/proc/meminfo), bytes; 0 where unreadable.
uint64_t pending_file_write_bytes();

// When more than 256 MiB of file writes are pending: says so through `note`, starts a sync() and waits
// until under 64 MiB are left or `max_wait_s` passed. Returns the seconds waited.
double wait_for_file_writes(double max_wait_s, const std::function<void(const std::string&)>& note);

}  // namespace ferry::plan
