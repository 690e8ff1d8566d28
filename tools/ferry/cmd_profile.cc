// ferry profile: measures this machine for the planner (host memory bandwidth, CPU kernels per weight
// type x threads x tokens, and with a GPU the link alone / under load, H, device bandwidth, GPU
// kernels and attention) and writes the JSON profile to -o FILE or to the per-machine cache that
// `ferry plan` reads.
#include <cstdio>
#include <string>

#include "cli.h"
#include "plan/profile.h"
#include "plan/profiler.h"
#include "profile_support.h"

int cmd_profile(int argc, char** argv) {
  using namespace ferry;
  CLI::App app{"Measure this machine for the planner (writes a JSON hardware profile)", "ferry profile"};
  bool quick = false;
  std::string out;
  int threads = 0;
  bool print_json = false;
  std::string cpu_isa;
  app.add_flag("--quick", quick, "quick mode (<= 30 s; what `ferry plan` runs on first use)");
  app.add_option("-o,--output", out, "write the profile here (default: the per-machine cache)");
  app.add_option("-t,--threads", threads, "most CPU threads to measure (default: physical cores)")->check(CLI::Range(1, 4096));
  app.add_flag("--json", print_json, "also print the profile JSON on stdout");
  cli::add_cpu_isa_option(app, &cpu_isa);
  int rc = 0;
  if (!cli::parse(app, argc, argv, &rc)) return rc;
  const Expected<kernels::CpuIsa> isa = kernels::resolve_cpu_isa(cpu_isa);
  if (!isa) return cli::report(isa.status());

  // Where the profile goes must be writable before the measuring starts, not after it.
  if (out.empty() && plan::profile_cache_dir().empty())
    return cli::fail("no cache directory (set HOME or XDG_CACHE_HOME) and no -o FILE given");
  if (Status w = cli::check_output_writable(out.empty() ? plan::profile_cache_dir() + "/profile.json" : out); !w)
    return cli::report(w);

  std::unique_ptr<plan::GpuProber> gpu = cli::make_gpu_prober();
  plan::ProfileOptions opt;
  opt.quick = quick;
  opt.max_threads = threads;
  opt.progress = cli::progress_bar(quick ? "profile (quick)" : "profile");
  const plan::CpuKernels kernels = cli::host_kernels(*isa);
  Expected<plan::HardwareProfile> p = plan::measure_profile(kernels, gpu.get(), opt);
  if (!p) return cli::report(p.status());

  std::string path = out;
  if (path.empty()) {
    path = plan::cached_profile_path(p->machine);
    if (path.empty()) return cli::fail("no cache directory (set HOME or XDG_CACHE_HOME) and no -o FILE given");
  }
  const Status s = plan::save_profile(*p, path);
  if (!s) return cli::report(s);

  const plan::HardwareProfile& h = *p;
  std::printf("profile: %s (%s, %.1f s)\n", path.c_str(), h.mode.c_str(), h.seconds);
  std::printf("machine: %s, %d cores, %s; kernels '%s'%s\n", h.machine.cpu_model.c_str(), h.machine.cores,
              h.machine.simd.c_str(), h.cpu.kernels.c_str(),
              kernels.multithreaded ? "" : " (single-threaded: measured at 1 thread)");
  std::printf("host memory read:");
  for (const auto& b : h.cpu.mem_bw) std::printf("  %d thr %.1f GB/s", b.threads, b.gbs);
  std::printf("\nCPU matmul GFLOP/s (threads: tokens=rate):\n");
  for (const auto& c : h.cpu.matmul) {
    std::printf("  %-5s %3d thr:", dtype_name(c.dtype), c.threads);
    for (size_t i = 0; i < c.tokens.size(); ++i) std::printf(" %d=%.1f", c.tokens[i], c.gflops[i]);
    std::printf("\n");
  }
  std::printf("CPU call overhead: %.1f us\n", h.cpu.call_overhead_us);
  if (h.has_gpu()) {
    std::printf("GPU %s: device %.0f GB/s, launch %.1f us\n", h.gpu->name.c_str(), h.gpu->mem_bw_gbs, h.gpu->launch_us);
    std::printf("link: H2D %.1f GB/s (%.1f while CPU runs), D2H %.1f GB/s (%.1f), pageable H2D %.1f GB/s\n",
                h.link->h2d_gbs, h.link->h2d_busy_gbs, h.link->d2h_gbs, h.link->d2h_busy_gbs, h.link->h2d_pageable_gbs);
    std::printf("CPU keeps %.0f%% of its speed while copies run; H = %.1f GB/s\n", h.link->cpu_share_while_copying * 100,
                h.link->host_combined_gbs);
    if (h.gpu->attention) {
      const plan::GpuAttentionProfile& a = *h.gpu->attention;
      std::printf("GPU attention (%d q / %d kv heads, head_dim %d), us a call: decode", a.n_head, a.n_kv_head,
                  a.head_dim);
      for (const auto& pt : a.decode) std::printf(" %lld cells=%.1f", static_cast<long long>(pt.cells), pt.us);
      for (const auto& pt : a.prefill)
        std::printf("; chunk of %lld tokens at %lld cells=%.1f", static_cast<long long>(pt.tokens),
                    static_cast<long long>(pt.cells), pt.us);
      std::printf("\n");
    }
  } else {
    std::printf("no GPU: plans run every sub-layer on the CPU\n");
  }
  if (print_json) std::printf("%s", plan::profile_to_json(h).c_str());
  return 0;
}
