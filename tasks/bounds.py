"""The project's bounds on numbers, named once: task options (tasks/*/meta.py) and the command line
(harness/commands/support/bounds.py, which imports these) use the same ones.

A number with no upper bound reached the code that used it: `train_size = 99999999999999` was
accepted by the study file and failed (or ran out of memory) only once a worker generated the data.
Each bound is far above anything a run on any machine uses, so a value past it is a typo or a
misunderstanding, refused in one line before anything starts (harness/study/).
"""

from __future__ import annotations

SEED_MAX = 2**32 - 1  # numpy's and torch's largest seed
DIM_MAX = 65536  # a hidden or embedding size
COUNT_MAX = 10**9  # counts of examples, tokens, words, steps
LAYERS_MAX = 64  # stacked layers of a unit
LENGTH_MAX = 100_000  # tokens or statements per sequence (a BPTT window, a story)
BATCH_MAX = 65536  # examples per batch
FOLDS_MAX = 1000  # cross-validation folds
SCALE_MAX = 1e9  # a finite real factor (a loss weight)
