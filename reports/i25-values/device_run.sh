#!/usr/bin/env bash
# The H200 check of the i25-values change (run from the repo root on the test host: system python3 with a
# CUDA torch, nvcc, the Apex source at .apex-src/apex; no network; results in $OUT, under 5 minutes).
# The builder's environment is now composed from each step's EnvStep and its archs go through one Arch
# value: a real one-arch 9.0 build must still reach nvcc with TORCH_CUDA_ARCH_LIST=9.0, record it in the
# manifest, and put sm_90 SASS in the extensions; a Unicode-digit arch is refused before any compile.
# A plain record: it runs build.py and reads what it wrote, importing nothing from the code.
set -uo pipefail
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/console.log") 2>&1
W=/tmp/i25-values-wheel
rm -rf "$W" "$W-bad" /tmp/i25-values-so
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

echo "=== refused before the build (exit 2 expected)"
python3 build.py wheel --apex-src .apex-src/apex --out "$W-bad" --archs '٩.٠'; echo "exit $?"

echo "=== one-arch 9.0 build"
timeout 280 python3 build.py wheel --apex-src .apex-src/apex --out "$W" --archs 9.0 > "$OUT/build.log" 2>&1
echo "build exit $?"; grep -E "^\[apex-builder\] (parallelism|building|wheel|built modules)" "$OUT/build.log"
cp "$W/build-manifest.json" "$OUT/" 2>/dev/null

echo "=== what the build recorded"
python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
print("arch_list", m["arch_list"], "| expected", len(m["expected_modules"]), "built", len(m["built_modules"]),
      "| max_jobs", m["parallelism"]["max_jobs"], "nvcc_threads", m["parallelism"]["nvcc_threads"])
ok = m["arch_list"] == "9.0" and set(m["expected_modules"]) <= set(m["built_modules"])
print("CHECK manifest", "PASS" if ok else "FAIL")
' "$W/build-manifest.json"

echo "=== what nvcc compiled (amp_C)"
mkdir -p /tmp/i25-values-so && (cd /tmp/i25-values-so && python3 -m zipfile -e "$W"/*.whl .)
so=$(find /tmp/i25-values-so -name 'amp_C*.so' | head -1)
cuobjdump --list-elf "$so" | grep -o 'sm_[0-9a-z]*' | sort | uniq -c
cuobjdump --list-elf "$so" | grep -q 'sm_90' && echo "CHECK sm_90 SASS PASS" || echo "CHECK sm_90 SASS FAIL"
