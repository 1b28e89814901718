#!/usr/bin/env bash
# An idle CUDA context in another process is not GPU load (verify/gpu/device_load.py). On the H200,
# from the repository root, no Apex build needed: verify's own device watch (DeviceWatch, the one the timing
# group runs under) around a stand-in for the timing worker (a child doing bf16 matmuls for ~6 s: verify's own
# process, as the real worker is), judged by verify.gpu.runner._judge_load exactly as the timing group is, in
# three conditions: (0) nothing else on the GPU, (a) beside a process that holds an idle CUDA context,
# (b) beside a process doing matmuls in a loop. Expected: (0) INFO "no other compute process", (a) INFO
# naming the idle pid "present, idle", the row's winner kept; (b) WARN naming the working pid, winner null.
# With an Apex that has its extensions already importable here (amp_C), the full `python -m verify` runs
# beside (a) and (b) as well. About 1.5 min (3 min with the full runs).
# Writes into $OUT: console.log, watch-{none,idle,busy}.json, pmon-{none,idle,busy}.txt, idle.log, busy.log,
# [verify-{idle,busy}.{json,log}], summary.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
stamp start; date -u
nvidia-smi --query-gpu=index,name,driver_version,utilization.gpu,clocks.sm --format=csv,noheader

watch_once() {  # $1: condition name; the watch around verify's own stand-in timing worker
  nvidia-smi pmon -c 1 -s u -i 0 > "$OUT/pmon-$1.txt" 2>&1
  timeout 90 python3 - "$OUT/watch-$1.json" <<'PY'
import json, subprocess, sys
from verify.gpu import device_load, runner
from verify.gpu.runner import GroupResult

worker = """
import time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end = time.time() + 6
while time.time() < end:
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
"""
watch = device_load.DeviceWatch.start()
subprocess.run([sys.executable, "-c", worker], check=True, timeout=60)  # verify's child, as the timing worker is
load = watch.stop()
result = GroupResult("timing")
result.timings.append({"kernel": "stand-in", "verdict": "native", "winner": {"kernel_time": "native",
                                                                             "host_inclusive": "tie"}})
runner._judge_load(result, load)
check = next(c for c in result.checks if c.name == "device_load")
print(f"{check.status.value}  timing.device_load  {check.summary}")
with open(sys.argv[1], "w") as out:
    json.dump({"status": check.status.value, "summary": check.summary, "details": check.details,
               "row": result.timings[0]}, out, indent=1)
PY
  echo "watch $1 exit $?"
}

stamp "(0) nothing else on the GPU"
watch_once none

stamp "(a) beside an idle CUDA context"
python3 -c "import os, time, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); print('idle pid', os.getpid(), flush=True); time.sleep(600)" > "$OUT/idle.log" 2>&1 &
IDLE=$!
for _ in $(seq 60); do grep -q "idle pid" "$OUT/idle.log" && break; sleep 1; done; cat "$OUT/idle.log"
watch_once idle
FULL=0; python3 -c "import amp_C" 2>/dev/null && FULL=1
if [ "$FULL" = 1 ]; then
  timeout 120 python3 -m verify --json "$OUT/verify-idle.json" > "$OUT/verify-idle.log" 2>&1
  echo "verify beside the idle context: exit $?"; grep -E "device_load|^verify full" "$OUT/verify-idle.log" | cut -c1-400
fi
kill "$IDLE"; wait "$IDLE" 2>/dev/null

stamp "(b) beside matmuls in a loop"
python3 - > "$OUT/busy.log" 2>&1 <<'PY' &
import os, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("busy pid", os.getpid(), flush=True)
while True:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
PY
BUSY=$!
for _ in $(seq 60); do grep -q "busy pid" "$OUT/busy.log" && break; sleep 1; done; sleep 3; cat "$OUT/busy.log"
watch_once busy
if [ "$FULL" = 1 ]; then
  timeout 150 python3 -m verify --json "$OUT/verify-busy.json" > "$OUT/verify-busy.log" 2>&1
  echo "verify beside the matmuls: exit $?"; grep -E "device_load|^verify full" "$OUT/verify-busy.log" | cut -c1-400
fi
kill "$BUSY"; wait "$BUSY" 2>/dev/null

stamp summary
python3 - "$OUT" "$IDLE" "$BUSY" > "$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
out, idle, busy = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
want = {"none": ("INFO", None), "idle": ("INFO", idle), "busy": ("WARN", busy)}
for name, (status, pid) in want.items():
    p = out / f"watch-{name}.json"
    if not p.is_file():
        print(f"watch-{name}: no result"); continue
    d = json.loads(p.read_text())
    named = pid is None or f"pid {pid} " in d["summary"]
    ok = d["status"] == status and named and (("withheld" in d["row"]) == (status == "WARN"))
    print(f"watch-{name}: {d['status']} (want {status}), pid named: {named}, row winner {d['row']['winner']} -> "
          f"{'as expected' if ok else 'NOT as expected'}")
    print(f"  {d['summary'][:400]}")
for name in ("verify-idle", "verify-busy"):
    p = out / f"{name}.json"
    if p.is_file():
        d = json.loads(p.read_text())
        load = next((c for c in d["checks"] if c["id"] == "timing.device_load"), {})
        print(f"{name}: {d['verdict']} exit {d['exit_code']}; device_load {load.get('status')}: "
              f"{load.get('summary', 'absent')[:300]}; rows withheld {sum('withheld' in t for t in d['timings'])}"
              f" of {len(d['timings'])}")
PY
cat "$OUT/summary.txt"; stamp end
