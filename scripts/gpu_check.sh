#!/usr/bin/env bash
# The GPU checks in one short run, for a lent GPU machine whose image already has torch and Triton
# (docs/benchmarks.md, "TPRU on a GPU"). Everything it prints also goes to $OUT/gpu.log; the
# benchmark rows to $OUT/units_b64.csv and $OUT/units_b256.csv. Each step has its own time limit,
# so one slow step cannot eat the others' time:
#   1. agreement: tests/test_tpru_triton.py on the card (float64/float32 against the CPU loop,
#      outputs and gradients, padded batches);
#   2. `bench units --device cuda` at d = 64…1024, B 64 / T 50 and B 256 / T 100, against cuDNN
#      GRU/LSTM, every TPRU variant and slices=8;
#   3. determinism: the same `train` command twice on the card must give identical numbers;
#   4. end to end: that TPRU logic run on the card against the same run on the machine's CPUs.
# Python packages the image lacks travel as wheels in .whl/ (pydantic and its needs). The logic
# data does not travel (../shared is outside the repo): copy $TPRBENCH_DATA/logical_entailment into an
# ignored .gpudata/ and carry it; without it the validation/test splits are generated, which takes
# longer than the train runs themselves (the 5,000-line `massive` split: ~70 s).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu.log
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
{
    step versions
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    nproc

    step "1. agreement on the card"
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_tpru_triton.py 2>&1 | tail -25

    UNITS="gru;lstm;tpru;tpru-v1;tpru-mod1;tpru-mod2;tpru-mod3;tpru[slices=8]"
    step "2a. bench units, B 64, T 50"
    timeout 100 python3 -m harness.cli bench units --device cuda --dims 64,256,512,1024 --units "$UNITS" \
        --repeats 10 --warmup 3 --csv "$OUT/units_b64.csv" 2>&1 | tail -45

    step "3. determinism: the same train command twice on the card"
    DATA=generated
    [ -d .gpudata/logical_entailment ] && DATA=.gpudata/logical_entailment
    # one --root for every run: the generated training pairs are cached there once
    TRAIN=(python3 -m harness.cli train --task logic --unit tpru --dim 64 --epochs 2 --set train_size=20000
        --data "$DATA" --root /tmp/gpu-root)
    for i in 1 2; do
        timeout 70 "${TRAIN[@]}" --device cuda --run-dir "/tmp/gpu-run-$i" 2>&1 | tail -4
    done
    python3 - <<'EOF'
import json
a, b = (json.load(open(f"/tmp/gpu-run-{i}/result.json")) for i in (1, 2))
def numbers(r):
    hist = [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in r["history"]]
    return hist, r["test"], r["best_valid"]
print("identical" if numbers(a) == numbers(b) else "DIFFERENT", "| seconds", round(a["seconds"], 1), round(b["seconds"], 1),
      "| best valid", a["best_valid"], b["best_valid"], "| reproducible flag", a.get("reproducible"))
EOF

    step "4. the same run on the CPUs"
    timeout 90 "${TRAIN[@]}" --device cpu --run-dir /tmp/cpu-run 2>&1 | tail -4
    python3 -c "
import json; g = json.load(open('/tmp/gpu-run-1/result.json')); c = json.load(open('/tmp/cpu-run/result.json'))
print('GPU', round(g['seconds'], 1), 's; CPU', round(c['seconds'], 1), 's; CPU/GPU', round(c['seconds'] / g['seconds'], 2))"

    step "2b. bench units, B 256, T 100"
    timeout 80 python3 -m harness.cli bench units --device cuda --dims 64,256,512,1024 --seq 100 --batch 256 \
        --units "$UNITS" --repeats 5 --warmup 2 --csv "$OUT/units_b256.csv" 2>&1 | tail -45
    step done
} 2>&1 | tee "$LOG"
