#!/usr/bin/env bash
# Issue 46's GPU benchmark, step 2 of 2: runs ON THE GPU MACHINE, one device call per piece that
# prepare.sh made (benchmarks/gpu/carry/plan.txt lists the calls; README.md explains them).
#
#   bash benchmarks/gpu/run.sh take    # keep this call's carried piece in $R3GPU/parts (it stays while the machine is held)
#   bash benchmarks/gpu/run.sh bench   # take the last piece, assemble and check the bundle, install onnxruntime-gpu and
#                                      # the missing wheels with --no-deps --target, then measure into $OUT
#   bash benchmarks/gpu/run.sh part causal        # one part alone (causal, student:demo or student:semeval), while
#                                                 # the machine that ran `bench` is held: a part `bench` had no budget for
#   CAUSAL_PREFIX_REUSE=1 bash benchmarks/gpu/run.sh bench        # the causal student also by prefix reuse (set it on
#                                                 # `part causal` too: that part serves the export `bench` started)
#   bash benchmarks/gpu/run.sh tests              # the GPU tests alone, when `bench` had no budget left for them
#   bash benchmarks/gpu/run.sh probe              # ../shared/probes/gpu_graphs.py on the demo artifact exported there
#   bash benchmarks/gpu/run.sh install            # the last piece, then install, without measuring (for `tests`,
#                                                 # `part NAME` or `tokenise-threads` in the same call)
#   bash benchmarks/gpu/run.sh tokenise-threads   # a SemEval top-100's tokenising at 1-16 of the tokenizer's threads
#   SMOKE=1 bash benchmarks/gpu/run.sh bench   # here, on the CPU, after SMOKE=1 prepare.sh: the same steps, tiny models
#
# The bench step keeps to BUDGET_S (default 480 s) in all: the causal student's export starts in the background, then
# the SemEval student, the demo student, the causal part and the GPU tests run (each skipped, and recorded as not run,
# when too little time is left).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD  # the measuring processes run from a scratch folder (bundle.sh's enter_scratch says why)
CARRY=benchmarks/gpu/carry
SMOKE=${SMOKE:-0}
R3GPU=${R3GPU:-/var/tmp/r3gpu}
BUDGET_S=${BUDGET_S:-480}
OUT=${OUT:-$R3GPU/out}
if [ "$SMOKE" = 1 ]; then
  # here, on a shared CPU: no budget cut (the parts' code paths are the point), out of the way of /var/tmp/r3gpu
  PY=${PY:-$REPO/.venv/bin/python}; R3GPU=${R3GPU_SMOKE:-/tmp/r3gpu-smoke}; OUT=${SMOKE_OUT:-$R3GPU/out}; BUDGET_S=${SMOKE_BUDGET_S:-3600}
else
  PY=${PY:-python3}
fi

gpu_env() {
  mkdir -p "$OUT"
  export PYTHONPATH="$R3GPU/site"
  if [ "$SMOKE" != 1 ]; then
    cuda_library_path "$PY"
    "$PY" -c "import onnxruntime as o; o.preload_dlls(); print('onnxruntime', o.__version__, o.get_available_providers(), o.__file__)" \
      | tee "$OUT/onnxruntime.txt"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/onnxruntime.txt"
    DEVICE=cuda; SMOKE_FLAG=()
  else
    DEVICE=cpu; SMOKE_FLAG=(--smoke --max-requests 2 --requests 2 --cpu-requests 2)
  fi
  # The Rust tokenizer on all cores, for the served child and the in-process peers alike. The H200 run had it off
  # (false): a SemEval top-100 then took 2.8 ms to tokenise there on one core (diagnostics.md in
  # benchmarks/results/gpu-students-h200), half the issue's 6 ms goal.
  export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
  enter_scratch "$R3GPU"
}

# CAUSAL_PREFIX_REUSE=1 exports the causal student with its prefix-reuse graphs too (a longer export: README.md)
CAUSAL=(); [ "${CAUSAL_PREFIX_REUSE:-0}" = 1 ] && CAUSAL=(--causal-prefix-reuse)
# On the GPU machine (8 cores or more) the causal student's export runs on the last 4 cores and everything that
# measures on the others, so the export can run beside the measurements (start_causal_export)
EXPORT_CPUS=(); MEASURE_CPUS=()
if [ "$SMOKE" != 1 ] && command -v taskset > /dev/null && [ "$(nproc)" -ge 8 ]; then
  EXPORT_CPUS=(taskset -c "$(( $(nproc) - 4 ))-$(( $(nproc) - 1 ))"); MEASURE_CPUS=(taskset -c "0-$(( $(nproc) - 5 ))")
