# test_base: the environment options (base/env_options.h).
set(FERRY_TEST_SOURCES
  test_env_options.cc
)
set(FERRY_TEST_DEPS base)
