set(FERRY_TEST_SOURCES
  quant_fixture_test.cc
  quant_half_test.cc
  quant_roundtrip_test.cc
  mxfp4_test.cc
  repack_test.cc
)
set(FERRY_TEST_DEPS tensor base)
