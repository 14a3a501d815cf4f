#!/usr/bin/env bash
# The GPU checks in one short run, for a lent GPU machine whose image already has torch and Triton
# (docs/benchmarks.md, "TPRU on a GPU"). Everything it prints also goes to $OUT/gpu.log; the
# benchmark rows to $OUT/units_b64.csv and $OUT/units_b256.csv. Each step has its own time limit,
# so one slow step cannot eat the others' time. Steps, in the order given (default: all):
#   agree        tests/test_tpru_triton.py's CUDA tests: float64/float32 against the CPU loop,
#                outputs and gradients, padded batches (the interpreter tests run in CI)
#   bench64      `bench units --device cuda` at d = 64…1024, B 64 / T 50, against cuDNN GRU/LSTM,
#                every TPRU variant and slices=8
#   determinism  the same `train` command twice on the card must give identical numbers
#   resume       a run SIGKILLed mid-epoch, rerun, must end as the uninterrupted run did
#   detcost      the same run with --no-deterministic: the cost of determinism per epoch
#   cpu          that train run on the machine's CPUs, against the card
#   bench256     bench units at B 256 / T 100
#   profile      Nsight Compute on the TPRU kernels at d = 256 and 512 (grid, occupancy, SM throughput)
#   persist      the persistent kernel (units/tpru_persist.py, issue 46): its CUDA tests, then `bench units
#                --json` at d = 256, 512, 1024 for B 64 / T 50 and B 256 / T 100 against cuDNN GRU, every TPRU
#                variant and slices=8; the JSON (meta: card, driver, CUDA, torch, Triton) goes to
#                $OUT/persist_b64_t50.json and $OUT/persist_b256_t100.json, to be committed under docs/gpu/
#   lm           one language-model epoch at the paper's d = 1024 on WikiText-2 (.gpudata/wikitext2, carried),
#                GRU against TPRU, the first LM_TOKENS train tokens (default 300000) so both fit one call:
#                each run's epoch seconds and validation perplexity from its result.json, and TPRU / GRU
#   crossover    where the persistent kernel starts to win: `bench units --json` at d = 64, 128, 256 with
#                TPRBENCH_TRITON_KERNEL=batch and =persistent (gru, tpru, slices=8), for the selection rule
#                ($OUT/crossover_<kernel>_b<B>.json)
#   tune         the persistent kernel's launch (programs per SM, warps, tiles) at d = 256…1024, B 64 / T 50 and
#                B 256 / T 100, and slices=8, each against cuDNN GRU and checked against the default setting
#                (scripts/gpu_tune_persist.py; TUNE_S, default 240, its budget): $OUT/tune_persist.json
#   pack         one card, many runs: PACK_N (default "4 8") copies of the same logic run at once, as separate
#                processes (what Ray's fractional `gpus` places on one card; Ray is not in the image), against
#                one alone, for `tpru` (d = roles = 64: the resident batch kernel on 4 SMs) and the study's
#                `tpru-v1[roles=512]` (the persistent kernel on every SM): wall time, runs·epochs a minute, and
#                every packed run's numbers against the lone run's ($OUT/pack.json)
# Python packages the image lacks (pydantic) travel as wheels in .whl/, filled by
# scripts/gpu_wheels.sh. The logic data does not travel (../shared is outside the repo): copy
# $TPRBENCH_DATA/logical_entailment's validate and test files into .gpudata/ (ignored) and carry it
# with .whl (the two and the committed tree must stay under the device tool's 64 MiB); without it
# the validation/test splits are generated, which takes longer than the train runs themselves.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu.log
STEPS=${*:-agree bench64 determinism cpu bench256}
if [ -d .whl ] && [ "${GPU_CHECK_WHEELS:-1}" = 1 ]; then  # GPU_CHECK_WHEELS=0: a dry run where the packages are installed
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -3 || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
rm -rf /tmp/gpu-run-1 /tmp/gpu-run-2 /tmp/gpu-full /tmp/gpu-killed /tmp/gpu-nondet /tmp/cpu-run  # a warm machine keeps /tmp: never reuse a finished run
DATA=generated
[ -d .gpudata/logical_entailment ] && DATA=.gpudata/logical_entailment
# one --root for every run: the generated training pairs are cached there once
# per-step time limits (seconds), to fit several steps into one device call: PERSIST_TEST_S (300),
# BENCH_S (240 a bench run), LM_S (60 a run); crossover's batches: GPU_CHECK_BATCHES ("64 256")
# GPU_CHECK_DEVICE/GPU_CHECK_TRAIN_SIZE: a dry run of the train steps on a CPU-only machine;
# GPU_CHECK_DEVICE=cpu also dry-runs persist and crossover (with GPU_CHECK_DIMS, e.g. 16, for their sizes)
DEV=${GPU_CHECK_DEVICE:-cuda}
TRAIN=(python3 -m harness.cli train --task logic --unit tpru --dim 64 --set train_size=${GPU_CHECK_TRAIN_SIZE:-20000}
    --data "$DATA" --root /tmp/gpu-root)
