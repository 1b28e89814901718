#!/usr/bin/env bash
# A GPU shared with other work: one Apex wheel, `python -m verify --json` on the idle H200, then
# again while a background torch process keeps the GPU busy with bf16 matmuls. Expected: the idle run gives
# its timing verdicts and `timing.device_load` INFO "no other work on the GPU"; the busy run names the other
# process (its pid) and withholds every timing verdict (WARN, winners null), parity still PASS, exit 0.
# Run from the repository root on the H200 host: about 150 s build (skipped with APEX_WHEEL=path.whl, and
# APEX_MANIFEST=its build-manifest.json if there is one) + 2 verify runs (~30-60 s each): under 6 minutes.
# Writes into $OUT: console.log, build.log, verify-idle.{json,log}, verify-busy.{json,log}, load.log, summary.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
W=/tmp/i24-busy-wheel; mkdir -p "$W"
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version,utilization.gpu,clocks.sm --format=csv,noheader

M=""
if [ -n "${APEX_WHEEL:-}" ]; then
  stamp "install APEX_WHEEL=$APEX_WHEEL"
  python3 -m pip install -q --no-deps --force-reinstall "$APEX_WHEEL" > "$OUT/build.log" 2>&1; echo "install exit $?"
  M=${APEX_MANIFEST:-}
else
  stamp "build (build.py wheel, sm_90, cold)"
  timeout 330 python3 build.py wheel --apex-src .apex-src/apex --archs 9.0 --out "$W" --install > "$OUT/build.log" 2>&1
  echo "build exit $?"; tail -3 "$OUT/build.log"
  [ -f "$W/build-manifest.json" ] && M=$W/build-manifest.json
fi
MF=(); [ -n "$M" ] && [ -f "$M" ] && MF=(--manifest "$M"); echo "manifest: ${M:-none}"

stamp "verify, idle GPU"
nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader
timeout 150 python3 -m verify "${MF[@]}" --json "$OUT/verify-idle.json" > "$OUT/verify-idle.log" 2>&1
echo "idle verify exit $?"; grep -E "device_load|^verify full" "$OUT/verify-idle.log" | cut -c1-400

stamp "start the GPU load (bf16 matmuls, 8192x8192, in a loop)"
python3 - > "$OUT/load.log" 2>&1 <<'PY' &
import os, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("load pid", os.getpid(), torch.cuda.get_device_name(0), flush=True)
n, t = 0, time.time()
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
    if n % 2000 == 0:
        print(f"{n} matmuls, {n * 2 * 8192**3 / (time.time() - t) / 1e12:.0f} TFLOP/s", flush=True)
PY
LOAD=$!
for _ in $(seq 60); do grep -q "load pid" "$OUT/load.log" && break; sleep 1; done
sleep 3; cat "$OUT/load.log"
nvidia-smi --query-gpu=utilization.gpu,clocks.sm --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader

stamp "verify, GPU busy (load pid $LOAD)"
timeout 240 python3 -m verify "${MF[@]}" --json "$OUT/verify-busy.json" > "$OUT/verify-busy.log" 2>&1
echo "busy verify exit $?"; grep -E "device_load|^verify full" "$OUT/verify-busy.log" | cut -c1-400
kill "$LOAD"; wait "$LOAD" 2>/dev/null; tail -2 "$OUT/load.log"

stamp summary
python3 - "$OUT" "$LOAD" > "$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
out, load_pid = Path(sys.argv[1]), sys.argv[2]
for name in ("verify-idle", "verify-busy"):
    p = out / f"{name}.json"
    if not p.is_file():
        print(f"{name}: no report"); continue
    d = json.loads(p.read_text())
    checks = {c["id"]: c for c in d["checks"]}
    parity = [c["status"] for c in d["checks"] if c["layer"] == "parity"]
    load = checks.get("timing.device_load", {})
    print(f"{name}: {d['verdict']} exit {d['exit_code']}, {d['duration_s']:.1f} s; parity {len(parity)} checks,"
          f" {parity.count('PASS')} PASS; device_load {load.get('status')}: {load.get('summary', 'absent')[:300]}")
    print(f"  load pid {load_pid} named: {('pid ' + load_pid) in load.get('summary', '')}")
    for t in d["timings"]:
        print(f"  {t['kernel']:<16} {t['case'][:30]:<30} winner {t['winner']}  withheld: {'withheld' in t}")
PY
cat "$OUT/summary.txt"; stamp end
