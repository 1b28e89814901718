#!/usr/bin/env bash
# The one device call behind this folder (H200 test host, bare machine), run from the carry folder (this
# worktree's verify/ and this folder's scripts, the wheel in 15 MiB parts + its build manifest in .wheel/):
# install the Apex 6424da3b wheel built on the CPU machine with CUDA from the package index (../h200-2026-12-01-pypi-cuda), five
# `python -m verify --manifest ... --json` runs of it (the first one plain: no other flag), the independent
# check, the host-drift probe, `verify bench --quick`. Everything lands in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
HERE=reports/h200-2026-12-01-timing2
M=.wheel/build-manifest.json
R=/tmp/timing2-out
mkdir -p "$R" /tmp/whl
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "=== $1 t=$(el) s"; }
pack() { tar -C "$R" -czf "$OUT/timing2-reports.tar.gz" . ; }

stamp start; date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|Hypervisor|CPU max MHz|CPU MHz)" | tr -s ' '
echo "cpufreq governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none)"
python3 -c 'import os, torch; print("allowed cpus", sorted(os.sched_getaffinity(0)), "torch", torch.__version__, "threads", torch.get_num_threads())'

stamp install
name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel"])' "$M" 2>/dev/null || true)
[ -n "$name" ] || name=$(cat .wheel/wheel-name)
cat .wheel/wheel.part-* > "/tmp/whl/$name"
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel_sha256"])' "$M")
got=$(sha256sum "/tmp/whl/$name" | cut -d' ' -f1)
echo "wheel $name sha256 $got (manifest: $want)"; [ "$got" = "$want" ] && echo "sha256 matches" || echo "SHA256 MISMATCH"
echo "$got  $name" > "$R/wheel.sha256"
python3 -m pip install -q --no-deps --force-reinstall "/tmp/whl/$name" > "$R/install.log" 2>&1; echo "install exit $?"
cp "$M" "$R/"

stamp "verify run 1 (plain: python -m verify --manifest M --json PATH)"
timeout 80 python3 -m verify --manifest "$M" --json "$R/verify-1.json" > "$R/verify-1.log" 2>&1
echo "verify run 1 exit $?"; grep -E "^verify full" "$R/verify-1.log"
pack
for i in 2 3 4 5; do
  stamp "verify run $i"
  timeout 80 python3 -m verify --manifest "$M" --json "$R/verify-$i.json" --markdown "$R/verify-$i.md" \
    > "$R/verify-$i.log" 2>&1
  echo "verify run $i exit $?"; grep -E "^verify full" "$R/verify-$i.log"
done
pack

stamp "independent check"
timeout 70 python3 "$HERE/independent_check.py" "$R/independent-check.json" "$R"/verify-[1-5].json \
  > "$R/independent-check.log" 2>&1
echo "independent check exit $?"; grep -v -i "warn\|capture_end\|^ *$\|self.profiler\|profile(" "$R/independent-check.log" | cut -c1-300
pack

if [ "$(el)" -lt 160 ]; then
  stamp "host drift probe"
  timeout 30 python3 "$HERE/host_drift_probe.py" "$R/host-drift-probe.json" > "$R/host-drift-probe.log" 2>&1
  echo "probe exit $?"; grep -v -i "warn" "$R/host-drift-probe.log" | cut -c1-400
  pack
fi

if [ "$(el)" -lt 172 ]; then
  stamp "bench --quick"
  timeout 40 python3 -m verify bench --quick --no-plots --out "$R/bench-quick" > "$R/bench-quick.log" 2>&1
  echo "bench exit $?"; grep -E "^\[micro\]|finished in" "$R/bench-quick.log" | cut -c1-300
  pack
fi

stamp summary
python3 - "$R" <<'PY'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
for i in range(1, 6):
    p = r / f"verify-{i}.json"
    if not p.exists():
        print(f"run {i}: no report"); continue
    d = json.loads(p.read_text())
    sha = d["manifest"]["data"]["build"]["wheel_sha256"]
    host = {t["host"]["cpu"] for t in d["timings"] if t.get("host")}
    w = " ".join(f"{t['kernel'][5:]}.{t['case'][:4]}={t['winner']['kernel_time'][0]}/{t['winner']['host_inclusive'][0]}"
                 for t in d["timings"])
    print(f"run {i}: {d['duration_s']:.1f} s, {d['verdict']}, wheel {sha[:12]}, cpu {host}, kernel/loop winners {w}")
PY
sed -n '/── timings/,$p' "$R/verify-1.log" | cut -c1-330
pack
stamp end
