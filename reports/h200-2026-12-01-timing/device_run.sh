#!/usr/bin/env bash
# The one device call behind this folder (H200 test host, bare machine): build Apex 6424da3b with the
# project's builder, five `python -m verify --json` runs of that one wheel, the independent check, and
# one `verify bench --quick`. Run from the repository root; everything lands in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=reports/h200-2026-12-01-timing
R=/tmp/timing-out
mkdir -p "$R"
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s)
stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
left() { echo $(( 560 - ($(date +%s) - t0) )); }  # seconds before the call's 600 s limit, with a margin
pack() { tar -C "$R" -czf "$OUT/timing-reports.tar.gz" . ; }

stamp start; date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'

stamp build
cp -r ../.apex-src/6424da3b/apex /tmp/apex-src
python3 build.py wheel --apex-src /tmp/apex-src --archs 9.0 --out /tmp/b90 --install \
  --apex-commit 6424da3b4faa6c8f062da4a48c424fff3f02d42d --apex-ref 6424da3b > "$R/build.log" 2>&1
echo "build exit $?"; tail -3 "$R/build.log"
cp /tmp/b90/build-manifest.json /tmp/b90/verify-static.json "$R/" 2>/dev/null
sha256sum /tmp/b90/*.whl | tee "$R/wheel.sha256"
# the wheel comes back in 15 MiB pieces for a second call without a rebuild (never committed)
split -b 15M /tmp/b90/apex-*.whl "$OUT/wheel.part-"

for i in 1 2 3 4 5; do
  stamp "verify run $i"
  timeout 120 python3 -m verify --manifest /tmp/b90/build-manifest.json --json "$R/verify-$i.json" \
    --markdown "$R/verify-$i.md" > "$R/verify-$i.log" 2>&1
  echo "verify run $i exit $?"; grep -E "^(INFO|FAIL)  timing|^verify full" "$R/verify-$i.log" | cut -c1-400
done

stamp "independent check"
timeout 120 python3 "$HERE/independent_check.py" "$R/independent-check.json" "$R"/verify-[1-5].json 2>&1 | tee "$R/independent-check.log"

pack
stamp "bench --quick (left: $(left) s)"
timeout $(( $(left) - 40 )) python3 -m verify bench --quick --out "$R/bench-quick" > "$R/bench-quick.log" 2>&1
echo "bench exit $?"; tail -4 "$R/bench-quick.log"

stamp "GPU tests of the new paths"
timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_layers.py::test_the_smoke_check_runs_on_a_real_device \
  tests/unit/test_kernel_compare.py::test_cuda_comparison_uses_the_profiler_with_markers 2>&1 | tail -5 | tee "$R/pytest-gpu.log"

stamp pack
python3 - "$R" <<'EOF'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
for i in range(1, 6):
    p = r / f"verify-{i}.json"
    if not p.exists():
        print(f"run {i}: no report"); continue
    d = json.loads(p.read_text())
    sha = ((d.get("manifest") or {}).get("data") or {}).get("wheel_sha256")
    w = {t["case"][:28] + " " + t["kernel"]: (t["winner"]["kernel_time"], t["winner"]["host_inclusive"]) for t in d["timings"]}
    print(f"run {i}: {d['duration_s']:.1f} s, wheel {str(sha)[:12]}, winners {w}")
EOF
sed -n '/── timings/,$p' "$R/verify-1.log" | cut -c1-330
grep -E "^\[micro\]|^\[stage|finished in" "$R/bench-quick.log" | cut -c1-330
pack
ls -la "$OUT"
stamp end
sleep 1  # let tee write the console log out
