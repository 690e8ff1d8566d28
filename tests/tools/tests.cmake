# CLI contract tests: tests/tools/test_cli.py (pytest over the built `ferry` binary), run by CTest under
# the `unit` label so `ctest -L unit` covers them in every build, the ASan one included.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pytest, numpy" RESULT_VARIABLE FERRY_NO_PYTEST
                  OUTPUT_QUIET ERROR_QUIET)
  if(FERRY_NO_PYTEST EQUAL 0)
    add_test(NAME cli_contract
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/tools)
    set_tests_properties(cli_contract PROPERTIES ENVIRONMENT "FERRY_BUILD=${CMAKE_BINARY_DIR}"
                         LABELS unit TIMEOUT 600)
  endif()
endif()
