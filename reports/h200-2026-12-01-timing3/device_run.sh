#!/usr/bin/env bash
# The one device call behind this folder (H200 test host, bare machine), run from the repository root (this
# checkout's verify/ with the loop floor; the wheel in 15 MiB parts + its build manifest in the ignored .whl/):
# install the Apex 6424da3b wheel built on the CPU machine (../h200-2026-12-01-pypi-cuda; the same wheel as ../h200-2026-12-01-timing2),
# five `python -m verify --manifest ... --json` runs (the first plain), the independent check of the second
# round (../h200-2026-12-01-timing2/independent_check.py, unchanged), `verify bench --quick`, then three more
# verify runs while time is left. Everything lands in $OUT/timing3.tar.gz (the device returns few files), its
# console in $OUT/console.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PREV=reports/h200-2026-12-01-timing2
M=.whl/build-manifest.json
R=/tmp/timing3-out
mkdir -p "$R" /tmp/whl
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "=== $1 t=$(el) s"; }
pack() { cp "$OUT/console.log" "$R/console.log"; tar -C "$R" -czf "$OUT/timing3.tar.gz" . ; }

stamp start; date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
lscpu | grep -E "^(Model name|CPU\(s\)|Hypervisor)" | tr -s ' '
python3 -c 'import os, torch; print("allowed cpus", sorted(os.sched_getaffinity(0)), "torch", torch.__version__)'

stamp install
name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel"])' "$M")
cat .whl/wheel.part-* > "/tmp/whl/$name"
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel_sha256"])' "$M")
got=$(sha256sum "/tmp/whl/$name" | cut -d' ' -f1)
echo "wheel $name sha256 $got (manifest: $want)"; [ "$got" = "$want" ] && echo "sha256 matches" || echo "SHA256 MISMATCH"
echo "$got  $name" > "$R/wheel.sha256"
python3 -m pip install -q --no-deps --force-reinstall "/tmp/whl/$name" > "$R/install.log" 2>&1; echo "install exit $?"
cp "$M" "$R/"

run_verify() {
  stamp "verify run $1"
  if [ "$1" = 1 ]; then
    timeout 80 python3 -m verify --manifest "$M" --json "$R/verify-1.json" > "$R/verify-1.log" 2>&1
  else
    timeout 80 python3 -m verify --manifest "$M" --json "$R/verify-$1.json" --markdown "$R/verify-$1.md" \
      > "$R/verify-$1.log" 2>&1
  fi
  echo "verify run $1 exit $?"; grep -E "^verify full" "$R/verify-$1.log"
  pack
}
for i in 1 2 3 4 5; do run_verify "$i"; done

stamp "independent check"
timeout 75 python3 "$PREV/independent_check.py" "$R/independent-check.json" "$R"/verify-[1-5].json \
  > "$R/independent-check.log" 2>&1
echo "independent check exit $?"; grep -v -i "warn\|capture_end\|^ *$\|self.profiler\|profile(" "$R/independent-check.log" | cut -c1-300

stamp "bench --quick"
timeout 45 python3 -m verify bench --quick --no-plots --out "$R/bench-quick" > "$R/bench-quick.log" 2>&1
echo "bench exit $?"; grep -E "^\[micro\]|finished in" "$R/bench-quick.log" | cut -c1-300

for i in 6 7 8; do [ "$(el)" -lt 250 ] && run_verify "$i"; done

stamp summary
python3 - "$R" <<'PY'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
for p in sorted(r.glob("verify-*.json"), key=lambda p: int(p.stem.split("-")[1])):
    d = json.loads(p.read_text())
    sha = d["manifest"]["data"]["build"]["wheel_sha256"]
    w = " ".join(f"{t['kernel'][5:]}.{t['case'][:4]}={t['winner']['kernel_time'][0]}/{t['winner']['host_inclusive'][0]}"
                 f"({(t['host_inclusive'] or {}).get('this_run_winner', '?')[0]})" for t in d["timings"])
    print(f"{p.stem}: {d['duration_s']:.1f} s, {d['verdict']}, wheel {sha[:12]}, kernel/loop(this run) {w}")
PY
sed -n '/── timings/,$p' "$R/verify-1.log" | cut -c1-400
stamp end
pack
