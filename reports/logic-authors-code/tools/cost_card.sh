#!/usr/bin/env bash
# The cost of the authors' logic code on a card: one seed alone, then 8 at once (run_card.sh each time).
set -uo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/authors-out}
mkdir -p "$OUT/alone" "$OUT/eight"
SEEDS=1111 RUN_S=${ALONE_S:-95} OUT=$OUT/alone bash run_card.sh 2>&1 | tail -8
SEEDS="1 2 3 4 5 6 7 8" RUN_S=${EIGHT_S:-140} OUT=$OUT/eight bash run_card.sh 2>&1 | grep -E "^== seed|^T " | awk '/^== seed/{s=$0; n=0} /^T /{n++; if (n<=3) print s, $0}'
