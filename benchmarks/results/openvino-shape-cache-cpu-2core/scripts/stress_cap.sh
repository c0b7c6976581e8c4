#!/usr/bin/env bash
# three stress probes in a row against `r3edge serve` of the demo artifact, the CPU plugin's per-shape cache at $1 entries
set -u
cd /work/main
A=/tmp/r3edge-fresh-Gl5DLu/runs/demo; port=$2
setsid .venv/bin/python -c "import sys, r3edge.core.openvino_runtime as o; o.RUNTIME_CACHE_CAPACITY = int(sys.argv[1]); sys.argv = ['r3edge'] + sys.argv[2:]; from r3edge.cli import main; main()" \
  $1 serve $A/artifact --port $port > runs/s63/serve-cap$1.log 2>&1 &
P=$!; sleep 25
for i in 1 2 3; do
  timeout 500 .venv/bin/python ../shared/probes/stress_probe.py 127.0.0.1:$port $A/heldout.jsonl --pid $P 2>&1 | grep -E "RSS|^summary"
done
kill $P
