#!/usr/bin/env bash
# the second pair, in the other order (B first), CI=true, CPU time from /usr/bin/time -v
set -uo pipefail
export CI=true
cd /tmp/r3edge-ab-B
s=$(date +%s.%N); env -u PYTHONDONTWRITEBYTECODE /usr/bin/time -v -o /work/exp/time-B2.txt .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-B2.log 2>&1; rc=$?
echo "B2 pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
cd /tmp/r3edge-ab-A
s=$(date +%s.%N); /usr/bin/time -v -o /work/exp/time-A2.txt .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider > /work/exp/pytest-A2.log 2>&1; rc=$?
echo "A2 pytest rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s" | tee -a /work/exp/pytest-times.txt
