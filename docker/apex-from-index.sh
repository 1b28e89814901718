#!/usr/bin/env bash
# The Dockerfile's apex-index stage: a verified Apex wheel from an index instead of a compile. build.py image
# --apex-index URL found the cell's wheel on the index, checked its sha256 and staged it in the build context
# (docker/build-inputs/apex-wheel/NAME). Installed beside torch (no dependency resolution: torch and
# packaging are the venv's), its build manifest taken from its .dist-info, then the same static gate as a
# compiled build (an expected module missing fails the build), written to /opt/apex as apex-build writes it.
set -euo pipefail
name=${1:-}
src=/run/apex-toolchain/docker/build-inputs/apex-wheel/${name}
if [ -z "$name" ] || [ ! -f "$src" ]; then
  echo "apex-index stage: no wheel '${name}' under docker/build-inputs/apex-wheel/; build with" \
    "build.py image --apex-index URL, which stages it (APEX_FROM=index, APEX_WHEEL=NAME)" >&2
  exit 2
fi
mkdir -p /opt/apex
cp "$src" /opt/apex/
cd /opt/apex
pip install --no-deps --no-index --no-cache-dir "./${name}"
manifest=$(python -c 'import importlib.metadata as m
d = m.distribution("apex")
print(d.locate_file(next(f for f in d.files if f.name == "build-manifest.json" and f.parent.name.endswith(".dist-info"))))')
cp "$manifest" /opt/apex/build-manifest.json
required=$(python -c 'import json
from toolchain.builder.static_gate import gate_required
print(gate_required(json.load(open("/opt/apex/build-manifest.json"))["expected_modules"]))')
{
  echo "apex from an index (no compile): ${name}"
  echo "sha256 $(sha256sum "./${name}" | cut -d' ' -f1), checked by build.py against the index's page"
} >/opt/apex/apex-build.log
python -m verify --static --manifest /opt/apex/build-manifest.json "--require=${required}" \
  --json /opt/apex/verify-static.json --markdown /opt/apex/verify-static.md
