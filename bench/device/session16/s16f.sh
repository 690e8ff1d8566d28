#!/usr/bin/env bash
# session 16 call 6 (right after call 5, on the same warm machine): issue 4's table with the session's last
# build; the same steps as session 14's call 5 (llama.cpp from call 5's background build, the models call 5
# synthesized, mv_probe's copy rate, compare.sh FULL).
exec bash bench/device/session14/s14e.sh
