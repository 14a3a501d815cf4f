#!/usr/bin/env bash
# The authors' logic code (shuaitang/TPRU bb5db2c, main_logical.py; changed only where torch 2 requires:
# authors-tpru.patch) on a lent card: their README command with workshop Table 1's 512 roles, SEEDS at
# once, each for RUN_S seconds; every 100 batches their log prints the time. Data: tprbench's generated
# 100k training pairs (the study's cache) and ../shared's validate/test files, through their own
# preprocessing.py (prepare.sh builds the folder). CARD_DRY=1: a CPU dry run on data/small (made by hand).
# STATE_DIR: each seed saves its state there after every epoch and resumes from it on the next call
# (authors-tpru-resume.patch); its log is appended to.
set -uo pipefail
PY=${PY:-python3}
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/authors-out}; mkdir -p "$OUT" trained_models
"$PY" -c "import sklearn" 2>/dev/null || export PYTHONPATH=$PWD/shims/sk${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c "import tqdm" 2>/dev/null || export PYTHONPATH=$PWD/shims/tq${PYTHONPATH:+:$PYTHONPATH}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; nproc
  "$PY" -c "import sys, torch, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__)"
  "$PY" -c "import sklearn; print('sklearn', getattr(sklearn, '__version__', 'shim'), sklearn.__file__)"; echo "PYTHONPATH=${PYTHONPATH:-}"; } 2>&1 | tee "$OUT/env.txt"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
MAIN=main_logical.py DATA=data/preprocessed/
if [ "${CARD_DRY:-0}" = 1 ]; then MAIN=cpu_shim.py DATA=data/small/
else [ -f data/preprocessed/data.json ] || gunzip -k data/preprocessed/data.json.gz; fi
pids=()
for seed in ${SEEDS:-1111 1 2 3}; do
  timeout ${RUN_S:-430} "$PY" -u $MAIN --seed $seed --bidirectional --cuda --lr 1e-3 --epochs 90 --batch_size 64 \
    --d_hidden 64 --n_layers 1 --model_type plain --n_roles 512 --data_path $DATA ${STATE_DIR:+--state $STATE_DIR/seed$seed.pt} \
    >> "$OUT/seed$seed.log" 2>&1 &
  pids+=($!)
done
( sleep 90; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null > "$OUT/smi.txt" ) &
wait "${pids[@]}"
for seed in ${SEEDS:-1111 1 2 3}; do echo "== seed $seed"; grep -E "Dev Acc|^T .*I +[0-9]+00/|Error|error" "$OUT/seed$seed.log" | tail -12; done
cat "$OUT/smi.txt" 2>/dev/null
