# CLI contract tests: tests/tools/test_*.py (pytest over the built `ferry` binary), run by CTest under
# the `unit` label so `ctest -L unit` covers them in every build, the ASan one included. run_pytest.py
# exits 77 (skipped) when pytest or numpy is missing, a failure under CI=true.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_contract COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/run_pytest.py)
  set_tests_properties(cli_contract PROPERTIES ENVIRONMENT "FERRY_BUILD=${CMAKE_BINARY_DIR}"
                       LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
