ferry_module(plan DEPS model tensor base SOURCES
  plan/profile.cc
  plan/machine.cc
  plan/profiler.cc
  plan/cost_model.cc
  plan/simulate.cc
  plan/planner.cc
  plan/plan_output.cc
)
