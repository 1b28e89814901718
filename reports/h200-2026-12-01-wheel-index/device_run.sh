#!/usr/bin/env bash
# The wheel index on the H200 host, from the repository root (Apex 6424da3b unpacked at .apex-src/apex):
#   bash reports/h200-2026-12-01-wheel-index/device_run.sh
# 1. the project's builder (build.py wheel, --archs 9.0, --install) run by a venv that sees the host's
#    torch 2.11+cu130 (its gate installs there, not into the host's Python): the stamped wheel
#    apex-0.1+g6424da3.cu130.torch2.11-cp312-cp312-linux_x86_64.whl, its manifest, the gate's report;
# 2. build.py index into /tmp/wi/index; python -m toolchain.index.serve on 127.0.0.1 (PEP 691 negotiation);
# 3. a fresh venv (--system-site-packages: the host's torch), pip install apex --index-url .../torch2.11-cu130/simple;
# 4. python -m verify (full, GPU) from that venv, cwd /tmp, no --manifest and no $APEX_BUILD_MANIFEST: the
#    manifest comes from the installed wheel's .dist-info.
# Output in $OUT (7 files): console.log, build-manifest.json, install.log, verify.json, verify.md, stacks.json,
# index-listing.txt (the index's files, the project page's JSON and wheel-check.json). About 4-5 minutes.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PIP_DISABLE_PIP_VERSION_CHECK=1
OUT=${OUT:-/tmp/wi-out}; W=/tmp/wi; REPO=$(pwd); SRC=$REPO/.apex-src/apex
COMMIT=6424da3b4faa6c8f062da4a48c424fff3f02d42d
rm -rf "$W"; mkdir -p "$W" "$OUT"
exec > >(tee "$OUT/console.log") 2>&1
t0=$(date +%s); stamp() { echo "=== $1 t=$(( $(date +%s) - t0 )) s"; }
# A venv that sees the host's torch: --system-site-packages, plus a .pth naming the host python's own
# site folders (on the H200 host python3 is itself a venv, whose packages --system-site-packages does not see)
host_venv() {
  python3 -m venv --system-site-packages --without-pip "$1"
  python3 -c 'import site, sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    > "$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-site.pth"
}
stamp start; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("host torch", torch.__version__, torch.version.cuda)'
python3 -c 'import importlib.metadata as m; print("host python already has apex", m.version("apex"))' 2>/dev/null \
  || echo "host python has no apex distribution"

stamp "build (venv that sees the host's torch)"
host_venv "$W/build-venv"
timeout 330 "$W/build-venv/bin/python" build.py wheel --apex-src "$SRC" --out "$W/out" --archs 9.0 \
  --apex-commit $COMMIT --apex-ref 6424da3b --install > "$W/build.log" 2>&1
echo "build exit $?"; grep -E "^\[apex-builder\] (wheel|error|WARNING)|verify static" "$W/build.log" | cut -c1-400
cp "$W/out/build-manifest.json" "$OUT/" 2>/dev/null || { tail -40 "$W/build.log"; exit 1; }

stamp "index"
python3 build.py index "$W/out" --index "$W/index"; echo "index exit $?"
python3 -m toolchain.index.serve "$W/index" --port 0 > "$W/serve.log" 2> "$W/serve-requests.log" &
SERVER=$!; trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "^serving" "$W/serve.log" && break; sleep 0.2; done
URL=$(sed -n 's/.* at \(http[^ ]*\)$/\1/p' "$W/serve.log"); echo "index served at $URL"
cp "$W/index/stacks.json" "$OUT/"
{ (cd "$W/index" && find . -type f | sort); echo; cat "$W/index/torch2.11-cu130/simple/apex/index.json"; echo
  cat "$W"/index/torch2.11-cu130/files/*/wheel-check.json; } > "$OUT/index-listing.txt"

stamp "install from the index into a fresh venv"
host_venv "$W/venv"
(cd /tmp && "$W/venv/bin/python" -m pip install --upgrade apex --index-url "${URL}torch2.11-cu130/simple") \
  > "$OUT/install.log" 2>&1; code=$?; echo "install exit $code"; tail -3 "$OUT/install.log"
if [ "$code" != 0 ]; then  # e.g. no `packaging` (Apex's own requirement) on a host without network: say so, then --no-deps
  echo "install failed; retrying with --no-deps (the torch pin is then not what let it in)"
  (cd /tmp && "$W/venv/bin/python" -m pip install --upgrade --no-deps apex --index-url "${URL}torch2.11-cu130/simple") \
    >> "$OUT/install.log" 2>&1; echo "install --no-deps exit $?"
fi
cat "$W/serve-requests.log" >> "$OUT/install.log"

stamp "verify (full) from that venv"
(cd /tmp && env -u APEX_BUILD_MANIFEST PYTHONPATH="$REPO" timeout 200 "$W/venv/bin/python" -m verify --seed 20261201 \
  --json "$OUT/verify.json" --markdown "$OUT/verify.md" > "$W/verify.log" 2>&1; echo "verify exit $?")
tail -1 "$W/verify.log"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); d=r["apex"]["distribution"] or {}; print("report: verdict", r["verdict"], "apex", d.get("version"), "at", d.get("location"), "manifest from", (r["manifest"] or {}).get("origin"))' "$OUT/verify.json"
stamp end
