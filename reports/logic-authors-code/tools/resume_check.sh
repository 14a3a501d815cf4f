#!/usr/bin/env bash
# Does a resumed run of the authors' logic code (authors-tpru-resume.patch, `--state FILE`) end as the
# uninterrupted one? Three runs on a CPU, through cpu_shim.py, on the first pairs of the data (192
# training and 64 of every other split): 3 epochs straight; 1 epoch; then 3 epochs resumed from the state the 1-epoch run left. It prints each run's
# validation lines and compares the two final states (model, optimiser, RNGs, training order).
# Run with PYTORCH_JIT=0 too: TorchScript's profiling executor compiles its graphs again in a new
# process, which moves float32 rounding (measured: at most 6e-8 on any weight after 3 epochs).
# Usage: resume_check.sh DEST   (DEST: the folder prepare.sh built; TINY is made from its data)
set -euo pipefail
DEST=$(cd "$1" && pwd) PY=${PY:-python3} S=$(mktemp -d)
TINY=$S/tiny
"$PY" - "$DEST/data/preprocessed" "$TINY" <<'PY'
import gzip, json, os, shutil, sys
src, dst = sys.argv[1:3]
data = json.load(gzip.open(os.path.join(src, "data.json.gz"), "rt"))
os.makedirs(dst)
json.dump({k: v[:192] if k == "train" else v[:64] for k, v in data.items()}, open(os.path.join(dst, "data.json"), "w"))
shutil.copy(os.path.join(src, "dict.json"), dst)
PY
cd "$DEST"
A="--bidirectional --cuda --lr 1e-3 --batch_size 64 --d_hidden 64 --n_layers 1 --model_type plain --n_roles 512 --data_path $TINY/"
run() { OMP_NUM_THREADS=1 "$PY" -u cpu_shim.py $A "$@" 2>&1 | grep -E "Dev Acc|Resumed|Error" | tr '\n' ' '; echo; }
echo "straight: $(run --epochs 3 --state "$S/a.pt")"
echo "1 epoch:  $(run --epochs 1 --state "$S/b.pt")"
echo "resumed:  $(run --epochs 3 --state "$S/b.pt")"
"$PY" - "$S/a.pt" "$S/b.pt" <<'PY'
import sys, numpy as np, torch
a, b = (torch.load(p, weights_only=False) for p in sys.argv[1:3])
sa, sb = a["opt"]["state"], b["opt"]["state"]
diff = max((a["model"][k].float() - b["model"][k].float()).abs().max().item() for k in a["model"])
print("epochs", a["epoch"] + 1, b["epoch"] + 1, "| model bitwise", all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]),
      "(largest difference %.1e)" % diff, "| optimiser bitwise", all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i]),
      "| RNGs", all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a["numpy"], b["numpy"])) and torch.equal(a["torch"], b["torch"]),
      "| training order", a["train"] == b["train"])
PY
rm -rf "$S"
