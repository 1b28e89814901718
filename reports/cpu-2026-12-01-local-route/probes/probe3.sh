#!/bin/bash
set -u
export DEBIAN_FRONTEND=noninteractive
echo "deb http://deb.debian.org/debian trixie main contrib non-free" > /etc/apt/sources.list.d/nf.list
apt-get update -qq >/dev/null 2>&1
s=$(date +%s)
apt-get install -y --no-install-recommends nvidia-cuda-toolkit g++-13 2>&1 | grep -E "^Need to get|newly installed|After this" 
echo "== apt install took $(( $(date +%s) - s )) s"
echo "== $(nvcc --version | tail -1); $(command -v nvcc); g++: $(g++ --version | head -1)"
for cc in g++-13 g++-12; do
  if nvcc -ccbin $cc -arch=sm_90 -c probe.cu -o /tmp/p.o >/tmp/n.log 2>&1; then echo "== nvcc 12.4 -ccbin $cc: compile OK"; else echo "== nvcc 12.4 -ccbin $cc: FAILED"; grep -m4 error /tmp/n.log; fi
done
ls /usr/lib/nvidia-cuda-toolkit/bin 2>/dev/null | head; cat /etc/nvcc.profile 2>/dev/null | head -20
du -sh /usr/lib/x86_64-linux-gnu /usr/lib/nvidia-cuda-toolkit 2>/dev/null
