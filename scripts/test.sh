#!/usr/bin/env bash
# The test command behind `make test` and every CI job: installs what the suite needs, then runs one tier.
#   TIER=all         everything but the GPU and apex-image tiers (default; `make test`)
#   TIER=unit        no Docker engine needed (not docker, not faults)
#   TIER=docker      a real engine: the docker tier and the fault-injection tier
#   TIER=apex-image  a real engine and a package index: a real Apex image built (tens of minutes cold; .ci/run)
#   TIER=gpu         a CUDA GPU with compiled Apex (the H200 host)
# PYTEST_MARKERS overrides the tier's marker expression; SKIP_INSTALL=1 keeps the installed packages;
# TORCH_INDEX is where torch comes from (CI: https://download.pytorch.org/whl/cpu; default: pip's own
# index, for torch only); SKIP_DOCKER=1 does not start an engine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}  # PY, not PYTHON: PYTHON is a matrix-cell key for make image
case "${TIER:-all}" in
  all) markers="not gpu and not apex_image" ;;
  unit) markers="not gpu and not docker and not faults and not apex_image"; SKIP_DOCKER=1 ;;
  docker) markers="(docker or faults) and not gpu and not apex_image" ;;
  apex-image) markers="apex_image" ;;
  gpu) markers="gpu"; SKIP_DOCKER=1 ;;
  *) echo "scripts/test.sh: TIER=${TIER} is not a tier; use all, unit, docker, apex-image or gpu" >&2; exit 2 ;;
esac
if [ "${SKIP_INSTALL:-0}" != "1" ]; then
  "$PY" -m pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
  "$PY" -m pip install -q -e '.[dev]'
fi
if [ "${SKIP_DOCKER:-0}" != "1" ]; then
  bash scripts/ensure-docker.sh
fi
exec "$PY" -m pytest -m "${PYTEST_MARKERS:-$markers}" "$@"
