#!/usr/bin/env bash
# The README's own command on this CPU machine (no registry, no GitHub), then its figures:
#   flock /tmp/apex-heavy.lock bash reports/cpu-2026-12-01-local-route/run.sh [ARCHS]
# ARCHS empty: the cu124 cell's own archs (8.0;8.6;9.0); `9.0` gives the -sm90 variant. Writes
# reports/cpu-2026-12-01-local-route/cu124[-ARCHS].console.log and .figures.json. Needs the Apex fixture
# archive beside the checkout (../shared/fixtures), unpacked into .apex-src/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=reports/cpu-2026-12-01-local-route
archs=${1:-}
name=cu124${archs:+-sm${archs//[^0-9]/}}
if [ ! -f .apex-src/apex/setup.py ]; then
  mkdir -p .apex-src && tar -C .apex-src -xzf ../shared/fixtures/apex-6424da3b.tar.gz
fi
start=$(date +%s)
code=0
make image CUDA=12.4 ${archs:+ARCHS=$archs} APEX_SRC=.apex-src/apex >"$here/$name.console.log" 2>&1 || code=$?
echo "make exit $code after $(( $(date +%s) - start )) s" | tee -a "$here/$name.console.log"
tag=$(sed -n 's/^\[  OK  \] [^:]*: built \([^ ]*\) in .*/\1/p' "$here/$name.console.log" | head -n 1)
[ -n "$tag" ] && python3 "$here/figures.py" "$tag" "$here/$name.console.log" >"$here/$name.figures.json"
exit "$code"
