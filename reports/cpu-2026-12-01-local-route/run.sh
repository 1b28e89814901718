#!/usr/bin/env bash
# The README's own command on this CPU machine (no registry, no GitHub), then its figures:
#   bash reports/cpu-2026-12-01-local-route/run.sh [ARCHS] [CELL]
# ARCHS empty: the cell's own archs (cu124: 8.0;8.6;9.0); `9.0` gives the -sm90 variant. CELL empty: `make image
# CUDA=12.4`; else `make image CELL=CELL` (cu132-py313: the newest stack). Writes
# reports/cpu-2026-12-01-local-route/CELL[-smARCHS].console.log and .figures.json. Needs the Apex fixture
# archive beside the checkout (../shared/fixtures), unpacked into .apex-src/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=reports/cpu-2026-12-01-local-route
archs=${1:-}
cell=${2:-}
name=${cell:-cu124}${archs:+-sm${archs//[^0-9]/}}
if [ ! -f .apex-src/apex/setup.py ]; then
  mkdir -p .apex-src && tar -C .apex-src -xzf ../shared/fixtures/apex-6424da3b.tar.gz
fi
start=$(date +%s)
code=0
sel="CUDA=12.4"; [ -n "$cell" ] && sel="CELL=$cell"
make image "$sel" ${archs:+ARCHS=$archs} APEX_SRC=.apex-src/apex >"$here/$name.console.log" 2>&1 || code=$?
echo "make exit $code after $(( $(date +%s) - start )) s" | tee -a "$here/$name.console.log"
tag=$(sed -n 's/^\[  OK  \] [^:]*: built \([^ ]*\) in .*/\1/p' "$here/$name.console.log" | head -n 1)
[ -n "$tag" ] && python3 "$here/figures.py" "$tag" "$here/$name.console.log" >"$here/$name.figures.json"
exit "$code"
