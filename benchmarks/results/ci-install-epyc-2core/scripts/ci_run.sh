#!/usr/bin/env bash
# A whole .ci/run as CI runs it (CI=true, no stdin, no pip cache) on a fresh clone of /work/main's HEAD, timed.
set -uo pipefail
d=/tmp/r3edge-ci-fresh; rm -rf $d; git clone -q /work/main $d; cd $d
export CI=true PIP_NO_CACHE_DIR=1
s=$(date +%s.%N); .ci/run < /dev/null > /work/exp/ci-run.log 2>&1; rc=$?
echo "whole .ci/run rc=$rc $(echo "$(date +%s.%N) - $s" | bc) s at $(git rev-parse --short HEAD)" | tee -a /work/exp/ci-run-times.txt
