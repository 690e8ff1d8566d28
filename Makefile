# ferry: the two entry points of README.md, plus the pieces they are made of.
#   make run   set up what a run needs, build the ferry binary, and generate text with the bundled model
#   make test  set up everything, build every target, and run every test stage (unit, python vs
#              llama.cpp, ASan/UBSan, fuzz)
# Everything is idempotent: a second `make run` only rebuilds what changed. docs/SETUP.md says what each
# piece does (and how `make run` picks the CUDA backend).
# Variables: MODEL, PROMPT, N (tokens to generate), BUILD (build folder), PYTHON.

MODEL  ?= models/smollm2-135m-instruct-q4_1.gguf
PROMPT ?= What is the capital of France? Answer in two sentences.
N      ?= 64
BUILD  ?= build
PYTHON ?= python3
export PYTHON
export FERRY_BUILD := $(abspath $(BUILD))

.PHONY: run test setup setup-run build build-run unit python asan fuzz clean

run: setup-run build-run
	./$(BUILD)/ferry run -m $(MODEL) --chat -p "$(PROMPT)" -n $(N)

test: setup build
	scripts/test.sh

# Everything: apt + pip packages of the build and the tests (llama-cpp-python included), both models.
setup:
	scripts/setup.sh test

# Only what `make run` needs: the build's packages and the model MODEL names.
setup-run:
	scripts/setup.sh run $(MODEL)

# Every target, tests on, CUDA when nvcc is found.
build:
	scripts/build.sh --for test

# The ferry binary only (CUDA in a new build folder only when a GPU answers nvidia-smi).
build-run:
	scripts/build.sh --for run

# Single test stages (no setup/build first).
unit python asan fuzz:
	FERRY_TEST_STAGES=$@ scripts/test.sh

clean:
	rm -rf $(BUILD) build-asan build-fuzz