UNITS="gru;lstm;tpru;tpru-v1;tpru-mod1;tpru-mod2;tpru-mod3;tpru[slices=8]"
# compare two runs' result.json: histories (less the timings), test scores, best epoch
same() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(f"{d}/result.json")) for d in sys.argv[1:3])
def numbers(r):
    hist = [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in r["history"]]
    return hist, r["test"], r["best_valid"], r["best_epoch"]
print("identical" if numbers(a) == numbers(b) else "DIFFERENT", "| seconds", round(a["seconds"], 1), round(b["seconds"], 1),
      "| best valid", a["best_valid"], b["best_valid"], "| resumed from", a.get("resumed_from_epoch"), b.get("resumed_from_epoch"),
      "| reproducible", a.get("reproducible"), b.get("reproducible"))
PY
}
# a bench JSON's meta gets the card's identity and the command (docs/gpu/ keeps these files as data)
annotate() {
    python3 - "$@" <<'PY'
import json, os, subprocess, sys
import torch, triton
path, command = sys.argv[1:3]
record = json.load(open(path))
meta = dict(command=command, torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__, python=sys.version.split()[0],
            tpru_triton_kernel=os.environ.get("TPRBENCH_TRITON_KERNEL", "auto"))
if torch.cuda.is_available():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], capture_output=True, text=True)
    card, driver, memory = (s.strip() for s in smi.stdout.splitlines()[0].split(","))
    meta.update(card=card, driver=driver, memory=memory, sms=torch.cuda.get_device_properties(0).multi_processor_count)
else:
    meta.update(card="none (a dry run on the CPU)")
record["meta"].update(meta)
json.dump(record, open(path, "w"), indent=1)
print("meta of", path, {k: meta[k] for k in ("card", "torch", "triton")})
PY
}
# bench units --json into $OUT/$1.json, annotated; the remaining arguments go to bench units
bench_json() {
    local name=$1; shift
    timeout ${BENCH_S:-240} python3 -m harness.cli bench units --device "$DEV" --json "$OUT/$name.json" "$@" 2>&1 | tail -40
    [ -f "$OUT/$name.json" ] && annotate "$OUT/$name.json" "bench units --device $DEV --json $name.json $(printf '%q ' "$@")"
}
epoch_seconds() {
    python3 -c "
import json, statistics, sys
for d in sys.argv[1:]:
    s = [row['epoch_seconds'] for row in json.load(open(d + '/result.json'))['history']]
    print(d, 'epoch seconds', [round(x, 2) for x in s], 'median after the first', round(statistics.median(s[1:] or s), 2))" "$@"
}
{
    step "versions; steps: $STEPS"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    nproc
    for s in $STEPS; do case $s in
    agree)
        step "agreement on the card"
        timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_tpru_triton.py -k cuda 2>&1 | tail -25 ;;
    bench64)
        step "bench units, B 64, T 50"
        timeout 100 python3 -m harness.cli bench units --device cuda --dims 64,256,512,1024 --units "$UNITS" \
            --repeats 10 --warmup 3 --csv "$OUT/units_b64.csv" 2>&1 | tail -45 ;;
    bench256)
        step "bench units, B 256, T 100"
        timeout 80 python3 -m harness.cli bench units --device cuda --dims 64,256,512,1024 --seq 100 --batch 256 \
            --units "$UNITS" --repeats 5 --warmup 2 --csv "$OUT/units_b256.csv" 2>&1 | tail -45 ;;
    determinism)
        step "determinism: the same train command twice on the card"
        for i in 1 2; do timeout 70 "${TRAIN[@]}" --epochs 2 --device "$DEV" --run-dir "/tmp/gpu-run-$i" 2>&1 | tail -4; done
        same /tmp/gpu-run-1 /tmp/gpu-run-2 ;;
    resume)
        step "resume: SIGKILL mid-epoch 2 of 3, rerun, against the uninterrupted run"
        timeout 90 "${TRAIN[@]}" --epochs 3 --device "$DEV" --run-dir /tmp/gpu-full 2>&1 | tail -3
        "${TRAIN[@]}" --epochs 3 --device "$DEV" --run-dir /tmp/gpu-killed >/tmp/gpu-killed.log 2>&1 &
        pid=$!
        for _ in $(seq 600); do [ -f /tmp/gpu-killed/checkpoint.pt ] && break; sleep 0.1; done
        sleep 1.5; kill -9 $pid; wait $pid 2>/dev/null
        echo "killed at $(date -u +%H:%M:%S.%N | cut -c1-12); result.json there: $([ -f /tmp/gpu-killed/result.json ] && echo yes || echo no)"
        tail -3 /tmp/gpu-killed.log
        timeout 90 "${TRAIN[@]}" --epochs 3 --device "$DEV" --run-dir /tmp/gpu-killed 2>&1 | tail -3
        same /tmp/gpu-full /tmp/gpu-killed ;;
    detcost)
        step "the cost of determinism: the same 3-epoch run with --no-deterministic"
        [ -f /tmp/gpu-full/result.json ] || timeout 90 "${TRAIN[@]}" --epochs 3 --device "$DEV" --run-dir /tmp/gpu-full 2>&1 | tail -3
        timeout 90 "${TRAIN[@]}" --epochs 3 --device "$DEV" --no-deterministic --run-dir /tmp/gpu-nondet 2>&1 | tail -3
        epoch_seconds /tmp/gpu-full /tmp/gpu-nondet
        same /tmp/gpu-full /tmp/gpu-nondet ;;
    cpu)
        step "the same run on the CPUs"
        [ -f /tmp/gpu-run-1/result.json ] || timeout 70 "${TRAIN[@]}" --epochs 2 --device "$DEV" --run-dir /tmp/gpu-run-1 2>&1 | tail -4
        timeout 90 "${TRAIN[@]}" --epochs 2 --device cpu --run-dir /tmp/cpu-run 2>&1 | tail -4
        python3 -c "
