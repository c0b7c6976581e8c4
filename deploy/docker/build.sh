#!/usr/bin/env bash
# Build the serving image from this checkout: `deploy/docker/build.sh [cpu|gpu]` (`make image` runs the cpu one).
#
# 1. the base image: r3edge-base:bookworm from deploy/docker/base-image.sh (cached) unless BASE_IMAGE names another;
# 2. a wheelhouse on the host: the r3edge wheel built from the repository, and every wheel `r3edge[serve]`
#    (or `r3edge[serve-gpu]`) needs, downloaded for the image's Python and platform (PY_VERSION, GLIBC_MINOR, ARCH) with
#    the host's pip and its index settings. The image build itself then needs no network (pip --no-index),
#    which is what a machine without a registry, or behind a proxy the container does not trust, needs;
# 3. `docker build` of deploy/docker/Dockerfile on a context holding only the wheelhouse,
#    the container's helper scripts and, with ARTIFACT=DIR, an artifact baked in at /models/artifact.
#
# The gpu flavour is the same Dockerfile on a CUDA base (BASE_IMAGE, required) with the serve-gpu extra
# (onnxruntime-gpu) and R3EDGE_DEVICE=cuda.
# Environment: IMAGE (default r3edge-serve:VERSION, or r3edge-serve-gpu:VERSION), BASE_IMAGE, PY_VERSION (3.11;
# 3.12 for the gpu flavour: Ubuntu 24.04's), GLIBC_MINOR (28: manylinux wheels up to glibc 2.28), ARCH (x86_64),
# ARTIFACT (bake this artifact directory in), PYTHON (the host interpreter running pip; default .venv/bin/python).
set -euo pipefail

FLAVOUR=${1:-cpu}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/deploy/docker
cd "$ROOT"
PYTHON=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}
VERSION=$("$PYTHON" -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")
# the image's glibc (bookworm: 2.36) runs every manylinux wheel up to its own version; pip takes the list literally
GLIBC_MINOR=${GLIBC_MINOR:-28}
ARCH=${ARCH:-x86_64}
PLATFORMS=(--platform manylinux2014_"$ARCH")
for minor in $(seq "$GLIBC_MINOR" -1 17); do PLATFORMS+=(--platform manylinux_2_"$minor"_"$ARCH"); done

case "$FLAVOUR" in
  cpu) EXTRA=serve;     DEVICE=cpu; IMAGE=${IMAGE:-r3edge-serve:$VERSION}
       PY_VERSION=${PY_VERSION:-3.11}
       BASE_IMAGE=${BASE_IMAGE:-r3edge-base:bookworm}
       [[ $BASE_IMAGE == r3edge-base:* ]] && BASE_IMAGE=$BASE_IMAGE "$HERE/base-image.sh" ;;
  gpu) EXTRA=serve-gpu; DEVICE=cuda; IMAGE=${IMAGE:-r3edge-serve-gpu:$VERSION}
       PY_VERSION=${PY_VERSION:-3.12}
       BASE_IMAGE=${BASE_IMAGE:?the gpu flavour needs BASE_IMAGE: a CUDA runtime image with cuDNN and python3 >= 3.11, e.g. nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04 (see the Dockerfile)} ;;
  *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;;
esac

CONTEXT=$ROOT/build/docker/$FLAVOUR
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/wheels" "$CONTEXT/artifact"
"$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$CONTEXT/wheels" "$ROOT"
WHEEL=$(ls "$CONTEXT"/wheels/r3edge-"$VERSION"-*.whl)
# every dependency as a wheel for the image's interpreter; pip itself too (the image's venv is made without it)
"$PYTHON" -m pip download -q --dest "$CONTEXT/wheels" --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp "${PLATFORMS[@]}" \
    "r3edge[$EXTRA] @ file://$WHEEL" pip 2> >(grep -v "is ignored: it is neither" >&2)
if ls "$CONTEXT"/wheels | grep -iE '^(torch|transformers|nvidia_)' ; then
    echo "the $EXTRA wheelhouse holds the training stack or CUDA wheels (above): the serving image must not" >&2; exit 1
fi
cp "$HERE"/healthcheck.py "$CONTEXT"/
if [[ -n "${ARTIFACT:-}" ]]; then
    [[ -f "$ARTIFACT/manifest.json" ]] || { echo "ARTIFACT=$ARTIFACT has no manifest.json (an \`r3edge export\` directory?)" >&2; exit 1; }
    cp -rL "$ARTIFACT"/. "$CONTEXT/artifact/"
fi
echo "wheelhouse: $(ls "$CONTEXT"/wheels | wc -l) wheels, $(du -sh "$CONTEXT"/wheels | cut -f1)"
docker build -f "$HERE/Dockerfile" --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg R3EDGE_EXTRA="$EXTRA" \
    --build-arg R3EDGE_DEVICE="$DEVICE" \
    -t "$IMAGE" "$CONTEXT"
echo "built $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
