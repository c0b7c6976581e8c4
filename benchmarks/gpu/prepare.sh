#!/usr/bin/env bash
# Issue 46's GPU benchmark, step 1 of 2: run HERE (a CPU machine with the project's .venv and PyPI access).
# Builds benchmarks/gpu/carry/ (git-ignored): the pieces that travel to the GPU machine, one per device call,
# and plan.txt, the exact call sequence (benchmarks/gpu/README.md explains it).
#
#   benchmarks/gpu/prepare.sh              # the real bundle (onnxruntime-gpu wheel, wheels, students, requests)
#   SMOKE=1 benchmarks/gpu/prepare.sh      # tiny random students, no wheels: for run.sh's --smoke here
#   (the real bundle takes benchmarks/results out of the working tree until `git sparse-checkout disable`: THIN=0 keeps it)
#
# Optional: DEMO_STUDENT=dir SEMEVAL_STUDENT=dir (trained students; without them the untrained configs are
# carried and the report says so), PAIRS=file (default: ../shared/data/semeval2016-cqa/subtaskC_dev.jsonl),
# DEMO_HELDOUT=file (the demo's held-back top-100s for the shared GPU probe; default: beside DEMO_STUDENT).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
CARRY=benchmarks/gpu/carry
STAGE=$CARRY/stage
SMOKE=${SMOKE:-0}
PAIRS=${PAIRS:-../shared/data/semeval2016-cqa/subtaskC_dev.jsonl}
# shellcheck source=benchmarks/gpu/bundle.sh
source benchmarks/gpu/bundle.sh

rm -rf "$CARRY"
mkdir -p "$STAGE/wheels"
if [ "$SMOKE" != 1 ]; then
  download_wheels "$PY" "$STAGE/wheels" "$ORT_GPU" "${SERVE_WHEELS[@]}" "${TEST_WHEELS[@]}"
fi

SMOKE_FLAG=()
[ "$SMOKE" = 1 ] && SMOKE_FLAG=(--smoke)
"$PY" benchmarks/gpu/bench_gpu.py prepare --stage "$STAGE" --pairs "$PAIRS" "${SMOKE_FLAG[@]}" \
  ${DEMO_STUDENT:+--demo-student "$DEMO_STUDENT"} ${SEMEVAL_STUDENT:+--semeval-student "$SEMEVAL_STUDENT"}
# the shared GPU probe (../shared/probes/gpu_graphs.py: the demo's candidate graphs alone on the CUDA and CPU providers)
# and the demo's held-back top-100s it reads, for `run.sh probe`; DEMO_HELDOUT defaults to the demo run's heldout.jsonl
PROBE=${PROBE:-../shared/probes/gpu_graphs.py}
DEMO_HELDOUT=${DEMO_HELDOUT:-${DEMO_STUDENT:+$(dirname "$DEMO_STUDENT")/heldout.jsonl}}
if [ -f "$PROBE" ] && [ -f "${DEMO_HELDOUT:-}" ]; then
  mkdir -p "$STAGE/probe" && cp "$PROBE" "$DEMO_HELDOUT" "$STAGE/probe/"
else
  echo "no probe carried: needs $PROBE and DEMO_HELDOUT (or DEMO_STUDENT beside a heldout.jsonl)"
fi
# identical weight files (both students untrained) travel once: tar stores the second as a hard link
a=$STAGE/students/demo/model.safetensors b=$STAGE/students/semeval/model.safetensors
if cmp -s "$a" "$b"; then ln -f "$a" "$b"; echo "the two students' weights are identical: carried once"; fi

# bundle.sh's thin_tree (the real bundle; THIN=0 keeps the tree): the calls read nothing in benchmarks/results, which
# is most of the working tree that travels with every call
THIN=${THIN:-$([ "$SMOKE" = 0 ] && echo 1 || echo 0)}
[ "$THIN" = 1 ] && thin_tree
pack_bundle "$CARRY"
n=$PIECES
{
  echo "# $n device calls that carry the bundle, back to back (the machine is given back ~30 s after a call ends):"
  for p in "$CARRY"/part.*; do
    k=${p##*.}
    if [ "$k" != "$(printf '%02d' $((n - 1)))" ]; then
      echo "run(command='bash benchmarks/gpu/run.sh take', carry=['$p', '$CARRY/bundle.sha256', '$CARRY/pieces'], timeout_s=120)"
    else
      echo "run(command='bash benchmarks/gpu/run.sh bench', carry=['$p', '$CARRY/bundle.sha256', '$CARRY/pieces'], timeout_s=600)"
    fi
  done
  echo "# then at once, only for what bench recorded as not run (README.md: 'The call sequence'), e.g.:"
  echo "run(command='bash benchmarks/gpu/run.sh part causal', timeout_s=600)   # waits for the background export"
  echo "run(command='BUDGET_S=230 bash benchmarks/gpu/run.sh part student:demo && bash benchmarks/gpu/run.sh tests', timeout_s=330)"
  if [ "$THIN" = 1 ]; then echo "# after the calls, here: git sparse-checkout disable   # benchmarks/results back in the working tree"; fi
} > "$CARRY/plan.txt"
ls -la "$CARRY"
echo "working tree that travels with each call: $TREE_BYTES bytes; pieces of $PIECE_BYTES bytes"
cat "$CARRY/plan.txt"
