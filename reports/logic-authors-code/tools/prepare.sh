#!/usr/bin/env bash
# Build DEST (default .gpudata/authors-tpru: ignored, carried to a lent card) from the authors' repository:
# shuaitang/TPRU at bb5db2c (MIRROR: a git directory, e.g. the library's fetch of it), with
# authors-tpru.patch (only what torch 2 requires; the README says why each line), authors-tpru-resume.patch
# (`--state FILE`: save the loop's state after each epoch and resume from it; not the training) and the data through
# their own data/logical-entailment/preprocessing.py: TRAIN, tprbench's generated training pairs (the
# study's cache: <root>/cache/logic/train-for-*-easy-n100000-s0/train.txt), and SHARED's real
# validate/test files. Usage: prepare.sh MIRROR TRAIN SHARED [DEST]
set -euo pipefail
MIRROR=$1 TRAIN=$2 SHARED=$3 DEST=${4:-.gpudata/authors-tpru}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$DEST"; mkdir -p "$DEST"
git --git-dir="$MIRROR" archive bb5db2c main_logical.py classifier.py models data/logical-entailment | tar x -C "$DEST"
(cd "$DEST" && patch -p1 -s < "$HERE/authors-tpru.patch" && patch -p1 -s < "$HERE/authors-tpru-resume.patch")
cp -r "$HERE/shims" "$HERE/run_card.sh" "$HERE/cost_card.sh" "$HERE/cpu_shim.py" "$DEST/"
raw="$DEST/data/logical-entailment/logical-entailment-dataset/data"; mkdir -p "$raw" "$DEST/data/logical-entailment/preprocessed"
cp "$TRAIN" "$raw/train.txt"
for f in validate test_easy test_hard test_big test_massive test_exam; do cp "$SHARED/logical_entailment/$f.txt" "$raw/"; done
(cd "$DEST/data/logical-entailment" && python3 preprocessing.py >/dev/null)
mkdir -p "$DEST/data/preprocessed"
gzip -c "$DEST/data/logical-entailment/preprocessed/data.json" > "$DEST/data/preprocessed/data.json.gz"
cp "$DEST/data/logical-entailment/preprocessed/dict.json" "$DEST/data/preprocessed/"
rm -rf "$DEST/data/logical-entailment/logical-entailment-dataset" "$DEST/data/logical-entailment/preprocessed"
du -sh "$DEST"
