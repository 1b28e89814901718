#!/usr/bin/env bash
# The lead's device calls of 2026-12-01 (evening), from the repository root on the H200 test host, with Apex
# 6424da3b's archive carried in the ignored .apex-src/. One wheel serves three folders' scripts:
#   call 1: ../h200-2026-12-01-wheel-index/device_run.sh (build with the project's builder, index, serve,
#           pip install from the index, full verify), then ../h200-2026-12-01-busy-gpu/device_run.sh on that wheel;
#   call 2: ../h200-2026-12-01-wrong-result/device_run.sh on the same wheel (built again if the machine is new).
# Each script writes into its own folder, packed as $OUT/<name>.tar.gz (the device returns 8 files at most).
set -uo pipefail
CALL=${1:?call 1 or 2}
mkdir -p .apex-src && [ -d .apex-src/apex ] || tar -C .apex-src -xzf .apex-src/apex-6424da3b.tar.gz
FINAL=$OUT; R=/tmp/lead-results; mkdir -p "$R"
run() {  # name script [env...]
  local name=$1 script=$2; shift 2
  rm -rf "${R:?}/$name"; mkdir -p "$R/$name"
  echo "##### $name ($(date -u +%T))"
  env OUT="$R/$name" "$@" timeout 560 bash "$script"; echo "##### $name exit $?"
  tar -C "$R" -czf "$FINAL/$name.tar.gz" "$name"
}
WHEEL=$(ls /tmp/wi/out/apex-*.whl 2>/dev/null | head -1)
case "$CALL" in
  1) run wheel-index reports/h200-2026-12-01-wheel-index/device_run.sh
     WHEEL=$(ls /tmp/wi/out/apex-*.whl 2>/dev/null | head -1)
     if [ -n "$WHEEL" ]; then
       run busy-gpu reports/h200-2026-12-01-busy-gpu/device_run.sh APEX_WHEEL="$WHEEL" APEX_MANIFEST=/tmp/wi/out/build-manifest.json
     else echo "no wheel from the wheel-index build: busy-gpu not run"; fi ;;
  2) if [ -n "$WHEEL" ]; then
       run wrong-result reports/h200-2026-12-01-wrong-result/device_run.sh APEX_WHEEL="$WHEEL" APEX_MANIFEST=/tmp/wi/out/build-manifest.json
     else run wrong-result reports/h200-2026-12-01-wrong-result/device_run.sh; fi ;;
esac
