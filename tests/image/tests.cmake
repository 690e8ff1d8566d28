# test_image: decoding and resampling for vision input (ferry_image).
list(APPEND FERRY_TEST_SOURCES test_image.cc)
list(APPEND FERRY_TEST_DEPS image base)
