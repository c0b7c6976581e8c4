#!/usr/bin/env bash
# The first pytest pair: A (pip compiled everything) then B (--no-compile, bytecode written as imported), in the
# clones install_ab.sh left; PYTHONDONTWRITEBYTECODE is unset for B as `make test LAZY_BYTECODE=1` unsets it.
set -uo pipefail
cd /tmp/r3edge-ab-A
s=$(date +%s.%N); .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-A.log 2>&1; rc=$?
echo "A pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
cd /tmp/r3edge-ab-B
s=$(date +%s.%N); env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-B.log 2>&1; rc=$?
echo "B pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
