#!/bin/bash
# Does the authors' code (ablated as Table 3) diverge early on qa6 as tprbench's W and W + M did (NaN loss at
# updates 126 and 143, after the 50 warm-up steps)? Their loop to 600 updates, seeds 0-4, one thread, nice 10.
# VARIANTS picks the ablated copies (default W WM; the W + B probes ran with VARIANTS=WB), TASK the task (6),
# STEPS the probe's length (600; the qa18 probes ran 1000, since tprbench's qa18 W + B seed 1 diverged at update 612).
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=1 TF_ENABLE_ONEDNN_OPTS=0 CPUID_L1D_KB=32 LD_PRELOAD=/work/authors/cpuid/shim.so
for v in ${VARIANTS:-W WM}; do for seed in 0 1 2 3 4; do
  name="probe-${v}-qa${TASK:-6}-seed${seed}"
  cd /work/authors/TPR-RNN-$v && rm -rf logs/$name
  nice -n 10 /work/authors/venv/bin/python train.py ${TASK:-6} $name $seed ${STEPS:-600} /work/authors/runs/$name.jsonl /work/authors/data > /work/authors/runs/$name.out 2>&1 < /dev/null
  echo "$(date -Is) $name rc=$? nan-lines=$(grep -c 'cost=nan' /work/authors/runs/$name.out) reinit=$(grep -c 'reinitializing' /work/authors/runs/$name.out) $(tail -n1 /work/authors/runs/$name.jsonl | cut -c1-60)"
done; done