fi

# bench_run FLAGS...: bench_gpu.py's `run` on this machine's stage, work folder and device (after gpu_env)
bench_run() {
  "${MEASURE_CPUS[@]}" "$PY" "$REPO/benchmarks/gpu/bench_gpu.py" run --stage "$R3GPU/stage" --out "$OUT" --work "$R3GPU/work" \
    --device "$DEVICE" "${SMOKE_FLAG[@]}" "${CAUSAL[@]}" "$@"
}

# start_causal_export: the causal student's export (CPU work: tracing, fp16 conversion, parity) in a process session
# of its own, so it runs on beside this call's MiniLM parts and, when it is not done by the call's end, into the next
# call (the device keeps such a process until the machine goes back); the causal part waits for its record
start_causal_export() {
  mkdir -p "$R3GPU/work"
  rm -f "$R3GPU/work/causal-export.json" "$R3GPU/work/causal-export.pid"
  local session=(); command -v setsid > /dev/null && session=(setsid)  # without it the export ends with this call
  "${session[@]}" "${EXPORT_CPUS[@]}" "$PY" "$REPO/benchmarks/gpu/bench_gpu.py" export-causal --work "$R3GPU/work" \
    "${SMOKE_FLAG[@]:0:1}" "${CAUSAL[@]}" > "$R3GPU/work/causal-export.log" 2>&1 < /dev/null &
  echo $! > "$R3GPU/work/causal-export.pid"
  echo "causal export started in the background (pid $!, ${EXPORT_CPUS[*]:-all cores}); log $R3GPU/work/causal-export.log"
}

part() {  # one part alone (its name in $1), on a machine where `bench` already installed everything (still held)
  [ -n "${1:-}" ] || { echo "usage: run.sh part causal|student:demo|student:semeval" >&2; exit 2; }
  gpu_env
  bench_run --parts "$1" --budget-s "$BUDGET_S" --causal-min-s 0 2>&1 | tee "$OUT/${1#student:}.log" | grep -v "^\s*$" | tail -60
  if [ "$1" = causal ]; then cp "$R3GPU/work/causal-export.log" "$OUT/" 2>/dev/null; fi
}

probe() {  # the shared probe ../shared/probes/gpu_graphs.py on the demo artifact that `bench` or `part student:demo`
  # exported here (machine still held): its candidate graphs alone on the CUDA and CPU providers, beside the served rows
  local art=$R3GPU/work/artifact-demo in=$R3GPU/probe-in
  [ -f "$R3GPU/stage/probe/gpu_graphs.py" ] || { echo "no probe in the bundle: prepare.sh carries it with DEMO_HELDOUT" >&2; exit 3; }
  [ -f "$art/candidate.fp32.onnx" ] || { echo "no demo artifact at $art: run 'run.sh part student:demo' first" >&2; exit 3; }
  rm -rf "$in" && mkdir -p "$in"
  ln -s "$art"/candidate.* "$art/tokenizer.json" "$R3GPU/stage/probe/heldout.jsonl" "$in"/
  gpu_env
  "$PY" "$R3GPU/stage/probe/gpu_graphs.py" "$in" "$OUT/gpu-graphs" > "$OUT/gpu-graphs.log" 2>&1
  echo "gpu_graphs probe: exit $?"; grep " / " "$OUT/gpu-graphs.log" | cut -c1-400
}

# shellcheck source=benchmarks/gpu/bundle.sh
source benchmarks/gpu/bundle.sh
take() { take_piece "$CARRY" "$R3GPU"; }

