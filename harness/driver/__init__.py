"""The study driver, one module per job.

- `runner`: `StudyRunner`, the loop that keeps the cluster busy across a study's cells (Optuna
  search, then seed runs) and records each result in MLflow before telling Optuna;
- `cells`: a cell's state as the driver and `study show` count it (`CellState`, `cell_status`),
  and the driver's side of one dispatched run (`Job`);
- `ray_start`: connecting to a Ray cluster or starting a local one, and how many runs it fits;
- `status`: what `study show` reads (`study_status`) and what optuna-dashboard shows of a cell
  (`describe_optuna_study`): both without starting Ray, torch or MLflow.
"""
