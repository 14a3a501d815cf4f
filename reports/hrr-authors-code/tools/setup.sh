#!/bin/bash
# Build Luo et al.'s own HRR language-model code (j-luo93/lingvo at 7398974, their fork of lingvo of
# 2018-11-20) OUTSIDE this project, ported to run on a CPU under TensorFlow 2.13's compat.v1, with the
# data their configs read. Nothing of it enters this repository: DIR gets the source, a virtual
# environment and the data.
#
#   bash setup.sh DIR [PTB_DIR]     # PTB_DIR: PTB's ptb.*.txt (default ../shared/data/ptb from the repo root)
#
# What is changed, and why each: ../README.md ("How their code was run"). In short, mechanically here:
# trailing NUL bytes removed from 4 files (Python 3 refuses them in source; Python 2 read them as empty
# lines) and `import tensorflow as tf` -> `import tensorflow.compat.v1 as tf` everywhere; by hand,
# port.diff (each changed line marked TF2:, PY3:, NUMPY:, OPS: or CPU:, plus the d = 200 configs, ADDED).
set -euo pipefail
DIR=${1:?usage: setup.sh DIR [PTB_DIR]}
PTB=$(cd "${2:-$(dirname "$0")/../../../../shared/data/ptb}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
LINGVO_GIT=${LINGVO_GIT:-https://github.com/j-luo93/lingvo}
HRR_GIT=${HRR_GIT:-https://github.com/j-luo93/HRR}
mkdir -p "$DIR" && cd "$DIR"

# 1. their source, lingvo/ less its test data (some mirrors lack a checkpoint there, and docs/'s pickle)
if [[ ! -d src ]]; then
  git clone -q --no-checkout "$LINGVO_GIT" src.git
  mkdir src && git -C src.git archive 7398974 lingvo ':!lingvo/core/testdata' | tar -x -C src
  (cd src && git init -q && git add -A && git -c user.name=port -c user.email=port@localhost commit -qm "j-luo93/lingvo 7398974")
  python3 - <<'PY'
import pathlib, re
for p in pathlib.Path("src/lingvo").rglob("*.py"):
    b = p.read_bytes().replace(b"\x00", b"")  # PY3: NUL padding (trainer.py, tasks/lm/{layers,input_generator}.py, params/ptb_word_level.py)
    b = re.sub(rb"(?m)^import tensorflow as tf$", b"import tensorflow.compat.v1 as tf  # TF2: the TF 1.x API through compat.v1", b)
    p.write_bytes(b)
PY
  git -C src apply "$HERE/port.diff"
fi

# 2. the environment: TF 2.13 is the newest TF whose lingvo op library (lingvo 0.14.0's x_ops.so) loads
#    on glibc 2.36; their 2018 ops' Python API matches it but for two adapters (port.diff, OPS:)
if [[ ! -x venv/bin/python ]]; then
  python3.11 -m venv venv
  venv/bin/pip install -q tensorflow-cpu==2.13.1 numpy==1.24.3 scipy==1.11.4 matplotlib==3.8.4 sympy six
  venv/bin/pip install -q --no-deps model-pruning-google-research==0.0.5 graph-compression-google-research==0.0.4
fi
if [[ ! -f src/lingvo/core/ops/x_ops.so ]]; then
  venv/bin/pip download -q --no-deps lingvo==0.14.0 -d wheel
  python3 -c "import zipfile,glob; z=zipfile.ZipFile(glob.glob('wheel/lingvo-0.14.0-*.whl')[0]); [z.extract(n,'wheel/x') for n in z.namelist() if n.startswith('lingvo/core/ops/') and n.endswith('.so')]"
  cp wheel/x/lingvo/core/ops/*.so src/lingvo/core/ops/
fi

# 3. their data (j-luo93/HRR 8fc378d, the fork's HRR submodule): PTB one sentence a line, their vocab.txt;
#    their configs read it from /tmp/lingvo/HRR/data/ptb (params/ptb_word_level.py:40-41)
if [[ ! -d HRR/data/ptb ]]; then
  git clone -q --no-checkout "$HRR_GIT" HRR.git
  mkdir -p HRR/data/ptb
  for f in dev test vocab train; do
    git -C HRR.git show "8fc378d:data/ptb/$f.txt" > "HRR/data/ptb/$f.txt" 2>/dev/null || rm -f "HRR/data/ptb/$f.txt"
  done
  # their dev.txt and test.txt are PTB's valid and test less each line's leading space; where a mirror
  # lacks their train.txt, PTB's train the same way
  [[ -s HRR/data/ptb/train.txt ]] || sed 's/^ //' "$PTB/ptb.train.txt" > HRR/data/ptb/train.txt
fi
mkdir -p /tmp/lingvo && ln -sfn "$PWD/HRR" /tmp/lingvo/HRR
echo "ready: bash $HERE/run.sh $DIR MODEL LOGDIR  (MODEL e.g. lm.ptb_d200.PennHRRWordLevelNF100D200)"
