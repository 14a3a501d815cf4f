#!/bin/bash
# Like run_queue.sh, for the "TASK SEED" lines of $QUEUE (default queue3.txt), ONE AT A TIME, one thread each,
# but a run is stopped once its log shows 100% validation accuracy: the test error at the first best validation
# cannot change after that (tprbench's stop_value ends its runs the same way). Such a run's log ends there; a run
# is done when its log reaches STEPS or holds a validation at accuracy 1.0.
# Usage: QUEUE=/work/authors/queue3.txt nohup ./run_queue3.sh > runs/queue3.log 2>&1 &
set -u
cd ${SRC:-/work/authors/TPR-RNN}  # SRC: another copy of their code, e.g. an ablated one (../ablation/)
STEPS=${STEPS:-21300}
QUEUE=${QUEUE:-/work/authors/queue3.txt}
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=1 TF_ENABLE_ONEDNN_OPTS=0
solved() { grep -q '"valid_acc": 1.0,' "$1" 2>/dev/null; }
echo "queue3 driver pid $$ started $(date -Is) on ${QUEUE}"
while true; do
  next=""
  while read -r task seed; do
    [[ -z "$task" || "$task" == \#* ]] && continue
    j="/work/authors/runs/${PREFIX:-}qa${task}-seed${seed}.jsonl"
    if [[ -f "$j" ]] && { grep -q "\"step\": ${STEPS}," "$j" || solved "$j"; }; then continue; fi
    next="$task $seed"; break
  done < "$QUEUE"
  [[ -z "$next" ]] && break
  read -r task seed <<< "$next"
  name="${PREFIX:-}qa${task}-seed${seed}"; j="/work/authors/runs/${name}.jsonl"  # PREFIX: a run-name prefix, e.g. w-
  rm -rf "logs/${name}"; rm -f "$j"
  echo "$(date -Is) start ${name}"
  /work/authors/venv/bin/python train.py "$task" "$name" "$seed" "$STEPS" "$j" /work/authors/data \
      > "/work/authors/runs/${name}.out" 2>&1 < /dev/null &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    if solved "$j"; then kill $pid; wait $pid 2>/dev/null; echo "$(date -Is) ${name}: 100% validation accuracy, stopped"; break; fi
    sleep 15
  done
  wait $pid 2>/dev/null; rc=$?
  echo "$(date -Is) end ${name} rc=${rc}"
  if ! solved "$j" && ! grep -q "\"step\": ${STEPS}," "$j"; then echo "run failed; stopping the queue"; break; fi
done
echo "queue3 driver done $(date -Is)"
