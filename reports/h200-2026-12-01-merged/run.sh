#!/usr/bin/env bash
# The merged main's checks on the H200 (timing, clusters, bench, the cross-GPU checks), after reports/h200-2026-12-01-buildspeed/run.sh in
# the same call: the five-arch wheel that call's cold build made (WHEEL/MANIFEST), else the Apex 6424da3b wheel of
# the timing call (carried in .carry-apexwheel/ as parts); installed; then with the project's own commands: full
# verify, the zipapp against python -m verify, verify --distributed on one GPU,
# verify bench --quick, and the GPU test tier.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/merged-out; mkdir -p "$R"
exec > >(tee "$OUT/merged-console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
pack() { tar -C "$R" -czf "$OUT/merged-reports.tar.gz" . ; }
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -n "${WHEEL:-}" ] && [ -f "$WHEEL" ] && [ -f "${MANIFEST:-}" ]; then
  M=$MANIFEST; echo "wheel: $WHEEL (this call's build)"
else
  M=reports/h200-2026-12-01-timing/call2/build-manifest.json; WHEEL=/tmp/apex-0.1-cp312-cp312-linux_x86_64.whl
  cat .carry-apexwheel/wheel.part-* > "$WHEEL"; echo "wheel: the timing call's (carried)"
fi
cp "$M" "$R/build-manifest.json"
sha256sum "$WHEEL" | tee "$R/wheel.sha256"
python3 -m pip install -q --no-deps --force-reinstall "$WHEEL" > "$R/install.log" 2>&1; echo "install exit $?"
stamp "verify (module)"
timeout 120 python3 -m verify --manifest "$M" --seed 20261201 --json "$R/verify.json" --markdown "$R/verify.md" > "$R/verify.log" 2>&1; echo "verify exit $?"
grep -E "^verify full" "$R/verify.log"; pack
stamp "zipapp"
python3 build.py zipapp --out /tmp/z/verify.pyz > "$R/zipapp-build.log" 2>&1; echo "zipapp build exit $?"
(cd /tmp && timeout 120 python3 /tmp/z/verify.pyz --manifest "$OLDPWD/$M" --seed 20261201 --json "$R/zipapp.json" --markdown "$R/zipapp.md" > "$R/zipapp.log" 2>&1; echo "zipapp verify exit $?")
python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); s=lambda r:[(c["id"],c["status"]) for c in r["checks"]]; print("zipapp", a["verdict"], a["exit_code"], "| module", b["verdict"], b["exit_code"], "| same check ids and statuses:", s(a)==s(b))' "$R/zipapp.json" "$R/verify.json" | tee "$R/zipapp-compare.txt"
pack
stamp "distributed on one GPU"
timeout 120 python3 -m verify --distributed --manifest "$M" --json "$R/distributed.json" --markdown "$R/distributed.md" > "$R/distributed.log" 2>&1; echo "distributed exit $?"
grep -E "distributed|^verify full" "$R/distributed.log" | cut -c1-240; pack
stamp "bench --quick"
timeout 45 python3 -m verify bench --quick --no-plots --out "$R/bench-quick" > "$R/bench-quick.log" 2>&1; echo "bench exit $?"
grep -E "^\[micro\]|finished in" "$R/bench-quick.log" | cut -c1-300; pack
stamp "gpu tier"
timeout 100 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider > "$R/gpu-tier.log" 2>&1; echo "gpu tier exit $?"; tail -5 "$R/gpu-tier.log"
pack; stamp end
