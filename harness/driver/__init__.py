"""The study driver, one module per job.

- `runner`: `StudyRunner`, the loop that keeps the cluster busy across a study's cells (Optuna
  search, then seed runs) and records each result in MLflow before telling Optuna;
- `cells`: a cell's state as the driver and `study show` count it (`CellState`, `cell_status`),
  and the driver's side of one dispatched run (`Job`);
- `ray_start`: connecting to a Ray cluster or starting a local one, and how many runs it fits;
- `status`: what `study show` reads (`study_status`) and what optuna-dashboard shows of a cell
  (`describe_optuna_study`): both without starting Ray, torch or MLflow;
- `jobs`: `WorkerJob`, the plain-data job the driver sends to a worker, and `TrialRef`;
- `worker`: `run_job`, what runs inside a Ray task (Ray imports it by this path);
- `live`: per-epoch metrics from workers to MLflow while runs train (a small Ray actor);
- `progress`: the live table / progress lines and the epoch-counting ETA (`EpochEta`);
- `ray_watchdog`: a separate process that ends a SIGKILLed driver's local Ray.
"""
