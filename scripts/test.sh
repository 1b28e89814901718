#!/usr/bin/env bash
# The test command behind `make test` (TIER=unit) and every CI job: its own Python environment, one tier.
#   TIER=unit        the default (`make test`): no root, no apt, no Docker engine; the tests not marked slow,
#                    spread over the cores with pytest-xdist (TEST_WORKERS, default auto)
#   TIER=slow        the unit tier's slow tests (subprocess wheel builds, hangs waited out): .ci/run
#   TIER=docker      a real engine (installed and started if none answers; needs root): docker + faults
#   TIER=all         unit + slow + docker (`make test-all`)
#   TIER=apex-image  a real engine and a package index: a real Apex image built (tens of minutes cold; .ci/run)
#   TIER=gpu         a CUDA GPU with compiled Apex (the H200 host)
# The suite's Python is a venv of its own, TEST_VENV (default .venv-test in the checkout, ignored by git):
# made with PY (default python3) on the first run, torch and the `dev` extra installed there, never into PY.
# SKIP_INSTALL=1 installs nothing: the venv when it exists, else PY itself (the GPU host's system Python).
# TORCH_INDEX is where torch comes from (CI: https://download.pytorch.org/whl/cpu; default: pip's own index).
# PYTEST_MARKERS overrides the tier's marker expression; SKIP_DOCKER=1 does not start an engine.
# COVERAGE=1 runs pytest under coverage and prints the per-package table (make coverage); MUTATION=1 runs
# cosmic-ray over the deciding modules (scripts/mutation_run.py, under nice) and then the hand-kept
# mutations of the modules it does not cover (scripts/mutation_check.py) instead of pytest (make mutation).
# After an engine tier (scripts/test_machine_state.py): the images this run tagged (apex-*), their stopped
# containers and the base image it created are removed, and a dockerd it started is stopped together with the
# build cache that daemon made; an engine that was already running keeps its build cache (reported).
# TEST_KEEP_ENGINE=1 leaves all of that for a later tier (.ci/run cleans up after its last one);
# TEST_CLEANUP=dry-run names what would be removed; TEST_CLEANUP=0 removes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}  # PY, not PYTHON: PYTHON is a matrix-cell key for make image
workers=""
case "${TIER:-unit}" in
  unit) markers="not gpu and not docker and not faults and not apex_image and not slow"; SKIP_DOCKER=1; workers=${TEST_WORKERS:-auto} ;;
  slow) markers="slow and not gpu and not docker and not faults and not apex_image"; SKIP_DOCKER=1; workers=${TEST_WORKERS:-auto} ;;
  docker) markers="(docker or faults) and not gpu and not apex_image" ;;
  all) markers="not gpu and not apex_image" ;;
  apex-image) markers="apex_image" ;;
  gpu) markers="gpu"; SKIP_DOCKER=1 ;;
  *) echo "scripts/test.sh: TIER=${TIER} is not a tier; use unit, slow, docker, all, apex-image or gpu" >&2; exit 2 ;;
esac
case "${TEST_CLEANUP:-1}" in
  1|0|dry-run) ;;
  *) echo "scripts/test.sh: TEST_CLEANUP=${TEST_CLEANUP} is not 1, 0 or dry-run" >&2; exit 2 ;;
esac

VENV=${TEST_VENV:-.venv-test}
if [ "${SKIP_INSTALL:-0}" != "1" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[test] making the suite's venv $VENV with $PY"
    "$PY" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
fi
if [ -x "$VENV/bin/python" ]; then
  PY=$VENV/bin/python
  # tools the tests run by name (ruff, hadolint, shellcheck, actionlint) come from the venv too
  PATH="$(cd "$VENV/bin" && pwd):$PATH"
  export PATH
fi

if [ "${MUTATION:-0}" = "1" ]; then  # make mutation: both mutation runs, in the suite's Python
  status=0
  nice -n 19 "$PY" scripts/mutation_run.py "$@" || status=1
  "$PY" scripts/mutation_check.py || status=1
  exit "$status"
fi

STATE=.test-state/engine.json
mkdir -p .test-state
if [ "${SKIP_DOCKER:-0}" != "1" ]; then
  engine_was_running=0
  /usr/bin/docker info >/dev/null 2>&1 && engine_was_running=1
  # the engine tiers' tests need the registry, podman and skopeo too; `make image` alone does not
  case "${TIER:-unit}" in docker|all|apex-image) export ENSURE_TEST_TOOLS=1 ;; esac
  bash scripts/ensure-docker.sh | tee .test-state/ensure-docker.log
  pid=""
  if [ "$engine_was_running" = 0 ] && [ -r /var/run/docker.pid ]; then pid=$(cat /var/run/docker.pid); fi
  base=$(sed -n 's/^\[ensure-docker\] created \(.*\)$/\1/p' .test-state/ensure-docker.log)
  "$PY" scripts/test_machine_state.py snapshot "$STATE" ${pid:+--dockerd-pid "$pid"} ${base:+--base-created "$base"}
  if [ "${TEST_KEEP_ENGINE:-0}" != "1" ] && [ "${TEST_CLEANUP:-1}" != "0" ]; then
    # shellcheck disable=SC2064  # the values are fixed now, on purpose
    trap "echo '[test] leaving the machine as it was found:'; '$PY' scripts/test_machine_state.py cleanup '$STATE' \
      $([ "${TEST_CLEANUP:-1}" = dry-run ] && echo --dry-run) || true" EXIT
  fi
fi

if [ "${COVERAGE:-0}" = "1" ]; then
  rc=0
  "$PY" -m coverage run --data-file=.test-state/coverage --source=verify,toolchain \
    -m pytest -m "${PYTEST_MARKERS:-$markers}" "$@" || rc=$?
  "$PY" scripts/coverage_table.py .test-state/coverage
  exit "$rc"
fi
# pytest-xdist: one worker per core; --dist loadfile keeps a file's tests (and its module fixtures) together
parallel=()
if [ -n "$workers" ] && [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
"$PY" -m pytest -m "${PYTEST_MARKERS:-$markers}" "${parallel[@]}" "$@"
