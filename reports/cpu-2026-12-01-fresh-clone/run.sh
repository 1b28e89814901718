#!/usr/bin/env bash
# Evidence: `make test` from a fresh clone in a folder whose path has a space, as a new user runs it.
#   [TIER=unit] run.sh N [busy]   clone this branch to "/tmp/i23-tests fresh clone N/apex-toolchain", time
#                       `make test` there (venv made from scratch), with `stress-ng --cpu 4` running throughout
#                       when `busy`; TIER=unit: the unit tier alone (`TIER=unit make test`)
# The whole suite runs under /tmp/apex-heavy.lock (it builds images that install torch; the machine is shared);
# NOLOCK=1 runs it beside whatever holds the lock (the busy run: load is the point).
# Writes run-N.log (pytest's summary and the cleanup lines) and run-N.txt (wall time, exit code, what the
# engine held before and after).
set -euo pipefail
here=${HERE:-$(cd "$(dirname "$0")" && pwd)}  # HERE: where the results go (a copy of this script may run elsewhere)
n=${1:?run number}; busy=${2:-}
src=$(cd "$here/../.." && pwd)
dir="/tmp/i23-tests fresh clone $n"
rm -rf "$dir"; mkdir -p "$dir"
git clone -q --branch "$(git -C "$src" rev-parse --abbrev-ref HEAD)" "$src" "$dir/apex-toolchain"
commit=$(git -C "$dir/apex-toolchain" rev-parse --short HEAD)
engine() { /usr/bin/docker system df --format '{{.Type}} {{.TotalCount}} {{.Size}}' 2>/dev/null | tr '\n' ';' || echo 'no engine answering'; }
before=$(engine)
stress=""
if [ "$busy" = busy ]; then stress-ng --cpu 4 --quiet & stress=$!; fi
start=$(date +%s)
rc=0
tier=${TIER:-all}
lock=(flock /tmp/apex-heavy.lock)
[ "$tier" = unit ] || [ "${NOLOCK:-0}" = 1 ] && lock=()
# shellcheck disable=SC2016  # the inner script's $(date) runs once the lock is held
(cd "$dir/apex-toolchain" && TIER=$tier APEX_TEST_FIXTURES=${APEX_TEST_FIXTURES:-$(cd "$src/.." && pwd)/shared/fixtures} \
  "${lock[@]}" bash -c 'echo "make test started $(date +%s) $(date -u +%FT%TZ)"; exec make test') \
  > "$here/run-$n.full.log" 2>&1 || rc=$?
began=$(sed -n 's/^make test started \([0-9]*\) .*/\1/p' "$here/run-$n.full.log")
wall=$(( $(date +%s) - ${began:-$start} ))
if [ -n "$stress" ]; then kill "$stress"; wait "$stress" 2>/dev/null || true; fi
after=$(engine)
grep -E "passed|failed|error|^\[test\]|^  (removing|would|build cache|stopped)|test_machine_state" "$here/run-$n.full.log" \
  | grep -v "^WARNING" > "$here/run-$n.log" || true
printf 'run %s (TIER=%s): commit %s, path "%s", %s\nwall %d s (from the lock taken), exit %d\nengine before: %s\nengine after:  %s\nload after: %s\n' \
  "$n" "$tier" "$commit" "$dir/apex-toolchain" "${busy:+under stress-ng --cpu 4 (pid $stress)}" "$wall" "$rc" "$before" "$after" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$here/run-$n.txt"
rm -rf "$dir"
