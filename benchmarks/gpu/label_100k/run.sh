#!/usr/bin/env bash
# Issue 47's GPU labelling, step 2: runs ON THE GPU MACHINE, one device call per piece that prepare.sh made
# (carry/plan.txt lists the calls; README.md explains them).
#
#   bash benchmarks/gpu/label_100k/run.sh take        # keep this call's carried piece (it stays while the machine is held)
#   bash benchmarks/gpu/label_100k/run.sh cold-start  # the last piece; check, install, cold start, C dev + C train, shards
#   bash benchmarks/gpu/label_100k/run.sh label       # the last piece (ADAPTER=... bundle); the same judge, shards left
#   bash benchmarks/gpu/label_100k/run.sh students    # after label (same machine): merge the 100k labels, train the
#                                                     # MiniLM arms on 6.7k and 100k labels (label_100k.py students)
#   bash benchmarks/gpu/label_100k/run.sh flush       # return what the outbox still holds
#   R3A=1 bash benchmarks/gpu/label_100k/run.sh cold-start   # the last piece (R3A=1 bundle): the R3A judge's cold start,
#                                                     # then its labels of C train's first 5,000 pairs; again: goes on
#   R3A=1 bash benchmarks/gpu/label_100k/run.sh flush # (R3A=1: that run's own working folder)
#   bash benchmarks/gpu/label_100k/run.sh student     # the last piece (STUDENT=1 bundle); the 1.5B student: train, score,
#                                                     # export fp16, serve on the GPU (student_1p5b.py), on the labels
#                                                     # the bundle carries (prepare.sh's STUDENT_LABELS)
#   SMOKE=1 bash benchmarks/gpu/label_100k/run.sh cold-start|label|students|student   # here, on the CPU, after SMOKE=1 prepare.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
REPO=$PWD
CARRY=benchmarks/gpu/label_100k/carry
SMOKE=${SMOKE:-0}
BUDGET_S=${BUDGET_S:-500}
if [ "$SMOKE" = 1 ]; then
  PY=${PY:-$REPO/.venv/bin/python}; R3=${R3_SMOKE:-/tmp/r3l-smoke}; OUT=${SMOKE_OUT:-$R3/out-$1}; FLAGS=(--smoke ${SMOKE_ARGS:-})
else
  PY=${PY:-python3}; R3=${R3:-/var/tmp/r3l}; FLAGS=()
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false R3EDGE_CACHE=$R3/cache

# shellcheck source=benchmarks/gpu/bundle.sh
source benchmarks/gpu/bundle.sh
take() { take_piece "$CARRY" "$R3"; }

unbundle() {  # once per machine: assemble, check, unpack, install
  take
  [ -f "$R3/stage/pairs.sha256" ] && return 0
  assemble_bundle "$R3"
  (cd "$R3/stage" && xz -d pairs-100k.jsonl.xz && sha256sum -c pairs.sha256) || exit 5
  if [ -f "$R3/stage/gguf.bin" ]; then mkdir -p "$R3/gguf" && mv "$R3/stage/gguf.bin" "$R3/gguf/p00"; fi
  if [ "$SMOKE" != 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$R3/site" "$R3"/stage/wheels/*.whl || exit 6
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$R3/site" . || exit 7
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  fi
}

[ "$SMOKE" != 1 ] && export PYTHONPATH="$R3/site"
S=$R3/stage
WORK=$R3/work
[ "${R3A:-0}" = 1 ] && WORK=$R3/work-r3a
COMMON=(--work "$WORK" --out "$OUT" --pairs "$S/pairs-100k.jsonl" --gguf-dir "$R3/gguf" --budget-s "$BUDGET_S")
case "${1:-}" in
  take) take ;;
  cold-start)
    unbundle
    ALSO=("$S/fid/dev.jsonl" "$S/fid/train.jsonl")
    # issue 47's second label source: the R3A judge cold-started on the same gold pool, on C train's first 5,000 pairs
    [ "${R3A:-0}" = 1 ] && ALSO=("$S/fid/train-5000.jsonl" --shards 0 --sft r3a-qwen-coder-1.5b-cqa-gpu)
    "$PY" benchmarks/gpu/label_100k/label_100k.py cold-start "${COMMON[@]}" --gold "$S/fid/sft-gold.jsonl" \
      --also "${ALSO[@]}" "${FLAGS[@]}" 2>&1 | tee -a "$R3/cold-start.log" | grep -v "^\s*$" | tail -60 ;;
  label)
    unbundle
    "$PY" benchmarks/gpu/label_100k/label_100k.py label "${COMMON[@]}" --adapter "$S/adapter" --done "$S/done.txt" "${FLAGS[@]}" 2>&1 \
      | tee "$R3/label.log" | grep -v "^\s*$" | tail -60 ;;
  students)
    unbundle
    "$PY" benchmarks/gpu/label_100k/label_100k.py students "${COMMON[@]}" --committed "$S/labels" "${FLAGS[@]}" 2>&1 \
      | tee "$R3/students.log" | grep -v "^\s*$" | tail -60 ;;
  student)
    unbundle
    [ "$SMOKE" != 1 ] && cuda_library_path "$PY"
    # from a scratch folder (bundle.sh's enter_scratch says why); the labels are the bundle's (prepare.sh STUDENT=1)
    enter_scratch "$R3" || exit 8
    "$PY" "$REPO/benchmarks/gpu/label_100k/student_1p5b.py" --work "$R3/work-student" --out "$OUT" --gguf-dir "$R3/gguf" \
      --requests "$S/fid/dev.jsonl" --labels "$S"/student/train/* --dev-labels "$S/student/dev" \
      --calib-labels "$S/student/calib" --budget-s "$BUDGET_S" "${FLAGS[@]}" 2>&1 \
      | tee "$R3/student.log" | grep -v "^\s*$" | tail -60 ;;
  flush) "$PY" benchmarks/gpu/label_100k/label_100k.py flush --work "$WORK" --out "$OUT" ;;
  *) echo "usage: run.sh take|cold-start|label|students|student|flush" >&2; exit 2 ;;
esac
