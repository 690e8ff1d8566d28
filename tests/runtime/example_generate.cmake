# Runs examples/generate (EXAMPLE) on MODEL twice — on the CPU, and on the emulated GPU of PROFILE under
# a 1 GiB budget — and fails unless both exit 0, print the same greedy text, and the emulated run
# reports its modelled device memory. Invoked by CTest (tests/runtime/tests.cmake).
if(NOT EXISTS "${MODEL}")
  message(FATAL_ERROR "model ${MODEL} is missing: run scripts/setup.sh (it fetches the bundled models)")
endif()
set(common "${MODEL}" -n 16 -c 256 -t 2 -p "The capital of France is")
execute_process(COMMAND "${EXAMPLE}" ${common} --device cpu
                RESULT_VARIABLE cpu_rc OUTPUT_VARIABLE cpu_out ERROR_VARIABLE cpu_err)
execute_process(COMMAND "${EXAMPLE}" ${common} --device emulated --vram 1G --profile "${PROFILE}"
                RESULT_VARIABLE emu_rc OUTPUT_VARIABLE emu_out ERROR_VARIABLE emu_err)
message("cpu (exit ${cpu_rc}):\n${cpu_out}${cpu_err}")
message("emulated (exit ${emu_rc}):\n${emu_out}${emu_err}")
if(NOT cpu_rc EQUAL 0 OR NOT emu_rc EQUAL 0)
  message(FATAL_ERROR "example_generate failed")
endif()
string(LENGTH "${cpu_out}" n)
if(n LESS 30)
  message(FATAL_ERROR "example_generate printed almost nothing on the CPU")
endif()
if(NOT cpu_out STREQUAL emu_out)
  message(FATAL_ERROR "the emulated GPU's text differs from the CPU's")
endif()
if(NOT emu_err MATCHES "emulated: [0-9]+ tokens.*\\(modelled\\)" OR NOT emu_err MATCHES "budget 1024.0 MiB = CUDA context")
  message(FATAL_ERROR "the emulated run did not report its device memory")
endif()
