#!/usr/bin/env bash
# A/B: make -j2 install vllm from a fresh clone, no pip cache; $1 = label, $2 = patch file or "none"
set -euo pipefail
label=$1; patch=$2
d=/tmp/r3edge-ab-$label; rm -rf $d
git clone -q /work/main $d
cd $d
[ "$patch" != none ] && git apply "$patch"
export PIP_NO_CACHE_DIR=1
start=$(date +%s.%N)
make -j2 install vllm > /work/exp/install-$label.log 2>&1
end=$(date +%s.%N)
echo "$label $(echo "$end - $start" | bc) s" | tee -a /work/exp/install-times.txt
