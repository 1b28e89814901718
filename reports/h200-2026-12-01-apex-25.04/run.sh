#!/bin/bash
# The one device call behind this folder, run from the project root on the H200 host:
#   bash reports/h200-2026-12-01-apex-25.04/run.sh <Apex 25.04 tree> <output dir> [cpp-only]
# (run 1: everything; run 2, after the identity fix: cpp-only, steps 3 only)
# Every file it writes comes from the project's own commands (build.py wheel, python -m verify).
set -u
SRC=$1 OUT=$2 ONLY=${3:-}
COMMIT=e13873debc4699d39c6861074b9a3b2a02327f92   # tag 25.04 (the tree has no .git: pass it)
export PYTHONUNBUFFERED=1
W=/tmp/refs-run && mkdir -p $W
{
  python3 -c "import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -2; python3 -m pip --version
  python3 -c "import setuptools; print('setuptools', setuptools.__version__)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; echo "cores $(nproc)"
} > $W/env.txt 2>&1
step() {  # step NAME CMD...: console to $W/NAME.log, exit code as its last line
  local name=$1; shift
  echo "== $name: $*"; "$@" > $W/$name.log 2>&1; local rc=$?
  echo "exit $rc" >> $W/$name.log; echo "   exit $rc"; return $rc
}
if [ "$ONLY" != cpp-only ]; then
# 1. core build as a user runs it: the builder reads setup.py (argv switches, hard-coded compute_70) first
step 1-core python3 build.py wheel --apex-src $SRC --archs 9.0 --out $W/core --install \
  --apex-ref 25.04 --apex-commit $COMMIT
# 2. the same with that check off, so nvcc itself answers; if it compiles, the full verify runs on it
if step 2-core-compile python3 build.py wheel --apex-src $SRC --archs 9.0 --out $W/core2 --install \
  --apex-ref 25.04 --apex-commit $COMMIT --ignore-hardcoded-archs; then
  step 2-verify python3 -m verify --manifest $W/core2/build-manifest.json --json $W/verify-core.json --markdown $W/verify-core.md
fi
grep -n -m 20 -E "error|fatal|FAILED" $W/core2/apex-build.log > $W/2-compile-errors.txt
fi
# 3. C++ only (--cpp_ext: no nvcc): the argv switch passed for real, installed, gated, then the full verify
step 3-cpp python3 build.py wheel --apex-src $SRC --out $W/cpp --flags APEX_CPP_EXT --install \
  --apex-ref 25.04 --apex-commit $COMMIT
step 3-verify python3 -m verify --manifest $W/cpp/build-manifest.json --require= \
  --json $W/verify-cpp.json --markdown $W/verify-cpp.md
for d in core core2 cpp; do
  for f in build-manifest.json apex-build.log verify-static.json verify-static.md; do
    [ -f $W/$d/$f ] && cp $W/$d/$f $W/$d-$f
  done
done
cd $W && tar -czf $OUT/h200-run.tar.gz --exclude='*.whl' *.txt *.log *.json *.md 2>/dev/null
cp $W/env.txt $OUT/; [ -f $W/2-compile-errors.txt ] && cp $W/2-compile-errors.txt $OUT/; tail -n 3 $W/*.log