import json; g = json.load(open('/tmp/gpu-run-1/result.json')); c = json.load(open('/tmp/cpu-run/result.json'))
print('GPU', round(g['seconds'], 1), 's; CPU', round(c['seconds'], 1), 's; CPU/GPU', round(c['seconds'] / g['seconds'], 2))" ;;
    profile)
        # Nsight Compute on the third forward+backward (the first two compile): the kernels' share
        # of the card (SM throughput, occupancy, grid size) where they miss the targets
        for d in 256 512; do
            step "profile: ncu on tpru, d = $d, B 64, T 50"
            timeout 120 ncu --profile-from-start off --kernel-name regex:"(forward|backward)_(tiled|resident|persistent)" --section SpeedOfLight --section LaunchStats --section Occupancy \
                python3 scripts/gpu_profile_tpru.py $d 64 50 2>&1 | grep -v "^==PROF==" | grep -E "^  [a-z_]+|Grid Size|Block Size|Registers|Threads|Waves|SM Busy|Compute \(SM\) Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Shared Memory Config|L2 Cache Throughput|DRAM Throughput|profiled" | head -60
        done ;;
    persist)
        step "persistent kernel: its CUDA tests (realistic sizes, determinism, barrier, co-residency)"
        timeout ${PERSIST_TEST_S:-300} python3 -m pytest -q -p no:cacheprovider tests/test_tpru_persist.py -k cuda 2>&1 | tail -25
        step "persistent kernel: bench units, B 64 / T 50 and B 256 / T 100 (the recurrence column names the kernel)"
        bench_json persist_b64_t50 --dims "${GPU_CHECK_DIMS:-256,512,1024}" --seq 50 --batch 64 --units "$UNITS" --repeats 10 --warmup 3
        bench_json persist_b256_t100 --dims "${GPU_CHECK_DIMS:-256,512,1024}" --seq 100 --batch 256 --units "$UNITS" --repeats 5 --warmup 2 ;;
    crossover)
        for kernel in batch persistent; do for b in ${GPU_CHECK_BATCHES:-64 256}; do
            step "crossover: TPRBENCH_TRITON_KERNEL=$kernel, B $b / T 50"
            TPRBENCH_TRITON_KERNEL=$kernel bench_json "crossover_${kernel}_b$b" --dims "${GPU_CHECK_DIMS:-64,128,256}" --seq 50 --batch $b \
                --units "gru;tpru;tpru[slices=8]" --repeats 5 --warmup 2
        done; done ;;
    lm)
        LMDATA=generated
        [ -d .gpudata/wikitext2 ] && LMDATA=.gpudata/wikitext2
        for unit in gru tpru; do
            step "lm: $unit, d = ${GPU_CHECK_LM_DIM:-1024}, WikiText-2, the first ${LM_TOKENS:-300000} train tokens, one epoch"
            rm -rf /tmp/lm-$unit
            timeout ${LM_S:-60} python3 -m harness.cli train --task lm --unit $unit --dim ${GPU_CHECK_LM_DIM:-1024} --epochs 1 --device "$DEV" \
                --data "$LMDATA" --root /tmp/lm-root --run-dir /tmp/lm-$unit \
                --set max_train_tokens=${LM_TOKENS:-300000} --set max_eval_tokens=${LM_EVAL_TOKENS:-20000} 2>&1 | tail -4
        done
        python3 - <<'PY'
