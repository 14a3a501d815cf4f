#!/bin/bash
# Train one of their configs with their own trainer (lingvo/trainer.py: controller + trainer, locally, on
# the CPU), one TF thread. LINGVO_MAX_STEPS=N stops it after N updates (ptb_d200.py; theirs: 4,000,000).
#   bash run.sh DIR MODEL LOGDIR [trainer flags]      e.g. --job=evaler_dev to evaluate LOGDIR's checkpoints
set -euo pipefail
DIR=$(cd "${1:?usage: run.sh DIR MODEL LOGDIR [flags]}" && pwd); M=${2:?model}; L=${3:?logdir}; shift 3
cd "$DIR/src"
export PYTHONPATH="$DIR/src" TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1
exec "$DIR/venv/bin/python" -m lingvo.trainer --model="$M" --mode=sync --run_locally=cpu --logdir="$L" --logtostderr "$@"
