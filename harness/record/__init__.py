"""The record: how a study lives in MLflow (and Optuna), written by the driver, read by everyone else.

One module per job, each importing the contract (`contract`: the names, statuses, run keys,
columns and the shapes of a cell run and a trial/seed run; with tasks/result.py) and the run
root's layout (`layout`: `RunRoot`, every file and folder of a study's root):

- `writer`: `Tracker`, the only writer of MLflow runs (idempotent by run key), and the bulk writer;
- `sources`: where a record is read from (plain SQL on a SQL store, the MLflow client otherwise);
- `summary`: the columnar summary of ended runs a read goes through;
- `reader`: `RecordReader`, the frames every reader (report, study show, compare, the driver's
  resume) gets; `TrackedRuns`, a run read by id with its artifacts (transfer, the analyses);
- `guard`: snapshots of a SQLite record, checks and restores;
- `storage`: the Optuna storage (journal or database) and its trial states read without Optuna;
- `lease`: one driver per study and record; `store_check`: a store that never answers, in one line.

This package's `__init__` imports nothing: `study show` imports the parts it reads without
pandas, MLflow or torch (tests/test_lazy_imports.py).
"""
