#!/usr/bin/env bash
# One device step: the Apex 6424da3b wheel built on the 2-core CPU machine with CUDA 13.0 from the
# package index (build.py wheel --cuda-from-pypi, torch 2.11.0 from PyPI = +cu130, Python 3.12, --archs 9.0),
# carried in .carry-pypiwheel/ as parts (sha256 checked against its manifest), installed into a private
# folder (--target, so no other step's Apex is replaced), then the full `python -m verify` against that
# manifest. Needs: carry [".carry-pypiwheel"]. Expected time: under 2 minutes (install ~10 s, verify ~60 s).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
R=/tmp/pypicuda-device-out; mkdir -p "$R"; SITE=/tmp/pypicuda-site
exec > >(tee "$R/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
pack() { tar -C "$R" -czf "$OUT/pypi-cuda-reports.tar.gz" . ; }
M=.carry-pypiwheel/build-manifest.json
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
WHEEL=/tmp/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel"])' "$M")
cat .carry-pypiwheel/wheel.part-* > "$WHEEL"
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["wheel_sha256"])' "$M")
have=$(sha256sum "$WHEEL" | cut -d' ' -f1); echo "wheel $WHEEL sha256 $have (manifest: $want)"
[ "$have" = "$want" ] || { echo "wheel parts do not reassemble to the manifest's wheel"; pack; exit 1; }
cp "$M" "$R/build-manifest.json"
python3 -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL" > "$R/install.log" 2>&1; echo "install exit $?"
stamp "verify"
# cwd /tmp: the repo root's folders must not shadow the installed apex; PYTHONPATH: the installed wheel, then verify
(cd /tmp && PYTHONPATH="$SITE:$OLDPWD" timeout 180 python3 -m verify --manifest "$OLDPWD/$M" --seed 20261201 \
  --json "$R/verify.json" --markdown "$R/verify.md" > "$R/verify.log" 2>&1; echo "verify exit $?")
grep -E "^verify |nvcc|identity" "$R/verify.log" | cut -c1-240
pack; stamp end