import json, os
rows = {}
for unit in ("gru", "tpru"):
    path = f"/tmp/lm-{unit}/result.json"
    if not os.path.exists(path):
        print(unit, "no result (timed out or failed)"); continue
    r = json.load(open(path)); rows[unit] = r["history"][0]["epoch_seconds"]
    print(unit, "epoch seconds", round(rows[unit], 2), "total", round(r["seconds"], 1), "valid", r["best_valid"])
if len(rows) == 2:
    print("tpru / gru epoch time", round(rows["tpru"] / rows["gru"], 2))
PY
        ;;
    tune)
        step "tune the persistent kernel's launch (programs per SM, warps, tiles)"
        timeout $(( ${TUNE_S:-240} + 90 )) python3 scripts/gpu_tune_persist.py --out "$OUT/tune_persist.json" --device "$DEV" \
            --budget-s ${TUNE_S:-240} ${TUNE_ARGS:-} 2>&1 | tail -80 ;;
    pack)
        for spec in tpru "tpru-v1[roles=512]"; do
            tag=$(echo "$spec" | tr -c 'a-z0-9\n' '-')
            step "pack: $spec alone, then ${PACK_N:-4 8} at once (2 epochs each, 20k pairs, --threads 2)"
            rm -rf /tmp/pack-*-$tag-*
            for n in 1 ${PACK_N:-4 8}; do
                start=$(date +%s.%N)
                for i in $(seq $n); do
                    timeout ${PACK_S:-150} python3 -m harness.cli train --task logic --unit "$spec" --dim 64 --set train_size=${GPU_CHECK_TRAIN_SIZE:-20000} \
                        --data "$DATA" --root /tmp/gpu-root --epochs 2 --threads 2 --device "$DEV" --run-dir /tmp/pack-$n-$tag-$i \
                        >/tmp/pack-$n-$tag-$i.log 2>&1 &
                done
                wait
                python3 - "$n" "$tag" "$spec" "$start" "$(date +%s.%N)" "$OUT/pack.json" <<'PY'
import json, os, sys
n, tag, spec, start, end, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
def numbers(r):
    return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in r["history"]], r["test"], r["best_valid"], r["best_epoch"]
lone_path = f"/tmp/pack-1-{tag}-1/result.json"
lone = json.load(open(lone_path)) if os.path.exists(lone_path) else None
runs = []
for i in range(1, n + 1):
    path = f"/tmp/pack-{n}-{tag}-{i}/result.json"
    if not os.path.exists(path):
        runs.append(dict(run=i, result="missing: " + open(f"/tmp/pack-{n}-{tag}-{i}.log").read()[-300:]))
        continue
    r = json.load(open(path))
    runs.append(dict(run=i, seconds=round(r["seconds"], 2), epoch_seconds=[round(row["epoch_seconds"], 2) for row in r["history"]],
                     best_valid=r["best_valid"], identical_to_lone=None if lone is None else numbers(r) == numbers(lone)))
wall = end - start
done = sum(1 for r in runs if "seconds" in r)
row = dict(spec=spec, packed=n, wall_s=round(wall, 2), runs_done=done, run_epochs_per_min=round(done * 2 * 60 / wall, 2), runs=runs)
record = json.load(open(out)) if os.path.exists(out) else dict(rows=[])
record["rows"].append(row)
json.dump(record, open(out, "w"), indent=1)
same = [r.get("identical_to_lone") for r in runs]
print(f"{spec} x{n}: wall {wall:.1f} s, {done}/{n} done, {row['run_epochs_per_min']} run-epochs/min, identical to the lone run: {same}")
PY
            done
        done ;;
    *) echo "unknown step: $s (steps: agree bench64 bench256 determinism resume detcost cpu profile persist lm crossover tune pack)" ;;
    esac; done
    step done
} 2>&1 | tee "$LOG"
