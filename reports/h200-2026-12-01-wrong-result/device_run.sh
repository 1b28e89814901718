#!/usr/bin/env bash
# A slightly wrong Apex must FAIL the full run, on the H200 host, from the repository root (bare machine, no network): build Apex 6424da3b from
# .apex-src/apex with the project's builder (sm_90, installed and gated), then with the project's own commands:
#   1. python -m verify on that build as it is                     -> expected: PASS, exit 0
#   2. the same build, FusedAdam and FusedLayerNorm made slightly wrong
#      (tests/gpu/wrong_result/sitecustomize.py: results moved by 4x the parity rtol of their dtype)
#                                                                  -> expected: FAIL, exit 1, all 12 of their parity checks FAIL
#   3. the gpu test tier (tests/gpu, including test_wrong_result_gpu.py) -> expected: all pass
# APEX_WHEEL=path.whl (+ APEX_MANIFEST=its manifest) installs that wheel instead of building one.
# Everything lands in $OUT/wrong-result.tar.gz and $OUT/summary.txt; the console in $OUT/console.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
R=/tmp/wrong-result-out; W=/tmp/wrong-result-build
mkdir -p "$R" "$W"
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
BUDGET=460  # seconds: the whole call stays under 8 minutes; the gpu tier gets what the steps before it left
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
pack() { cp "$OUT/console.log" "$R/" 2>/dev/null; tar -C "$R" -czf "$OUT/wrong-result.tar.gz" . ; }
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

if [ -n "${APEX_WHEEL:-}" ]; then  # one wheel for several device scripts: install it instead of building again
  stamp "install APEX_WHEEL=$APEX_WHEEL"
  python3 -m pip install -q --no-deps --force-reinstall "$APEX_WHEEL" > "$R/build.log" 2>&1; echo "install exit $?"
  M=${APEX_MANIFEST:-$W/build-manifest.json}; cp "$M" "$R/" 2>/dev/null || echo "no build manifest"
else
  stamp "build (build.py wheel --archs 9.0 --install)"
  timeout -s TERM 260 python3 build.py wheel --apex-src .apex-src/apex --archs 9.0 --out "$W" --install \
    > "$R/build.log" 2>&1; echo "build exit $?"; tail -n 3 "$R/build.log"
  M=$W/build-manifest.json; cp "$M" "$R/" 2>/dev/null || echo "no build manifest"
fi
ls -la "$W"/*.whl 2>/dev/null; pack

stamp "verify: the build as it is"
timeout 90 python3 -m verify --manifest "$M" --seed 20261201 --json "$R/plain.json" --markdown "$R/plain.md" \
  > "$R/plain.log" 2>&1; echo "plain verify exit $?"; grep -E "^verify full" "$R/plain.log"; pack

stamp "verify: FusedAdam and FusedLayerNorm slightly wrong"
VERIFY_TEST_WRONG_RESULT=fused_adam,fused_layer_norm PYTHONPATH="$PWD/tests/gpu/wrong_result:$PWD" \
  timeout 90 python3 -m verify --manifest "$M" --seed 20261201 --json "$R/wrong.json" --markdown "$R/wrong.md" \
  > "$R/wrong.log" 2>&1; echo "wrong-result verify exit $?"; grep -E "^(FAIL|verify full)" "$R/wrong.log" | cut -c1-300; pack

stamp "gpu tier ($(( $(left) - 15 )) s left for it)"
timeout $(( $(left) - 15 )) python3 -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider > "$R/gpu-tier.log" 2>&1
echo "gpu tier exit $?"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$R/gpu-tier.log" | tail -n 15; pack

stamp summary
python3 - "$R" <<'PY' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
for name in ("plain", "wrong"):
    p = r / f"{name}.json"
    if not p.is_file():
        print(f"{name}: no report"); continue
    d = json.loads(p.read_text())
    parity = {c["id"]: c["status"] for c in d["checks"] if c["id"].startswith("parity.")}
    by = {}
    for cid, status in parity.items():
        by.setdefault(cid.split(".")[1], {}).setdefault(status, 0)
        by[cid.split(".")[1]][status] += 1
    print(f"{name}: verdict {d['verdict']}, exit_code {d['exit_code']}, parity by family {by}")
    for c in d["checks"]:
        if c["status"] == "FAIL":
            print(f"  FAIL {c['id']}: {c['summary'][:220]}")
PY
stamp end; pack
