#!/bin/bash
# Rebuild the authors' code as this report ran it, on a fresh machine, in /work/authors (the path the other
# tools here assume): ischlag/TPR-RNN at a6a4cd2, patched with port.diff (TF 2 / Python 3 / single-task run
# changes, each line marked # TF2: or # RUN:; README "How their code was run"), the three ablated copies of
# ablation/tools/ablation.diff (TPR-RNN-W, -WM, -WB), a venv with tensorflow-cpu 2.21, tprbench's data carve
# (make_data.py) and the CPUID shim (cpuid/shim.c; Intel only: AMD CPUs have no CPUID faulting).
# Usage: MIRROR=<git dir of ischlag/TPR-RNN> bash setup.sh      (~3 min; the venv is most of it)
#   MIRROR defaults to the project's fetch location; elsewhere: git clone --bare https://github.com/ischlag/TPR-RNN
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MIRROR=${MIRROR:-/work/.mirror/ischlag+TPR-RNN/repo}
DIR=/work/authors
mkdir -p "$DIR"/{TPR-RNN,runs,data,data-pik,cpuid}
cd "$DIR"
git --git-dir="$MIRROR" archive a6a4cd2 | tar -x -C TPR-RNN
patch -s -d TPR-RNN -p1 < "$HERE/port.diff"
for v in W WM WB; do                      # ablation.diff holds one section per ablated copy
  rm -rf "TPR-RNN-$v" && cp -r TPR-RNN "TPR-RNN-$v"
  awk -v v="$v" '/^--- /{hdr=$0; next} /^\+\+\+ /{on=($2 == "TPR-RNN-" v "/tpr_rnn_graph.py"); if (on) print hdr} on' \
      "$HERE/../ablation/tools/ablation.diff" | patch -s -d "TPR-RNN-$v" -p1
done
[[ -x venv/bin/python ]] || { python3 -m venv venv && venv/bin/pip install -q tensorflow-cpu==2.21.0 \
    && venv/bin/pip install -q --no-deps tf-keras==2.21.0; }
python3 "$HERE/make_data.py" > runs/make_data.log
gcc -O2 -shared -fPIC -o cpuid/shim.so "$HERE/cpuid/shim.c"
echo "ready: $DIR (TPR-RNN, TPR-RNN-W, -WM, -WB, venv, data); a run: see run_queue3.sh"
