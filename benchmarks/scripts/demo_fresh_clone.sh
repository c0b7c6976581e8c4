#!/usr/bin/env bash
# `make demo` as a newcomer runs it, timed: a fresh clone of this checkout's HEAD, `make install` and
# `make demo` timed apart (the demo's seed 0), then `r3edge demo --seed N` for the other seeds in the same
# clone, each from nothing. Copies each run's logs and reports into OUT (the results directory).
# Usage: benchmarks/scripts/demo_fresh_clone.sh OUT [SEEDS...]   (default seeds: 1 2)
set -euo pipefail
out=$(realpath -m "$1"); shift
if [ $# -gt 0 ]; then seeds=("$@"); else seeds=(1 2); fi
src=$(git rev-parse --show-toplevel)
clone=$(mktemp -d /tmp/r3edge-fresh-XXXXXX)
mkdir -p "$out"
git clone -q "$src" "$clone"
cd "$clone"
{ echo "commit $(git rev-parse --short HEAD)"; echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)";
  echo "flags avx512f=$(grep -qw avx512f /proc/cpuinfo && echo y || echo n) avx512_bf16=$(grep -qw avx512_bf16 /proc/cpuinfo && echo y || echo n) amx=$(grep -qw amx_tile /proc/cpuinfo && echo y || echo n)";
  echo "cores $(nproc)"; echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/machine.txt"
collect() {  # run dir, suffix
  for f in report.md results.json latency_vs_accuracy.png teacher/sft_report.json student/train_report.json \
           artifact/export_report.json labels/train/manifest.json labels/heldout/manifest.json; do
    name=$(echo "$f" | tr / -)
    [ -f "$1/$f" ] && cp "$1/$f" "$out/${name%.*}$2.${name##*.}"  # report-seed1.md, not report.md-seed1
  done
}
/usr/bin/time -f "make install: %e s" -o "$out/time-install.txt" make install > "$out/install.log" 2>&1
/usr/bin/time -f "make demo: %e s" -o "$out/time-demo-seed0.txt" make demo > "$out/demo-seed0.log" 2>&1
collect runs/demo ""
for s in "${seeds[@]}"; do
  /usr/bin/time -f "r3edge demo --seed $s: %e s" -o "$out/time-demo-seed$s.txt" \
    .venv/bin/r3edge demo --seed "$s" --out "runs/demo-seed$s" > "$out/demo-seed$s.log" 2>&1
  collect "runs/demo-seed$s" "-seed$s"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
cat "$out"/time-*.txt
echo "clone left at $clone"
