# ferry: the two entry points of README.md, plus the pieces they are made of.
#   make run   set up, build, and generate text with the bundled default model
#   make test  set up, build, and run every test stage (unit, python vs llama.cpp, ASan/UBSan, fuzz)
# Everything is idempotent: a second `make run` only rebuilds what changed.
# Variables: MODEL, PROMPT, N (tokens to generate), BUILD (build folder), PYTHON.

MODEL  ?= models/smollm2-135m-instruct-q4_1.gguf
PROMPT ?= What is the capital of France? Answer in two sentences.
N      ?= 64
BUILD  ?= build
PYTHON ?= python3
export PYTHON
export FERRY_BUILD := $(abspath $(BUILD))

.PHONY: run test setup build unit python asan fuzz clean

run: setup build
	./$(BUILD)/ferry run -m $(MODEL) --chat -p "$(PROMPT)" -n $(N)

test: setup build
	scripts/test.sh

setup:
	scripts/setup.sh

build:
	scripts/build.sh

# Single test stages (no setup/build first).
unit python asan fuzz:
	FERRY_TEST_STAGES=$@ scripts/test.sh

clean:
	rm -rf $(BUILD) build-asan build-fuzz
