set(FERRY_TEST_SOURCES
  test_sublayer.cc
  test_profile.cc
  test_cost_model.cc
  test_planner.cc
  test_profiler.cc
  test_accuracy.cc
)
set(FERRY_TEST_DEPS plan model format tensor base)
