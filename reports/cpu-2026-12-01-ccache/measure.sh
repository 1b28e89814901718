#!/usr/bin/env bash
# A cold and then a warm image build of the apex-image tier's cell (the README's no-registry command), the
# compiler cache carried between the two only through a plain directory (build.py image --ccache-dir).
# Both builds compile in the Dockerfile's carried ccache mount, whose content the import replaces with DIR's
# (empty before the cold build), and each has its own tag (CELL_ID: the Apex step misses BuildKit's layer
# cache), so neither the daemon's shared ccache mount nor the layer cache can make the second build warm.
# Run from the repository root, under the machine's heavy-build lock:
#   flock /tmp/apex-heavy.lock bash reports/cpu-2026-12-01-ccache/measure.sh
# Writes figures.json, the two build manifests and build.py's output into this folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${MEASURE_WORK:-/tmp/i21-sign-ccache-measure}
rm -rf "$work" && mkdir -p "$work/src"
tar -xzf "${APEX_TEST_FIXTURES:?set APEX_TEST_FIXTURES to the folder of the Apex archives}/apex-6424da3b.tar.gz" -C "$work/src"
carry="$work/carried-ccache"   # what actions/cache would restore and save; empty before the cold build
run_id=$(date +%s)
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
cell=(--cuda 13.0 --torch 2.11.0 --os debian12 --python 3.11 --base-devel apex-toolchain/base:bookworm
      --base-runtime apex-toolchain/base:bookworm --torch-index-url https://pypi.org/simple --archs 9.0
      --target runtime-slim --apex-src "$work/src/apex" --extra-ca "$ca" --progress plain)
for phase in cold warm; do
  tag="i21-sign-ccache-$phase-$run_id"
  start=$(date +%s.%N)
  python3 build.py image "${cell[@]}" --tag "$tag" --ccache-dir "$carry" --ccache-mount carried \
    --out "$work/out-$phase" --logs "$work/logs-$phase" > "$here/build-$phase.txt" 2>&1
  end=$(date +%s.%N)
  echo "$phase $(echo "$end - $start" | bc)" >> "$work/walls.txt"
  cid=$(docker create "$tag")
  docker cp "$cid:/opt/apex/build-manifest.json" "$here/build-manifest-$phase.json"
  docker rm "$cid" > /dev/null
  cp "$work/out-$phase/cells/$tag/result.json" "$here/result-$phase.json"
  grep -E "ccache (import|export) " "$work/logs-$phase/$tag/build.log" | sed 's/^#[0-9]* [0-9.]* //' > "$here/carry-$phase.txt" || true
  docker rmi "$tag" > /dev/null   # 5 GB each: the figures are what this run keeps
done
python3 - "$here" "$work/walls.txt" <<'PY'
import json, sys
from pathlib import Path
here, walls = Path(sys.argv[1]), dict(line.split() for line in Path(sys.argv[2]).read_text().splitlines())
figures = {}
for phase in ("cold", "warm"):
    manifest = json.loads((here / f"build-manifest-{phase}.json").read_text())
    result = json.loads((here / f"result-{phase}.json").read_text())
    figures[phase] = {"build_py_wall_s": round(float(walls[phase]), 1),
                      "image_build_s": result["build"].get("duration_s"),
                      "ccache_carried": result["build"].get("ccache_carried"),
                      "apex_compile_wall_s": manifest["build"].get("wall_s"),
                      "apex_compile_cpu_s": manifest["build"].get("cpu_s"),
                      "ccache_stats": manifest["build"].get("ccache", {}).get("stats"),
                      "wheel_sha256": manifest["build"].get("wheel_sha256")}
(here / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
print(json.dumps(figures, indent=2))
PY
