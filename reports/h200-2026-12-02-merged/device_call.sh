#!/usr/bin/env bash
# The lead's device calls of 2026-12-02, on the merged tree (verify in rooms, typed records, one Arch value,
# mypy-clean), from the repository root on the H200 test host, Apex 6424da3b's archive in the ignored .apex-src/:
#   call 1: ../h200-2026-12-01-wheel-index/device_run.sh: the project's builder (one arch, 9.0), index, serve,
#           pip install from the index into a fresh venv, full verify from there;
#   call 2: that wheel installed into the host's Python, then the gpu tier with the wrong-result Apex
#           (../h200-2026-12-01-wrong-result/device_run.sh), the idle-context check
#           (../h200-2026-12-02-idle-context/device_run.sh) and the Arch value's checks on the built manifest.
# Each part writes into its own folder, packed as $OUT/<name>.tar.gz (the device returns 8 files at most).
set -uo pipefail
CALL=${1:?call 1 or 2}
mkdir -p .apex-src && [ -d .apex-src/apex ] || tar -C .apex-src -xzf .apex-src/apex-6424da3b.tar.gz
FINAL=$OUT; R=/tmp/lead-results; mkdir -p "$R"
run() {  # name script timeout [env...]
  local name=$1 script=$2 limit=$3; shift 3
  rm -rf "${R:?}/$name"; mkdir -p "$R/$name"
  echo "##### $name ($(date -u +%T))"
  env OUT="$R/$name" "$@" timeout "$limit" bash "$script"; echo "##### $name exit $?"
  tar -C "$R" -czf "$FINAL/$name.tar.gz" "$name"
}
WHEEL=$(ls /tmp/wi/out/apex-*.whl 2>/dev/null | head -1)
case "$CALL" in
  1) run wheel-index reports/h200-2026-12-01-wheel-index/device_run.sh 560 ;;
  2) [ -n "$WHEEL" ] || { echo "no wheel from call 1 (a fresh machine): run call 1 first"; exit 1; }
     run gpu-tier reports/h200-2026-12-01-wrong-result/device_run.sh 260 APEX_WHEEL="$WHEEL" APEX_MANIFEST=/tmp/wi/out/build-manifest.json
     run idle-context reports/h200-2026-12-02-idle-context/device_run.sh 230 APEX_BUILD_MANIFEST=/tmp/wi/out/build-manifest.json
     mkdir -p "$R/arch-value"
     { echo "=== a Unicode-digit arch is refused before any build (exit 2 expected)"
       python3 build.py wheel --apex-src .apex-src/apex --out /tmp/arch-bad --archs '٩.٠'; echo "exit $?"
       echo "=== what the index build recorded"
       python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print("arch_list", m["arch_list"], "expected", len(m["expected_modules"]), "built", len(m["built_modules"]), "missing", sorted(set(m["expected_modules"])-set(m["built_modules"])))' /tmp/wi/out/build-manifest.json
     } > "$R/arch-value/console.log" 2>&1; cat "$R/arch-value/console.log"
     tar -C "$R" -czf "$FINAL/arch-value.tar.gz" arch-value ;;
esac
