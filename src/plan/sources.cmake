ferry_module(plan DEPS model tensor base SOURCES
  plan/profile.cc
  plan/machine.cc
  plan/profiler.cc
  plan/profile_stats.cc
  plan/cpu_profiler.cc
  plan/gpu_profiler.cc
  plan/machine_load.cc
  plan/profile_check.cc
  plan/cost_model.cc
  plan/simulate.cc
  plan/placement_pricer.cc
  plan/tier_strategies.cc
  plan/resident_choice.cc
  plan/planner.cc
  plan/plan_output.cc
)
