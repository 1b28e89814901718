#!/bin/bash
# In a Debian 13 container: glibc, the OS's packages, and nvcc from NVIDIA's wheels compiling a .cu that includes <cmath>.
set -u
export PIP_CERT=/ca.pem DEBIAN_FRONTEND=noninteractive
echo "== libc: $(ldd --version | head -1)"
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends g++ python3-venv ca-certificates >/dev/null 2>&1
echo "== g++: $(g++ --version | head -1)"
for p in gcc-12 gcc-13 gcc-14 g++-12 g++-13 g++-14 python3.13 python3.12 python3.14 libc6; do echo "== apt $p: $(apt-cache policy $p 2>/dev/null | sed -n 's/ *Candidate: //p')"; done
for series in "12.4 -cu12" "12.9 -cu12" "13.0 " "13.2 "; do
  set -- $series; v=$1; sfx=${2:-}
  python3 -m venv /v$v >/dev/null
  if [ -z "$sfx" ]; then pkgs="nvidia-cuda-nvcc==$v.* nvidia-cuda-crt==$v.* nvidia-nvvm==$v.* nvidia-cuda-cccl==$v.* nvidia-cuda-runtime==$v.*"; else pkgs="nvidia-cuda-nvcc$sfx==$v.* nvidia-cuda-runtime$sfx==$v.* nvidia-cuda-cccl$sfx==$v.*"; fi
  /v$v/bin/pip install -q $pkgs >/tmp/pip$v.log 2>&1 || { echo "== nvcc $v: pip failed"; tail -3 /tmp/pip$v.log; continue; }
  nvcc=$(find /v$v -path '*bin/nvcc' -type f | head -1)
  incs=$(find /v$v -path '*nvidia*' -type d -name include | sed 's/^/-I/' | tr '\n' ' ')
  echo "== nvcc $v: $($nvcc --version | tail -1)"
  if $nvcc -arch=sm_90 -c probe.cu -o /tmp/p$v.o $incs >/tmp/nvcc$v.log 2>&1; then echo "   compile OK"; else echo "   compile FAILED:"; grep -m3 "error" /tmp/nvcc$v.log; fi
done
