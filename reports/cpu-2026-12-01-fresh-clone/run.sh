#!/usr/bin/env bash
# Issue 23's evidence: `make test` from a fresh clone in a folder whose path has a space, as a new user runs it.
#   run.sh N [busy]     clone this branch to "/tmp/i23-tests fresh clone N/apex-toolchain", time `make test`
#                       there (venv made from scratch), with `stress-ng --cpu 4` running throughout when `busy`
# It runs under /tmp/apex-heavy.lock (the suite builds images that install torch). Writes run-N.log (pytest's
# summary and the cleanup lines) and run-N.txt (wall time, exit code, what the engine held before and after).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:?run number}; busy=${2:-}
src=$(cd "$here/../.." && pwd)
dir="/tmp/i23-tests fresh clone $n"
rm -rf "$dir"; mkdir -p "$dir"
git clone -q --branch "$(git -C "$src" rev-parse --abbrev-ref HEAD)" "$src" "$dir/apex-toolchain"
commit=$(git -C "$dir/apex-toolchain" rev-parse --short HEAD)
engine() { /usr/bin/docker system df --format '{{.Type}} {{.TotalCount}} {{.Size}}' | tr '\n' ';'; }
before=$(engine)
stress=""
if [ "$busy" = busy ]; then stress-ng --cpu 4 --quiet & stress=$!; fi
start=$(date +%s)
rc=0
(cd "$dir/apex-toolchain" && APEX_TEST_FIXTURES=/work/shared/fixtures flock /tmp/apex-heavy.lock make test) \
  > "$here/run-$n.full.log" 2>&1 || rc=$?
wall=$(( $(date +%s) - start ))
if [ -n "$stress" ]; then kill "$stress"; wait "$stress" 2>/dev/null || true; fi
after=$(engine)
grep -E "passed|failed|error|^\[test\]|^  (removing|would|build cache|stopped)|test_machine_state" "$here/run-$n.full.log" \
  | grep -v "^WARNING" > "$here/run-$n.log" || true
printf 'run %s: commit %s, path "%s", %s\nwall %d s, exit %d\nengine before: %s\nengine after:  %s\nload after: %s\n' \
  "$n" "$commit" "$dir/apex-toolchain" "${busy:+under stress-ng --cpu 4 (pid $stress)}" "$wall" "$rc" "$before" "$after" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$here/run-$n.txt"
rm -rf "$dir"