# gpu_tests SECONDS: the tests that skip without a GPU (reasons listed with -rs): the CUDA provider's fp16 parity and
# the device selection; in smoke mode they run and skip as they do in CI. Summarised into $R3GPU/gpu-tests.json and
# folded into $OUT's results.json (bench_run --pytest-json); not run with 30 s or less.
gpu_tests() {
  local tests_s=$1
  if [ "$tests_s" -gt 30 ]; then
    timeout "$tests_s" "$PY" -m pytest -q -rs -p no:cacheprovider "$REPO/tests/test_tensorrt.py" "$REPO/tests/test_devices.py" -k "cuda or gpu or tensorrt" \
      --junitxml "$R3GPU/gpu-tests.xml" > "$OUT/gpu-tests.log" 2>&1
    echo "gpu tests: exit $? ($(tail -1 "$OUT/gpu-tests.log"))"
    "$PY" - "$R3GPU/gpu-tests.xml" "$R3GPU/gpu-tests.json" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as exc:
    json.dump({"error": f"no junit xml: {exc}"}, open(sys.argv[2], "w")); raise SystemExit
cases = []
for c in root.iter("testcase"):
    status = next((t.tag for t in c if t.tag in ("failure", "error", "skipped")), "passed")
    why = next((t.get("message", "")[:300] for t in c if t.tag in ("failure", "error", "skipped")), "")
    cases.append({"test": f"{c.get('classname')}::{c.get('name')}", "status": status, "why": why, "s": float(c.get("time", 0))})
json.dump({"cases": cases, "counts": {s: sum(c["status"] == s for c in cases) for s in ("passed", "failure", "error", "skipped")}},
          open(sys.argv[2], "w"), indent=1)
EOF
  else
    echo "{\"not_run\": \"budget: ${tests_s} s left\"}" > "$R3GPU/gpu-tests.json"
  fi
  bench_run --parts none --pytest-json "$R3GPU/gpu-tests.json" --budget-s 60 > /dev/null 2>&1
}

tests() {  # the GPU tests alone, on a machine where `bench` already installed everything (still held)
  gpu_env
  gpu_tests "$BUDGET_S"
  grep -A3 "^## gpu_tests" "$OUT/report.md"
}

install() {  # take the last piece, assemble and check the bundle, install onnxruntime-gpu, the wheels and r3edge
  take
  assemble_bundle "$R3GPU"
  if [ "$SMOKE" != 1 ]; then
    check_ort_wheel "$R3GPU/stage/wheels" || exit 5
    # --target: nothing of the image's own environment changes; PYTHONPATH puts these first (its CPU onnxruntime
    # stays installed but is shadowed by onnxruntime-gpu's module of the same name)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$R3GPU/site" "$R3GPU"/stage/wheels/*.whl || exit 6
  fi
  # r3edge itself as a real (not editable) install in both modes, so the smoke runs what the GPU machine runs
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$R3GPU/site" . || exit 7
}

# tokenise_threads: Scorer.encode_batch per SemEval top-100 at each count of the Rust tokenizer's threads, on the
# measuring cores (bench_gpu.py tokenise-threads says why), into $OUT/tokenise_threads.json
tokenise_threads() {
  gpu_env
  local few=(); [ "$SMOKE" = 1 ] && few=(--student demo --max-requests 2 --counts 1,2)
  "${MEASURE_CPUS[@]}" "$PY" "$REPO/benchmarks/gpu/bench_gpu.py" tokenise-threads --stage "$R3GPU/stage" --out "$OUT" \
    "${few[@]}" 2>&1 | tee "$OUT/tokenise-threads.log"
}

bench() {
  install
  gpu_env
  # The causal student's export first, in the background (235 s of CPU in the second run); meanwhile the recommended
  # SemEval student (the issue's goals are read on it) and the demo student; then the causal part serves the export
  # (waiting for it while 150 s are left; `run.sh part causal` waits on in the next call); the GPU tests last, with
  # what is left (they ran twice already; `run.sh tests` runs them alone).
  start_causal_export
  bench_run --parts student:semeval --budget-s $((BUDGET_S - SECONDS - 270)) 2>&1 | tee "$OUT/students.log" | grep -v "^\s*$" | tail -40
  bench_run --parts student:demo --budget-s $((BUDGET_S - SECONDS - 150)) 2>&1 | tee "$OUT/demo.log" | grep -v "^\s*$" | tail -30
  bench_run --parts causal --budget-s $((BUDGET_S - SECONDS)) 2>&1 | tee "$OUT/causal.log" | grep -v "^\s*$" | tail -60
  cp "$R3GPU/work/causal-export.log" "$OUT/" 2>/dev/null || echo "no causal export log"
  gpu_tests $(( BUDGET_S - SECONDS ))
  echo "bench step: ${SECONDS} s; results in $OUT"
}

case "${1:-}" in
  take) take ;;
  bench) bench ;;
  part) part "${2:-}" ;;
  probe) probe ;;
  tests) tests ;;
  install) install ;;
  tokenise-threads) tokenise_threads ;;
  *) echo "usage: run.sh take|bench|install|part NAME|tests|probe|tokenise-threads" >&2; exit 2 ;;
esac
