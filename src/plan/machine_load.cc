// MachineLoadMeter, pending_file_write_bytes, wait_for_file_writes: see machine_load.h.
#include "plan/machine_load.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace ferry::plan {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

MachineLoadMeter::MachineLoadMeter() : start_(read()), t0_(Clock::now()) {}

MachineLoadMeter::Ticks MachineLoadMeter::read() {
  Ticks t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double v[8] = {};  // user nice system idle iowait irq softirq steal
  if (stat >> cpu && cpu == "cpu") {
    for (double& x : v) stat >> x;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
    t.steal = v[7];
  }
  std::ifstream self("/proc/self/stat");
  std::string line;
  if (std::getline(self, line)) {
    // The command name (field 2) may hold spaces: count from the last ')'. Field 3 is the state,
    // utime and stime are fields 14 and 15 (all threads of the process).
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size()) {
      std::istringstream ss(line.substr(close + 2));
      std::string f;
      for (int field = 3; field <= 15 && ss >> f; ++field)
        if (field == 14 || field == 15) t.self += std::atof(f.c_str());
    }
  }
  return t;
}

MachineLoadMeter::Load MachineLoadMeter::since_start() const {
  const Ticks now = read();
  const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double s = since(t0_);
  Load l;
  if (ticks_per_s <= 0 || s <= 0) return l;
  l.other_cores = std::max(0.0, (now.busy - start_.busy) - (now.self - start_.self)) / ticks_per_s / s;
  l.steal_cores = std::max(0.0, now.steal - start_.steal) / ticks_per_s / s;
  return l;
}

uint64_t pending_file_write_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0, total = 0;
  std::string unit;
  while (f >> key >> kb) {
    if (key == "Dirty:" || key == "Writeback:") total += kb;
    std::getline(f, unit);  // " kB" and the rest of the line
  }
  return total << 10;
}

double wait_for_file_writes(double max_wait_s, const std::function<void(const std::string&)>& note) {
  constexpr uint64_t kStart = 256ull << 20, kDone = 64ull << 20;
  const uint64_t pending = pending_file_write_bytes();
  if (pending <= kStart) return 0;
  if (note)
    note("waiting for " + std::to_string(pending >> 20) + " MiB of file writes to reach the disk");
  const auto t0 = Clock::now();
  // sync() returns when everything is written; a slow disk may take longer than max_wait_s, so the
  // wait polls the pending bytes and leaves the sync running (detached) past it.
  std::thread flush([] { ::sync(); });
  flush.detach();
  while (pending_file_write_bytes() > kDone && since(t0) < max_wait_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return since(t0);
}

}  // namespace ferry::plan
