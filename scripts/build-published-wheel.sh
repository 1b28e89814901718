#!/usr/bin/env bash
# One published cell's Apex wheel, built inside PyTorch's manylinux_2_28 builder image (glibc 2.28), so the
# index can tag it manylinux_2_28 (docs/wheels.md#publishing). The publish workflow runs it as
#   docker run --rm -v "$PWD:/src" -w /src -e PYTHON_BIN=... -e TORCH=... ... BUILDER bash scripts/build-published-wheel.sh
# with the values of one `build.py gh-matrix --published` entry. Writes OUT (default dist/): the wheel,
# build-manifest.json and the build log, gated by verify --static (build.py wheel --install).
set -euo pipefail
: "${PYTHON_BIN:?the builder CPython, e.g. /opt/python/cp312-cp312/bin/python}"
: "${TORCH:?the exact torch version, e.g. 2.15.0}"
: "${TORCH_INDEX_URL:?the index torch comes from}"
: "${APEX_REPO:?}" "${APEX_REF:?}" "${ARCHS:?}" "${FLAGS:?}"
OUT=${OUT:-dist}
EXTRAS=${EXTRAS:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PYTHON_BIN" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet "torch==${TORCH}" --index-url "$TORCH_INDEX_URL"
# what setup.py imports with --no-build-isolation (the builder checks them before it starts)
"$PY" -m pip install --quiet "setuptools>=70.1" packaging

git clone --quiet --filter=blob:none "$APEX_REPO" "$WORK/apex"
git -C "$WORK/apex" checkout --quiet "$APEX_REF"

extras=()
if [ -n "$EXTRAS" ]; then extras=(--extras "$EXTRAS"); fi
# nvcc: the image's own when it is torch's CUDA, else NVIDIA's wheels for torch's CUDA (the builder decides)
"$PY" build.py wheel --apex-src "$WORK/apex" --out "$OUT" --archs "$ARCHS" --flags "$FLAGS" \
  "${extras[@]}" --install
