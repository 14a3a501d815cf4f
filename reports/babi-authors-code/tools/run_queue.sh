#!/bin/bash
# Runs the authors' code (TPR-RNN/, ported) on each "TASK SEED" line of queue.txt, ONE AT A TIME, one thread each.
# A run whose JSON-lines already reach the budget is skipped; a partial one is started again from scratch.
# Usage: nohup ./run_queue.sh > runs/queue.log 2>&1 &      (edit queue.txt to add/remove runs; read at each step)
set -u
cd /work/authors/TPR-RNN
STEPS=${STEPS:-21300}
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=1 TF_ENABLE_ONEDNN_OPTS=0
echo "queue driver pid $$ started $(date -Is)"
while true; do
  next=""
  while read -r task seed; do
    [[ -z "$task" || "$task" == \#* ]] && continue
    name="qa${task}-seed${seed}"
    j="/work/authors/runs/${name}.jsonl"
    if [[ -f "$j" ]] && grep -q "\"step\": ${STEPS}," "$j"; then continue; fi
    next="$task $seed"; break
  done < /work/authors/queue.txt
  [[ -z "$next" ]] && break
  read -r task seed <<< "$next"
  name="qa${task}-seed${seed}"
  rm -rf "logs/${name}"; rm -f "/work/authors/runs/${name}.jsonl"
  echo "$(date -Is) start ${name}"
  /work/authors/venv/bin/python train.py "$task" "$name" "$seed" "$STEPS" "/work/authors/runs/${name}.jsonl" /work/authors/data \
      > "/work/authors/runs/${name}.out" 2>&1 < /dev/null
  rc=$?
  echo "$(date -Is) end ${name} rc=${rc}"
  if [[ $rc -ne 0 ]]; then echo "run failed; stopping the queue"; break; fi
done
echo "queue driver done $(date -Is)"
