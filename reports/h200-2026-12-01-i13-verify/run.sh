#!/usr/bin/env bash
# One device call for issue 13's verify half (branch i13-verify): the layers as a pipeline, the module
# table, one JSON-lines child runner for probe/workers/ranks, the build manifest record. Same wheel and
# manifest as reports/h200-2026-12-01-merged/run.sh (carry .carry-apexwheel/). Expected: about 4-5 min.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/i13v-out; mkdir -p "$R"
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
pack() { tar -C "$R" -czf "$OUT/i13-verify-reports.tar.gz" . ; }
M=reports/h200-2026-12-01-timing/call2/build-manifest.json
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat .carry-apexwheel/wheel.part-* > /tmp/apex-0.1-cp312-cp312-linux_x86_64.whl
sha256sum /tmp/apex-0.1-cp312-cp312-linux_x86_64.whl | tee "$R/wheel.sha256"
python3 -m pip install -q --no-deps --force-reinstall /tmp/apex-0.1-cp312-cp312-linux_x86_64.whl > "$R/install.log" 2>&1; echo "install exit $?"
stamp "verify full (default output: module table, then what is not PASS)"
timeout 120 python3 -m verify --manifest "$M" --seed 20261201 --json "$R/verify.json" --markdown "$R/verify.md" > "$R/verify.log" 2>&1; echo "verify exit $?"
head -8 "$R/verify.log" | cut -c1-200; tail -3 "$R/verify.log" | cut -c1-200; pack
stamp "verify --static --verbose (every check, as before)"
timeout 60 python3 -m verify --static --verbose --manifest "$M" > "$R/verify-static-verbose.log" 2>&1; echo "static exit $?"
tail -1 "$R/verify-static-verbose.log"; pack
stamp "distributed on one GPU (ranks through the shared child runner)"
timeout 120 python3 -m verify --distributed --manifest "$M" --json "$R/distributed.json" > "$R/distributed.log" 2>&1; echo "distributed exit $?"
grep -E "distributed|^verify full" "$R/distributed.log" | cut -c1-240; pack
stamp "gpu tier"
timeout 200 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider > "$R/gpu-tier.log" 2>&1; echo "gpu tier exit $?"; tail -5 "$R/gpu-tier.log"
pack; stamp end
