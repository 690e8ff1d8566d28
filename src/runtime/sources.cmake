# runtime: the library entry point above engine, exec and plan (runtime::open: a model on any device
# under any budget), the profile's source, the process budget and the executor's reports.
ferry_module(runtime DEPS engine exec_hybrid exec_probe exec plan model kernels_cpu text format tensor base SOURCES
  runtime/runtime.cc
  runtime/budget.cc
  runtime/profile_source.cc
  runtime/report.cc
  runtime/hybrid_step_runner.cc
)
