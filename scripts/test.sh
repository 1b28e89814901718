#!/usr/bin/env bash
# The test command behind `make test`: installs what the suite needs, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}  # PY, not PYTHON: PYTHON is a matrix-cell key for make image
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q -e '.[dev]'
if [ "${SKIP_DOCKER:-0}" != "1" ]; then
  bash scripts/ensure-docker.sh
fi
exec "$PY" -m pytest -m "${PYTEST_MARKERS:-not gpu}" "$@"
