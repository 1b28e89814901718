#!/usr/bin/env bash
# The second device call (after the first showed one loop winner flipping, see README): the same wheel
# as call 1 (carried in .wheel/ with its build manifest, installed with pip; sha256 checked), five
# `python -m verify --json` runs with the fixed method, the independent check, `verify bench --quick`.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
HERE=reports/h200-2026-12-01-timing
R=/tmp/timing-out
mkdir -p "$R"
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s)
stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
pack() { tar -C "$R" -czf "$OUT/timing-reports.tar.gz" . ; }

stamp start; date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
sha256sum .wheel/*.whl | tee "$R/wheel.sha256"
python3 -m pip install -q --no-deps --force-reinstall .wheel/apex-*.whl > "$R/install.log" 2>&1; echo "install exit $?"
cp .wheel/build-manifest.json "$R/"

for i in 1 2 3 4 5; do
  stamp "verify run $i"
  timeout 120 python3 -m verify --manifest .wheel/build-manifest.json --json "$R/verify-$i.json" \
    --markdown "$R/verify-$i.md" > "$R/verify-$i.log" 2>&1
  echo "verify run $i exit $?"; grep -E "^verify full" "$R/verify-$i.log"
done
pack

stamp "independent check"
timeout 60 python3 "$HERE/independent_check.py" "$R/independent-check.json" "$R"/verify-[1-5].json \
  > "$R/independent-check.log" 2>&1
echo "independent check exit $?"; grep -v -i "warn\|capture_end\|^ *$" "$R/independent-check.log" | cut -c1-260
pack

if [ $(( $(date +%s) - t0 )) -lt 120 ]; then
  stamp "bench --quick"
  timeout 60 python3 -m verify bench --quick --no-plots --out "$R/bench-quick" > "$R/bench-quick.log" 2>&1
  echo "bench exit $?"; grep -E "^\[micro\]|finished in" "$R/bench-quick.log" | cut -c1-300
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
    w = " ".join(f"{t['kernel'][5:]}.{t['case'][:4]}={t['winner']['kernel_time'][0]}/{t['winner']['host_inclusive'][0]}"
                 for t in d["timings"])
    print(f"run {i}: {d['duration_s']:.1f} s, {d['verdict']}, wheel {sha[:12]}, kernel/loop winners {w}")
PY
sed -n '/── timings/,$p' "$R/verify-1.log" | cut -c1-330
pack
stamp end
sleep 1
