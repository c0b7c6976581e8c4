#!/usr/bin/env bash
set -uo pipefail
cd /tmp/r3edge-ab-A
s=$(date +%s.%N); .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-A.log 2>&1; rc=$?
echo "A pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
cd /tmp/r3edge-ab-B
s=$(date +%s.%N); env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-B.log 2>&1; rc=$?
echo "B pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
