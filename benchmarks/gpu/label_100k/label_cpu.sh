#!/usr/bin/env bash
# Issue 47's shards 3 and 4 on this CPU, while no GPU is lent: the same judge as the H200's shards 0-2, rebuilt from
# the committed int8 adapter (its weights' sha256 must be the H200's), labelling one shard in a sitting of at most
# SECONDS and copying the chunks written so far into the committed folder. Boxes are not kept between sessions, so
# the next sitting (any box) resumes from what was committed: `r3edge label` skips the pairs its folder holds.
#
#   bash benchmarks/gpu/label_100k/label_cpu.sh SHARD [SECONDS]     # SHARD 3 or 4 (of 5); SECONDS default 9000
#
# The judge must sit at the H200's path (/var/tmp/r3l/work/judge): the labels' teacher config names the judge's
# path, and `r3edge label --merge` refuses shards whose teacher configs differ. Each sitting appends a record
# (CPU, flags, pairs before and after, pairs/s) to $C/sittings.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
SHARD=${1:?usage: label_cpu.sh SHARD [SECONDS]}; SECONDS_MAX=${2:-9000}
PY=${PY:-.venv/bin/python}
R3=/var/tmp/r3l
H=benchmarks/results/label-100k-h200
C=${CPU_LABELS:-benchmarks/results/label-100k-cpu-2core}
NAME=shard-0$SHARD-of-05
OUT=$R3/labels/$NAME
mkdir -p "$R3/labels" "$C/labels"

# the 100k pairs, rebuilt; the H200's shards name their sha256
"$PY" -m r3edge pairs --semeval ../shared/data/semeval2016-cqa --bm25-k 243 --out "$R3/pairs-100k.jsonl" > /dev/null
want=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['pairs_sha256'])" "$H/labels/shard-00-of-05/manifest.json")
echo "$want  $R3/pairs-100k.jsonl" | sha256sum -c --quiet

# the judge, once per box: rebuilt from the committed adapter, checked on 16 C dev pairs against the H200's labels
if [ ! -f "$R3/work/judge/sft_report.json" ]; then
  "$PY" benchmarks/gpu/label_100k/label_100k.py verify --adapter "$H/adapter" --labels "$H/labels/dev" \
    --data ../shared/data/semeval2016-cqa --pairs 16 --work "$R3/work" --out "$R3/verify.json"
fi
"$PY" benchmarks/gpu/label_100k/label_100k.py same-judge --verify "$R3/verify.json" --cold-start "$H"/run-*-cold-start.json

# resume from the committed chunks (a fresh box), unless this box already holds more
if [ -f "$C/labels/$NAME/manifest.json" ] && [ ! -f "$OUT/manifest.json" ]; then
  mkdir -p "$OUT" && cp "$C/labels/$NAME"/manifest.json "$C/labels/$NAME"/part-*.parquet "$OUT/"
fi
# pairs written so far: the part files' rows (read_labels refuses an incomplete folder; the manifest's n_done may lag
# a chunk when a sitting is killed between the two writes)
count() { "$PY" -c "import sys, pyarrow.parquet as pq; from r3edge.core.labels import shard_paths
print(sum(pq.ParquetFile(p).metadata.num_rows for p in shard_paths(sys.argv[1])))" "$1"; }
before=$(count "$OUT"); t0=$(date +%s)
# batch 16: 1.68 pairs/s on a 2-core AVX-512 BF16 EPYC against 1.44 at 32 (64 pairs of this shard each)
# SIGTERM at the limit: chunks are renamed into place whole, and a resume reads the done pairs from them (a background
# job ignores SIGINT)
rc=0
timeout --kill-after=60 "$SECONDS_MAX" "$PY" -m r3edge label "$R3/pairs-100k.jsonl" --teacher score-only-qwen-coder-1.5b \
  --teacher-model "$R3/work/judge" --shard "$SHARD/5" --batch-size 16 --shard-size 512 --out "$OUT" || rc=$?
wall=$(( $(date +%s) - t0 ))
[ "$rc" = 0 ] || [ "$rc" = 124 ] || { echo "label_cpu.sh: r3edge label exited $rc; nothing copied" >&2; exit "$rc"; }

# the chunks written so far, into the committed folder (the lock file stays here)
rm -rf "$C/labels/$NAME" && mkdir -p "$C/labels/$NAME" && cp "$OUT"/manifest.json "$OUT"/part-*.parquet "$C/labels/$NAME/"
"$PY" benchmarks/gpu/label_100k/label_100k.py sitting --labels "$C/labels/$NAME" --reference "$H/labels/shard-00-of-05" \
  --verify "$R3/verify.json" --log "$C/sittings.jsonl" --before "$before" --wall "$wall" --exit "$rc"
