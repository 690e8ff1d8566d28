#!/usr/bin/env bash
# session 15 calls 3 and 4 (right after call 2, on the same warm machine): issue 4's table with the fold and
# the lane-pair Q4_K decoder on; the same steps as session 14's call 5 (llama.cpp from call 2's background
# build, the models call 2 synthesized, ferry from call 2's carry, mv_probe's copy rate, compare.sh FULL).
exec bash bench/device/session14/s14e.sh
