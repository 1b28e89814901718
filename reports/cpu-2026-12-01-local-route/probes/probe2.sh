#!/bin/bash
set -u
export PIP_CERT=/ca.pem DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends g++ python3-venv ca-certificates >/dev/null 2>&1
for v in 13.0 13.1 13.2; do
  python3 -m venv /v$v >/dev/null
  /v$v/bin/pip install -q "nvidia-cuda-nvcc==$v.*" "nvidia-cuda-crt==$v.*" "nvidia-nvvm==$v.*" "nvidia-cuda-cccl==$v.*" "nvidia-cuda-runtime==$v.*" >/tmp/pip$v.log 2>&1 || { echo "== $v pip failed"; tail -2 /tmp/pip$v.log; continue; }
  nvcc=$(find /v$v -path '*cu13/bin/nvcc' -type f | head -1)
  echo "== nvcc $v: $($nvcc --version | tail -1)"
  if $nvcc -arch=sm_90 -c probe.cu -o /tmp/p$v.o >/tmp/nvcc$v.log 2>&1; then echo "   compile OK"; else echo "   compile FAILED:"; grep -m4 "error" /tmp/nvcc$v.log; fi
done
echo "deb http://deb.debian.org/debian trixie main contrib non-free" > /etc/apt/sources.list.d/nf.list
apt-get update -qq >/dev/null 2>&1
echo "== apt nvidia-cuda-toolkit: $(apt-cache policy nvidia-cuda-toolkit | sed -n 's/ *Candidate: //p')"
apt-cache depends nvidia-cuda-toolkit 2>/dev/null | grep -iE "gcc|g\+\+" | head -3
