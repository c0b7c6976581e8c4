#!/usr/bin/env bash
# The whole sequence HERE on the CPU with the random 2-layer Qwen2 and 50 of the 100k pairs: session 1 (cold start,
# C dev and C train cut to 50 pairs, 2 of 4 shards), unpack, session 2 on a fresh "machine" (the same path, emptied:
# the adapter carried, the 2 shards left, then the MiniLM arms), unpack, merge, report; then the 1.5B student's call on a fresh "machine". Writes benchmarks/gpu/label_100k/smoke/: a proof that
# the scripts run, not a result.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
R3=/tmp/r3l-smoke HOME_DIR=/tmp/r3l-smoke-home SM=benchmarks/gpu/label_100k/smoke
rm -rf "$R3" "$R3"-out* "$HOME_DIR" "$SM"/run-*.json && mkdir -p "$SM"
SMOKE=1 benchmarks/gpu/label_100k/prepare.sh > /dev/null 2>&1
SMOKE=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out1 SMOKE_ARGS="--shards 4 --max-shards 2" bash benchmarks/gpu/label_100k/run.sh cold-start > "$SM/session1.log" 2>&1
"$PY" benchmarks/gpu/label_100k/label_100k.py unpack --files $R3-out1 --to "$HOME_DIR"
cp "$R3/stage/pairs-100k.jsonl" "$HOME_DIR/"
rm -rf "$R3"   # the machine is given back
SMOKE=1 ADAPTER=$HOME_DIR/adapter LABELS=$HOME_DIR/labels benchmarks/gpu/label_100k/prepare.sh > /dev/null 2>&1
cp benchmarks/gpu/label_100k/carry/plan.txt "$SM/plan-session2.txt"
SMOKE=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out2 SMOKE_ARGS="--shards 4" bash benchmarks/gpu/label_100k/run.sh label > "$SM/session2.log" 2>&1
"$PY" benchmarks/gpu/label_100k/label_100k.py unpack --files $R3-out2 --to "$HOME_DIR"
# the same "machine": the MiniLM arms (3 steps each here) on the merged labels and C train
SMOKE=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out2b SMOKE_ARGS="--shards 4" bash benchmarks/gpu/label_100k/run.sh students > "$SM/session2-students.log" 2>&1
"$PY" benchmarks/gpu/label_100k/label_100k.py unpack --files $R3-out2b --to "$HOME_DIR"
"$PY" -m r3edge label "$HOME_DIR/pairs-100k.jsonl" --merge "$HOME_DIR"/labels/shard-*-of-04 --out "$HOME_DIR/labels-100k" 2>&1 | tail -3 | tee "$SM/merge.log"
"$PY" benchmarks/gpu/label_100k/label_100k.py report --labels "$HOME_DIR/labels" --out "$SM/report.md" > /dev/null
cp "$HOME_DIR"/run-*.json "$SM/"
"$PY" - "$HOME_DIR" <<'PYEOF' | tee "$SM/checks.txt"
import json, sys
from pathlib import Path
h = Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(h.glob("run-*.json"))]
a = runs[0]["steps"]["cold_start"]["judge_sha256"]
b = runs[1]["steps"]["rebuild_judge"]["judge_sha256"]
print(f"session 1 judge weights sha256 {a}\nsession 2 judge weights sha256 {b}\nsame judge: {a == b}")
PYEOF
# session 3, the 1.5B student's call (student_1p5b.py), on a fresh "machine": the random 2-layer Qwen2, 300 pairs of
# the committed C train and C dev labels, --device cpu
rm -rf "$R3"
SMOKE=1 STUDENT=1 benchmarks/gpu/label_100k/prepare.sh > /dev/null 2>&1
cp benchmarks/gpu/label_100k/carry/plan.txt "$SM/plan-student.txt"
SMOKE=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out3 SMOKE_ARGS="--n-requests 3 --load-requests 4" bash benchmarks/gpu/label_100k/run.sh student > "$SM/session3-student.log" 2>&1
mkdir -p "$SM/student" && cp $R3-out3/results.json $R3-out3/report.md "$SM/student/"
sed -i -e 's/\r/\n/g' "$SM"/session*.log && sed -i -e '/^Loading weights\|it\/s\]$/d' "$SM"/session*.log
# issue 47's second label source (R3A=1), on a fresh "machine": the first call is cut by its budget during the labels
# (at once here), the second skips the finished cold start and finishes them
rm -rf "$R3" "$SM/r3a" && mkdir -p "$SM/r3a"
SMOKE=1 R3A=1 benchmarks/gpu/label_100k/prepare.sh > /dev/null 2>&1
cp benchmarks/gpu/label_100k/carry/plan.txt "$SM/r3a/plan.txt"
SMOKE=1 R3A=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out4 BUDGET_S=45 SMOKE_ARGS="--reserve-s 5" bash benchmarks/gpu/label_100k/run.sh cold-start > "$SM/r3a/call1.log" 2>&1
SMOKE=1 R3A=1 R3_SMOKE=$R3 SMOKE_OUT=$R3-out5 SMOKE_ARGS="--chunk 16" bash benchmarks/gpu/label_100k/run.sh cold-start > "$SM/r3a/call2.log" 2>&1
cp $R3-out4/run.json "$SM/r3a/run-call1.json" && cp $R3-out5/run.json "$SM/r3a/run-call2.json"
sed -i -e 's/\r/\n/g' "$SM"/r3a/call*.log && sed -i -e '/^Loading weights\|it\/s\]$/d' "$SM"/r3a/call*.log
