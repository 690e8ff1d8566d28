set(FERRY_TEST_SOURCES
  test_sublayer.cc
  test_profile.cc
  test_cost_model.cc
  test_planner.cc
  test_profiler.cc
  test_profile_stats.cc
  test_profile_check.cc
  test_accuracy.cc
  test_ring_accounting.cc
  test_ring_choice.cc
  test_attention_profile.cc
  test_plan_pinned.cc
)
# test_ring_accounting.cc runs the HybridRunner (emulated device) against the simulation.
set(FERRY_TEST_DEPS exec_hybrid exec plan model kernels_cpu format tensor base)
# The planner's searches are the slowest unit tests (minutes under ASan): CTest starts them first.
set(FERRY_TEST_COST 100)
