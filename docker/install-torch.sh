#!/bin/bash
# The torch stage: torch + the Apex build requirements into /opt/venv, from the PyTorch index or,
# offline, from a wheelhouse in the build context (docker/build-inputs/$TORCH_WHEELHOUSE).
# Everything is first fetched into one directory and installed from there with --no-index, so
# /opt/apex/inputs/wheels.sha256 hashes exactly the wheels that were installed (provenance).
set -euo pipefail
: "${TORCH_VERSION:?}" "${BUILD_REQUIREMENTS:?}"
inputs=/run/apex-toolchain/docker/build-inputs
fetched=$(mktemp -d)
trap 'rm -rf "$fetched"' EXIT
read -r -a build_reqs <<<"$BUILD_REQUIREMENTS"
# numpy beside torch: without it every `import torch` warns "Failed to initialize NumPy" (torch's wheels
# do not depend on it); offline only when the wheelhouse holds it
read -r -a runtime_reqs <<<"${RUNTIME_REQUIREMENTS:-}"

if [ -n "${TORCH_WHEELHOUSE:-}" ]; then
  wheelhouse="$inputs/$TORCH_WHEELHOUSE"
  if ! ls "$wheelhouse"/*.whl >/dev/null 2>&1; then
    echo "torch stage: TORCH_WHEELHOUSE=$TORCH_WHEELHOUSE but $wheelhouse holds no wheels; put them in" \
      "docker/build-inputs/$TORCH_WHEELHOUSE of the build context (build.py does it for --wheelhouse)" >&2
    exit 1
  fi
  echo "torch stage: offline from the wheelhouse $TORCH_WHEELHOUSE"
  if ! ls "$wheelhouse"/numpy-*.whl >/dev/null 2>&1; then runtime_reqs=(); fi
  pip download --no-index --find-links "$wheelhouse" --dest "$fetched" "torch==$TORCH_VERSION" "${build_reqs[@]}" ${runtime_reqs[@]+"${runtime_reqs[@]}"}
else
  echo "torch stage: torch==$TORCH_VERSION from $TORCH_INDEX_URL, build requirements from $PIP_INDEX_URL"
  pip download --index-url "$TORCH_INDEX_URL" --dest "$fetched" "torch==$TORCH_VERSION"
  pip download --index-url "$PIP_INDEX_URL" --dest "$fetched" "${build_reqs[@]}" ${runtime_reqs[@]+"${runtime_reqs[@]}"}
fi
pip install --no-index --find-links "$fetched" "torch==$TORCH_VERSION" "${build_reqs[@]}" ${runtime_reqs[@]+"${runtime_reqs[@]}"}
mkdir -p /opt/apex/inputs
(cd "$fetched" && sha256sum -- *.whl) >/opt/apex/inputs/wheels.sha256
python -c "import torch; print('torch stage:', torch.__version__, 'CUDA', torch.version.cuda)"
