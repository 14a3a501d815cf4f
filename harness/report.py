"""Reports: the papers' tables and figures, regenerated from the MLflow record alone (never by training).

    runs    = load_runs(uri, "logic-ablation")        # one row per trial/seed run
    cells   = load_cells(uri, "logic-ablation")       # one row per cell run
    agg     = aggregate(runs, cells, seeds_wanted=3)  # one row per cell × split: mean ± std, n, failures ...
    print(make_table(agg, "markdown"))                # also "latex" (booktabs) and "csv" (raw numbers)
    write_report(uri, "logic-ablation", Path("reports/logic-ablation"))   # every file + figures

Which seed runs count: phase=final runs whose `tprbench.params_hash` equals the cell's
`tprbench.final_params_hash` (seed runs of an earlier best are ignored) with seed < seeds
wanted. A seed that diverged (status failed) is marked † and a seed not yet run ‡; both get a
footnote with the counts — they are shown, never hidden. Std is the sample std (ddof=1); one
seed has no std ('–').

Columns of `load_runs` (bare names are the `tprbench.*` tags without the prefix):
    run_id, mlflow_status, start_time, study, cell_id, task, arch, unit, dim, input_dim, label,
    run_key, phase, seed, trial, status, reason, params_hash, params_formula, params_total,
    git_commit, host, `param.<name>` (hyperparameters, numbers cast) and `metric.<name>`
    (final metrics at step 0, and the last value of each per-epoch metric).

Determinism: the same record gives byte-identical files — no timestamps, rows sorted by a fixed
key, numbers formatted with fixed formats, figures saved without dates or software versions
and with a fixed `svg.hashsalt`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

TAG = "tprbench."
EXPERIMENT_PREFIX = "tprbench/"
#: Per-run columns that hold integers (tags), cast after loading.
INT_TAGS = ("dim", "input_dim", "seed", "trial", "params_formula", "params_total")
#: Metrics logged once per run at step 0 (everything else is per epoch).
FINAL_PREFIXES = ("best_", "test_")
FINAL_KEYS = ("train_seconds", "params_total", "params_formula")
#: Logical-entailment test splits in the papers' column order.
LOGIC_SPLITS = ("easy", "hard", "big", "massive", "exam")
LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "bpc", "err", "error", "mse")
PERCENT_METRICS = ("acc", "accuracy", "f1", "pearson", "spearman", "corr", "mcc")
BASELINES = {"lstm": 0, "gru": 1}
DASH = "–"


class ReportError(LookupError):
    """No record to report on (no store, unknown study, no cells). Printed as one line, exit 2."""

    user_error = True


# ---------------------------------------------------------------------------------------------
# Reading the record


def _sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite:"):
        return None
    rest = tracking_uri[len("sqlite:"):]
    if rest.startswith("///"):
        rest = rest[3:]
        return Path(rest if rest.startswith("/") else rest)
    return None


def _client(tracking_uri: str):
    """A client on an existing store: never create an empty SQLite file for a wrong --root."""
    path = _sqlite_path(tracking_uri)
    if path is not None and not path.exists():
        raise ReportError(f"no MLflow store at {tracking_uri} ({path} does not exist): "
                          "check --root / --tracking-uri, or run the study first")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _experiment_id(client: Any, tracking_uri: str, study_name: str) -> str:
    name = EXPERIMENT_PREFIX + study_name
    exp = client.get_experiment_by_name(name)
    if exp is None:
        known = sorted(e.name[len(EXPERIMENT_PREFIX):] for e in client.search_experiments()
                       if e.name.startswith(EXPERIMENT_PREFIX))
        import difflib

        close = difflib.get_close_matches(study_name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ReportError(f"study {study_name!r} has no record in {tracking_uri} (no experiment {name!r}){hint} "
                          f"(studies recorded there: {', '.join(known) or 'none'})")
    return exp.experiment_id


def _search(client: Any, experiment_id: str, kind: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{TAG}kind` = '{kind}'",
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _cast(values: list[Any]) -> list[Any] | None:
    """Strings → ints, else floats, else bools, if every non-missing value parses (else None)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    for conv in (int, float):
        try:
            out = [None if v is None else conv(v) for v in values]
        except (TypeError, ValueError):
            continue
        return out
    if all(v in ("True", "False", "true", "false") for v in present):
        return [None if v is None else v.lower() == "true" for v in values]
    return None


def _frame(records: list[dict[str, Any]], columns: Iterable[str]) -> Any:
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for col in columns:
        if col not in df.columns:
            df[col] = None
    return df


def _cast_columns(df: Any, cols: Iterable[str], int_cols: Iterable[str] = ()) -> Any:
    import pandas as pd

    int_cols = set(int_cols)
    for col in cols:
        if col not in df.columns:
            continue
        raw = [None if (v is None or (isinstance(v, float) and math.isnan(v))) else v for v in df[col].tolist()]
        if col in int_cols:
            try:
                df[col] = pd.array([None if v is None else int(float(v)) for v in raw], dtype="Int64")
            except (TypeError, ValueError):
                pass
            continue
        cast = _cast(raw)
        if cast is None:
            continue
        if all(isinstance(v, int) and not isinstance(v, bool) for v in cast if v is not None):
            df[col] = pd.array(cast, dtype="Int64")
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in cast if v is not None):
            df[col] = pd.array([float("nan") if v is None else float(v) for v in cast], dtype="float64")
        else:
            df[col] = pd.array(cast, dtype="boolean")
    return df


RUN_COLUMNS = ("run_id", "mlflow_status", "start_time", "study", "cell_id", "task", "arch", "unit", "dim",
               "input_dim", "label", "run_key", "phase", "seed", "trial", "status", "reason", "params_hash",
               "params_formula", "params_total", "git_commit", "host")


def load_runs(tracking_uri: str, study_name: str) -> Any:
    """One row per recorded trial/seed run of the study (see the module doc for the columns)."""
    client = _client(tracking_uri)
    exp = _experiment_id(client, tracking_uri, study_name)
    records, param_cols = [], set()
    for run in _search(client, exp, "run"):
        if run.info.status not in ("FINISHED", "FAILED", "KILLED"):
            continue  # still being written
        tags = run.data.tags
        rec: dict[str, Any] = {"run_id": run.info.run_id, "mlflow_status": run.info.status,
                               "start_time": run.info.start_time}
        rec.update({k[len(TAG):]: v for k, v in tags.items() if k.startswith(TAG) and k != TAG + "kind"})
        rec.update({f"param.{k}": v for k, v in run.data.params.items()})
        param_cols.update(f"param.{k}" for k in run.data.params)
        rec.update({f"metric.{k}": float(v) for k, v in run.data.metrics.items()})
        records.append(rec)
    df = _frame(records, RUN_COLUMNS)
    df = _cast_columns(df, [*INT_TAGS, *sorted(param_cols)], int_cols=INT_TAGS)
    # One row per run key (the tracker guarantees it; keep the latest if a store was merged by hand).
    df = df.sort_values(["run_key", "start_time", "run_id"], kind="stable")
    df = df.drop_duplicates("run_key", keep="last")
    order = [c for c in RUN_COLUMNS] + sorted(c for c in df.columns if c not in RUN_COLUMNS)
    return df[order].reset_index(drop=True)


CELL_COLUMNS = ("run_id", "cell_id", "task", "arch", "unit", "unit_canonical", "dim", "input_dim", "label",
                "epochs", "data", "task_options", "final_params_hash", "final_params")


def load_cells(tracking_uri: str, study_name: str) -> Any:
    """One row per cell run of the study: what was crossed, and the planned final parameters."""
    client = _client(tracking_uri)
    exp = _experiment_id(client, tracking_uri, study_name)
    records = []
    for run in _search(client, exp, "cell"):
        tags, params = run.data.tags, run.data.params
        rec = {"run_id": run.info.run_id, "start_time": run.info.start_time}
        rec.update({k[len(TAG):]: v for k, v in tags.items() if k.startswith(TAG) and k != TAG + "kind"})
        for key in ("unit_canonical", "epochs", "data", "task_options"):
            rec[key] = params.get(key)
        for key in ("unit", "task", "arch", "dim", "input_dim"):
            rec.setdefault(key, params.get(key))
        records.append(rec)
    df = _frame(records, (*CELL_COLUMNS, "start_time"))
    df = _cast_columns(df, ["dim", "input_dim", "epochs"], int_cols=["dim", "input_dim", "epochs"])
    df = df.sort_values(["cell_id", "start_time", "run_id"], kind="stable").drop_duplicates("cell_id", keep="first")
    return df[list(CELL_COLUMNS)].reset_index(drop=True)


def load_history(tracking_uri: str, study_name: str, run_ids: Iterable[str] | None = None,
                 keys: Iterable[str] | None = None) -> Any:
    """Per-epoch metrics as a long frame: run_id, key, step (= epoch), value; sorted.

    One query per metric key for all runs (the SQL store's bulk history), falling back to
    `get_metric_history` per run and key on other stores. Measured on SQLite, 16 runs × 6 keys:
    bulk 0.02 s, per run and key 0.15 s (≈1.5 ms a call, growing with runs × keys).
    """
    import pandas as pd

    client = _client(tracking_uri)
    if run_ids is None or keys is None:
        exp = _experiment_id(client, tracking_uri, study_name)
        found = [r for r in _search(client, exp, "run") if r.info.status in ("FINISHED", "FAILED", "KILLED")]
        if run_ids is None:
            run_ids = [r.info.run_id for r in found]
        if keys is None:
            wanted = set(run_ids)
            keys = sorted({k for r in found if r.info.run_id in wanted for k in r.data.metrics if _per_epoch(k)})
    run_ids, keys = sorted(set(run_ids)), list(keys)
    rows: list[tuple[str, str, int, float, int]] = []
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    bulk = getattr(store, "get_metric_history_bulk", None)
    for key in keys:
        if bulk is not None:
            for i in range(0, len(run_ids), 500):
                for m in bulk(run_ids[i:i + 500], key, max_results=10**9):
                    rows.append((m.run_id, key, int(m.step), float(m.value), int(m.timestamp)))
        else:
            for run_id in run_ids:
                for m in client.get_metric_history(run_id, key):
                    rows.append((run_id, key, int(m.step), float(m.value), int(m.timestamp)))
    df = pd.DataFrame(rows, columns=["run_id", "key", "step", "value", "timestamp"])
    df = df.sort_values(["run_id", "key", "step", "timestamp"], kind="stable")
    df = df.drop_duplicates(["run_id", "key", "step"], keep="last").drop(columns="timestamp")
    return df.reset_index(drop=True)


def _per_epoch(key: str) -> bool:
    return not key.startswith(FINAL_PREFIXES) and key not in FINAL_KEYS


# ---------------------------------------------------------------------------------------------
# Unit specs → table columns


_SPEC_RE = re.compile(r"^\s*(?P<name>[^\[\]]+?)\s*(?:\[(?P<opts>[^\[\]]*)\])?\s*$")


def parse_unit(spec: str | None) -> tuple[str, dict[str, str]]:
    """`tpru[roles=32,slices=8]` → ('tpru', {'roles': '32', 'slices': '8'}) (no torch import)."""
    m = _SPEC_RE.match(spec or "")
    if not m:
        return spec or "", {}
    opts = {}
    for part in (m.group("opts") or "").split(","):
        if "=" in part:
            k, v = (s.strip() for s in part.split("=", 1))
            opts[k] = v
    return m.group("name"), opts


def _int_or_none(text: Any) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def unit_columns(unit: str, canonical: str | None) -> dict[str, Any]:
    """unit_name, roles, slices (spec first, then defaults from the canonical spec), and the spec
    without the roles option (the logic table shows roles in its own column)."""
    name, opts = parse_unit(unit)
    _, canon = parse_unit(canonical)
    roles = _int_or_none(opts.get("roles", canon.get("roles")))
    slices = _int_or_none(opts.get("slices", canon.get("slices")))
    rest = {k: v for k, v in opts.items() if k != "roles"}
    short = name + (f"[{','.join(f'{k}={v}' for k, v in rest.items())}]" if rest else "")
    return {"unit_name": name, "roles": roles, "slices": slices, "unit_short": short}


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN / pd.NA
    except (TypeError, ValueError):
        return True


def _sort_key(row: dict[str, Any]) -> tuple:
    def num(v: Any) -> float:
        return float("inf") if _is_missing(v) else float(v)

    return (str(row.get("task_label") or ""), str(row.get("arch") or ""), num(row.get("dim")), num(row.get("input_dim")),
            BASELINES.get(row.get("unit_name"), 2), str(row.get("unit_name") or ""), num(row.get("roles")),
            num(row.get("slices")), str(row.get("unit") or ""), str(row.get("cell_id")))


def metric_direction(metric: str) -> str:
    return "minimize" if metric.lower() in LOWER_IS_BETTER else "maximize"


# ---------------------------------------------------------------------------------------------
# Aggregation


def _splits_of(runs: Any, metric: str) -> list[tuple[str, str]]:
    """(display name, metric column) of every test split seen for this metric, papers' order first."""
    pat = re.compile(rf"^metric\.test_(?P<split>.+)_{re.escape(metric)}$")
    found = {}
    for col in runs.columns:
        m = pat.match(col)
        if m and runs[col].notna().any():
            split = m.group("split")
            found[split[5:] if split.startswith("test_") else split] = col
    logic = [s for s in LOGIC_SPLITS if s in found]
    return [(s, found[s]) for s in logic + sorted(s for s in found if s not in LOGIC_SPLITS)]


def _metric_of(runs: Any) -> str | None:
    counts: dict[str, int] = {}
    for col in runs.columns:
        if col.startswith("metric.best_valid_"):
            counts[col[len("metric.best_valid_"):]] = int(runs[col].notna().sum())
    counts = {k: v for k, v in counts.items() if v}
    return min(counts, key=lambda k: (-counts[k], k)) if counts else None


def infer_seeds(runs: Any) -> int:
    """Seeds wanted when no study file says: the highest final seed recorded + 1 (at least 1)."""
    final = runs[runs["phase"] == "final"]["seed"].dropna()
    return int(final.max()) + 1 if len(final) else 1


def counted_runs(runs: Any, cells: Any, seeds_wanted: int | None = None, any_params: bool = False) -> Any:
    """The final-phase runs that count for each cell: current params hash, seed < seeds wanted.

    `any_params=True` (used for commit comparisons, where the runs are filtered by commit): when
    no run has the cell's current hash, take the hash most of its final runs have.
    """
    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    final = runs[(runs["phase"] == "final") & runs["seed"].notna() & (runs["seed"] < seeds_wanted)]
    keep = []
    hashes = dict(zip(cells["cell_id"], cells["final_params_hash"]))
    for cid, group in final.groupby("cell_id", sort=True):
        h = hashes.get(cid)
        h = None if _is_missing(h) else h
        if any_params and (h is None or not (group["params_hash"] == h).any()) and len(group):
            counts = group["params_hash"].value_counts()
            h = sorted(counts.index[counts == counts.max()])[-1]
        if h is not None:
            keep.append(group[group["params_hash"] == h])
    if not keep:
        return final.iloc[0:0]
    import pandas as pd

    out = pd.concat(keep)
    return out.sort_values(["cell_id", "seed", "run_key"], kind="stable").reset_index(drop=True)


def aggregate(runs: Any, cells: Any, seeds_wanted: int | None = None, *, any_params: bool = False) -> Any:
    """One row per cell × split: mean, std (ddof=1), n; seeds finished/failed/missing; parameter
    counts; best hyperparameters; search statistics. Rows sorted by a fixed key (`order`)."""
    import numpy as np
    import pandas as pd

    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    counted = counted_runs(runs, cells, seeds_wanted, any_params)
    cell_rows = [dict(r) for r in cells.to_dict("records")]
    for r in cell_rows:
        r.update(unit_columns(r.get("unit") or "", r.get("unit_canonical")))
        label = r.get("label") or ""
        r["task_label"] = label.split("/", 1)[0] if "/" in label else r.get("task")
    cell_rows.sort(key=_sort_key)

    # The table metric and its splits, per task label.
    by_task: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for task_label in sorted({r["task_label"] or "" for r in cell_rows}):
        ids = {r["cell_id"] for r in cell_rows if (r["task_label"] or "") == task_label}
        task_runs = runs[runs["cell_id"].isin(ids)]
        metric = _metric_of(task_runs) or "acc"
        by_task[task_label] = (metric, [("valid", f"metric.best_valid_{metric}")] + _splits_of(task_runs, metric))

    out = []
    for order, cell in enumerate(cell_rows):
        cid = cell["cell_id"]
        metric, splits = by_task[cell["task_label"] or ""]
        mine = runs[runs["cell_id"] == cid]
        cur = counted[counted["cell_id"] == cid]
        finished = cur[cur["status"] == "finished"]
        failed = cur[cur["status"] != "finished"]
        present = {int(s) for s in cur["seed"]}
        missing = [s for s in range(seeds_wanted) if s not in present]
        search = mine[mine["phase"] == "search"]
        best_col = f"metric.best_valid_{metric}"
        s_fin = search[search["status"] == "finished"]
        best_search, best_trial = float("nan"), None
        if best_col in s_fin.columns and s_fin[best_col].notna().any():
            vals = s_fin[[best_col, "trial"]].dropna(subset=[best_col]).sort_values("trial", kind="stable")
            idx = vals[best_col].idxmin() if metric_direction(metric) == "minimize" else vals[best_col].idxmax()
            best_search, best_trial = float(vals.loc[idx, best_col]), vals.loc[idx, "trial"]
        counts_src = pd.concat([cur, mine]) if len(cur) else mine

        def first(col: str) -> Any:
            for c in (col, f"metric.{col}"):
                if c in counts_src.columns:
                    v = counts_src[c].dropna()
                    if len(v):
                        return int(v.iloc[0])
            return None

        commits = sorted({str(c) for c in pd.concat([cur["git_commit"], search["git_commit"]]).dropna()})
        reasons = [f"seed {int(s)}: {r}" for s, r in zip(failed["seed"], failed["reason"]) if not _is_missing(r)]
        base = {
            "order": order, "cell_id": cid, "task": cell.get("task"), "task_label": cell["task_label"],
            "label": cell.get("label"), "arch": cell.get("arch"), "dim": cell.get("dim"), "input_dim": cell.get("input_dim"),
            "unit": cell.get("unit"), "unit_short": cell["unit_short"], "unit_name": cell["unit_name"],
            "unit_canonical": cell.get("unit_canonical"), "roles": cell["roles"], "slices": cell["slices"],
            "metric": metric, "seeds_wanted": seeds_wanted, "seeds_finished": len(finished),
            "seeds_failed": len(failed), "seeds_missing": len(missing),
            "failed_seeds": ",".join(str(int(s)) for s in failed["seed"]), "missing_seeds": ",".join(map(str, missing)),
            "failure_reasons": "; ".join(reasons),
            "params_formula": first("params_formula"), "params_total": first("params_total"),
            "final_params": None if _is_missing(cell.get("final_params")) else cell.get("final_params"),
            "final_params_hash": None if _is_missing(cell.get("final_params_hash")) else cell.get("final_params_hash"),
            "trials": len(search), "trials_finished": len(s_fin),
            "trials_pruned": int((search["status"] == "pruned").sum()), "trials_failed": int((search["status"] == "failed").sum()),
            "best_search": best_search, "best_trial": None if _is_missing(best_trial) else int(best_trial),
            "git_commits": ",".join(commits),
        }
        for split_order, (split, col) in enumerate(splits):
            vals = finished[col].dropna().to_numpy(dtype=float) if col in finished.columns else np.array([])
            n = len(vals)
            mean = float(np.mean(vals)) if n else float("nan")
            std = float(np.std(vals, ddof=1)) if n > 1 else float("nan")
            out.append({**base, "split": split, "split_order": split_order, "metric_key": col[len("metric."):], "mean": mean, "std": std, "n": n})
    df = pd.DataFrame(out)
    if len(df):
        for col in ("dim", "input_dim", "roles", "slices", "params_formula", "params_total", "best_trial"):
            df[col] = pd.array([None if _is_missing(v) else int(v) for v in df[col]], dtype="Int64")
    return df


# ---------------------------------------------------------------------------------------------
# Layout: one section per task, the papers' columns


def layout_of(task: str | None) -> str:
    t = (task or "").lower()
    if t.startswith("logic"):
        return "logic"
    if t.startswith(("nli", "mnli", "snli", "qnli")):
        return "nli"
    if t.startswith(("lm", "wikitext", "ptb", "language")):
        return "lm"
    if t.startswith(("transfer", "senteval")):
        return "senteval"
    return "generic"


def metric_scale(metric: str) -> tuple[float, int, str]:
    """(multiplier, decimals, description) for displaying a metric."""
    m = metric.lower()
    if m in PERCENT_METRICS:
        return 100.0, 1, {"acc": "accuracy (%)", "accuracy": "accuracy (%)"}.get(m, f"{m} (×100)")
    if m in ("ppl", "perplexity"):
        return 1.0, 1, "perplexity (lower is better)"
    return 1.0, 3, m + (" (lower is better)" if metric_direction(m) == "minimize" else "")


def _num(v: Any, scale: float, digits: int) -> str:
    if _is_missing(v) or (isinstance(v, float) and math.isnan(v)):
        return DASH
    x = round(float(v) * scale, digits)
    return f"{x + 0.0:.{digits}f}"  # + 0.0: never print -0.0


def format_cell(mean: Any, std: Any, n: int, metric: str) -> str:
    """'87.3 ± 1.2'; one seed: '87.3 ± –'; no finished seed: '–'."""
    if not n:
        return DASH
    scale, digits, _ = metric_scale(metric)
    return f"{_num(mean, scale, digits)} ± {_num(std, scale, digits)}"


def _count(v: Any) -> str:
    return DASH if _is_missing(v) else f"{int(v):,}"


@dataclass
class Section:
    """One rendered table: plain-text cells with markers (renderers escape for their format)."""

    task_label: str
    layout: str
    title: str
    columns: list[str]
    align: list[str]  # "l" | "r" per column
    rows: list[list[str]]
    footnotes: list[str] = field(default_factory=list)
    search_columns: list[str] = field(default_factory=list)
    search_rows: list[list[str]] = field(default_factory=list)


def sections(df: Any) -> list[Section]:
    """The aggregated frame laid out like the papers, one section per task (by task label)."""
    out: list[Section] = []
    if df is None or not len(df):
        return out
    df = df.sort_values(["order", "split_order"], kind="stable")
    for task_label in sorted(df["task_label"].fillna("").unique()):
        part = df[df["task_label"].fillna("") == task_label]
        first = part.iloc[0]
        layout = layout_of(first["task"])
        metric = str(first["metric"])
        splits = list(dict.fromkeys(part["split"]))
        cells = [g for _, g in part.groupby("order", sort=True)]
        show_input = any(int(c.iloc[0]["input_dim"]) != int(c.iloc[0]["dim"]) for c in cells
                         if not _is_missing(c.iloc[0]["input_dim"]) and not _is_missing(c.iloc[0]["dim"]))
        has_roles = layout == "logic" or any(not _is_missing(c.iloc[0]["roles"]) for c in cells)
        keys = ["arch", "d"] + (["d'"] if show_input else []) + ["unit"] + (["roles"] if has_roles else [])
        split_names = {"valid": "valid"}
        if layout == "lm":
            split_names = {s: f"{s} ppl" if metric in ("ppl", "perplexity") else s for s in splits}
        columns = keys + [split_names.get(s, s) for s in splits] + ["# params", "# params (total)", "seeds"]
        align = ["l" if k in ("arch", "unit") else "r" for k in keys] + ["r"] * (len(columns) - len(keys))
        rows, notes, srows = [], [], []
        for c in cells:
            r = c.iloc[0]
            unit = r["unit_short"] if has_roles else r["unit"]
            marks = ("†" if r["seeds_failed"] else "") + ("‡" if r["seeds_missing"] else "")
            vals = {s: format_cell(g["mean"], g["std"], int(g["n"]), metric)
                    for s, g in ((row["split"], row) for _, row in c.iterrows())}
            row = [str(r["arch"]), _count(r["dim"])] + ([_count(r["input_dim"])] if show_input else [])
            row += [f"{unit}{marks}"] + ([_count(r["roles"])] if has_roles else [])
            row += [vals.get(s, DASH) for s in splits]
            row += [_count(r["params_formula"]), _count(r["params_total"]), f"{r['seeds_finished']}/{r['seeds_wanted']}"]
            rows.append(row)
            where = f"{r['label']} ({r['cell_id']})"
            if r["seeds_failed"]:
                why = f"; {r['failure_reasons'][:160]}" if r["failure_reasons"] else ""
                notes.append(f"† {where}: {r['seeds_failed']} of {r['seeds_wanted']} seeds diverged "
                             f"(failed {_seeds(r['failed_seeds'])}{why}); mean over the {r['seeds_finished']} finished")
            if r["seeds_missing"]:
                state = "search not finished" if _is_missing(r["final_params_hash"]) else "not yet run"
                notes.append(f"‡ {where}: {r['seeds_missing']} of {r['seeds_wanted']} seeds missing "
                             f"({_seeds(r['missing_seeds'])}: {state})")
            params = r["final_params"]
            try:
                params = ", ".join(f"{k}={_short(v)}" for k, v in sorted(json.loads(params).items())) if params else DASH
            except (TypeError, ValueError):
                params = str(params)
            srows.append([str(r["label"]), f"{r['trials']}", f"{r['trials_pruned']}", f"{r['trials_failed']}",
                          _num(r["best_search"], *metric_scale(metric)[:2]), _count(r["best_trial"]), params])
        _, _, desc = metric_scale(metric)
        title = f"{task_label}: {desc}, mean ± std over seeds; valid = the best epoch's validation score"
        out.append(Section(task_label, layout, title, columns, align, rows, notes,
                           ["cell", "trials", "pruned", "failed", f"best valid {metric}", "best trial", "best hyperparameters"],
                           srows))
    return out


def _seeds(text: str) -> str:
    return ("seeds " if "," in text else "seed ") + text.replace(",", ", ")


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# ---------------------------------------------------------------------------------------------
# Rendering


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "%": r"\%", "&": r"\&",
                "#": r"\#", "$": r"\$", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_SYMBOLS = {"±": r"$\pm$", "†": r"\textsuperscript{\dag}", "‡": r"\textsuperscript{\ddag}", "–": "--",
                "×": r"$\times$", "'": "'"}


def tex_escape(text: str) -> str:
    out = "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)
    for sym, rep in _TEX_SYMBOLS.items():
        out = out.replace(sym, rep)
    return out


def _header(fmt: str, header: Iterable[str] | None) -> list[str]:
    prefix = {"markdown": "<!-- {} -->", "latex": "% {}", "csv": "# {}"}[fmt]
    return [prefix.format(h.replace("-->", "-- >")) for h in (header or [])]


def _fmt(fmt: str) -> str:
    f = fmt.lower()
    f = {"md": "markdown", "tex": "latex"}.get(f, f)
    if f not in ("markdown", "latex", "csv"):
        raise ValueError(f"unknown table format {fmt!r}: use markdown, latex or csv")
    return f


def make_table(df: Any, fmt: str, header: Iterable[str] | None = None) -> str:
    """Render the aggregated frame as Markdown, LaTeX (booktabs) or CSV (raw numbers), with the
    `header` lines as comments at the top. Deterministic: same frame → same text."""
    fmt = _fmt(fmt)
    lines = _header(fmt, header)
    if fmt == "csv":
        return "\n".join(lines + [wide_frame(df).to_csv(index=False, float_format="%.10g", lineterminator="\n")]).rstrip("\n") + "\n"
    for sec in sections(df):
        if fmt == "markdown":
            lines += [f"## {sec.task_label}", "", sec.title, ""]
            lines.append("| " + " | ".join(_md_escape(c) for c in sec.columns) + " |")
            lines.append("|" + "|".join(":---" if a == "l" else "---:" for a in sec.align) + "|")
            lines += ["| " + " | ".join(_md_escape(v) for v in row) + " |" for row in sec.rows]
            if sec.footnotes:
                lines += [""] + [f"- {_md_escape(n)}" for n in sec.footnotes]
            lines += ["", f"### {sec.task_label}: search", ""]
            lines.append("| " + " | ".join(sec.search_columns) + " |")
            lines.append("|" + "|".join([":---"] + ["---:"] * (len(sec.search_columns) - 2) + [":---"]) + "|")
            lines += ["| " + " | ".join(_md_escape(v) for v in row) + " |" for row in sec.search_rows]
            lines.append("")
        else:
            lines += [f"% {sec.task_label}", r"\begin{table}[t]", r"\centering", r"\small",
                      r"\begin{tabular}{" + "".join(sec.align) + "}", r"\toprule"]
            lines.append(" & ".join(tex_escape(c) for c in sec.columns) + r" \\")
            lines.append(r"\midrule")
            prev_arch = None
            for row in sec.rows:
                if prev_arch is not None and row[0] != prev_arch:
                    lines.append(r"\midrule")
                prev_arch = row[0]
                lines.append(" & ".join(tex_escape(v) for v in row) + r" \\")
            lines.append(r"\bottomrule")
            lines.append(r"\end{tabular}")
            caption = tex_escape(sec.title)
            if sec.footnotes:
                caption += " " + " ".join(tex_escape(n) + "." for n in sec.footnotes)
            lines += [r"\caption{" + caption + "}", r"\label{tab:" + re.sub(r"[^A-Za-z0-9]+", "-", sec.task_label) + "}",
                      r"\end{table}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def wide_frame(df: Any) -> Any:
    """One row per cell with raw numbers: `<split>_mean`, `<split>_std`, `<split>_n` per split."""
    import pandas as pd

    keys = ["cell_id", "label", "task", "arch", "dim", "input_dim", "unit", "unit_canonical", "roles", "slices",
            "metric", "seeds_wanted", "seeds_finished", "seeds_failed", "seeds_missing", "failed_seeds",
            "missing_seeds", "params_formula", "params_total", "final_params", "git_commits"]
    if df is None or not len(df):
        return pd.DataFrame(columns=keys)
    df = df.sort_values(["order", "split_order"], kind="stable")
    splits = list(dict.fromkeys(["valid"] + list(df["split"])))
    rows = []
    for _, g in df.groupby("order", sort=True):
        r = g.iloc[0]
        row = {k: r[k] for k in keys}
        by = {s["split"]: s for _, s in g.iterrows()}
        for s in splits:
            if s in by:
                row.update({f"{s}_mean": by[s]["mean"], f"{s}_std": by[s]["std"], f"{s}_n": int(by[s]["n"])})
        rows.append(row)
    out = pd.DataFrame(rows)
    cols = keys + [f"{s}_{k}" for s in splits for k in ("mean", "std", "n") if f"{s}_{k}" in out.columns]
    out = out[cols]
    for c in [c for c in cols if c.endswith("_n")] + ["dim", "input_dim", "roles", "slices", "params_formula", "params_total"]:
        out[c] = pd.array([None if _is_missing(v) else int(v) for v in out[c]], dtype="Int64")
    return out


def search_frame(df: Any) -> Any:
    """Search-phase statistics, one row per cell."""
    import pandas as pd

    cols = ["cell_id", "label", "metric", "trials", "trials_finished", "trials_pruned", "trials_failed",
            "best_search", "best_trial", "final_params_hash", "final_params"]
    if df is None or not len(df):
        return pd.DataFrame(columns=cols)
    out = df.sort_values(["order"], kind="stable").drop_duplicates("cell_id")[cols].reset_index(drop=True)
    return out.rename(columns={"best_search": "best_valid"})


# ---------------------------------------------------------------------------------------------
# Whole reports


def resolve_study(study: str) -> tuple[str, int | None, list[str] | None, str | None]:
    """STUDY argument → (name, seeds wanted, cell ids to restrict to, note).

    A .toml file is read with harness.study (its cells restrict the rows); if that module is
    missing or the file does not validate here (e.g. a data path's env var is unset), only
    `[study].name` and `seeds` are read with tomllib. Anything else is a study name.
    """
    path = Path(study)
    if not (study.endswith(".toml") or path.is_file()):
        return study, None, None, None
    if not path.is_file():
        raise ReportError(f"study file {study} not found (give a study file or a recorded study's name)")
    note = None
    try:
        from harness.study import expand, load_study

        st = load_study(path)
        section = getattr(st, "study", st)
        return section.name, int(section.seeds), [c.id for c in expand(st)], None
    except ImportError:
        note = "harness.study is not available: reporting every cell recorded for the study"
    except Exception as exc:  # a study that does not validate here still names its record
        if not getattr(type(exc), "user_error", False):
            raise
        note = f"{study} does not validate here ({str(exc).splitlines()[0]}); reporting every cell recorded for the study"
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReportError(f"{study}: cannot read the study file: {exc}") from None
    section = data.get("study", {}) if isinstance(data.get("study"), dict) else {}
    name = section.get("name") or path.stem
    seeds = section.get("seeds")
    return str(name), (int(seeds) if isinstance(seeds, int) else 3), None, note


def load_record(tracking_uri: str, study_name: str, cell_ids: Iterable[str] | None = None) -> tuple[Any, Any]:
    """(runs, cells) of a study, restricted to `cell_ids` when given. Raises ReportError if empty."""
    runs = load_runs(tracking_uri, study_name)
    cells = load_cells(tracking_uri, study_name)
    if cell_ids is not None:
        ids = set(cell_ids)
        cells = cells[cells["cell_id"].isin(ids)].reset_index(drop=True)
        runs = runs[runs["cell_id"].isin(ids)].reset_index(drop=True)
    if not len(cells):
        raise ReportError(f"study {study_name!r} in {tracking_uri}: no cells recorded"
                          + (" for the cells of this study file" if cell_ids is not None else ""))
    return runs, cells


def provenance(command: str, agg: Any) -> list[str]:
    commits = sorted({c for cs in (agg["git_commits"] if len(agg) else []) for c in str(cs).split(",") if c})
    return [f"Regenerate with: {command}",
            f"From the MLflow record only; runs from git commit(s): {', '.join(commits) or 'none recorded'}"]


def write_report(tracking_uri: str, study_name: str, out_dir: Path, *, seeds_wanted: int | None = None,
                 cell_ids: Iterable[str] | None = None, command: str | None = None, bench_csv: str | Path | None = None,
                 figures: bool = True) -> dict[str, Any]:
    """Write table.md, table.tex, table.csv, search.csv and the figures under `out_dir`.

    Returns {"agg": frame, "files": [paths], "sections": [...], "notes": [...]}.
    """
    from . import figures as figs

    runs, cells = load_record(tracking_uri, study_name, cell_ids)
    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    agg = aggregate(runs, cells, seeds_wanted)
    command = command or f"tprbench report {shlex.quote(study_name)} --tracking-uri {shlex.quote(tracking_uri)}"
    header = provenance(command, agg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []

    def write(name: str, text: str) -> None:
        path = out_dir / name
        path.write_text(text, encoding="utf-8", newline="\n")
        files.append(path)

    write("table.md", make_table(agg, "markdown", [f"tprbench report: study {study_name}"] + header))
    write("table.tex", make_table(agg, "latex", [f"tprbench report: study {study_name}; needs \\usepackage{{booktabs}}"] + header))
    write("table.csv", make_table(agg, "csv", header))
    search = search_frame(agg)
    write("search.csv", "\n".join(_header("csv", header)) + "\n" + search.to_csv(index=False, float_format="%.10g", lineterminator="\n"))
    notes: list[str] = []
    if figures:
        counted = counted_runs(runs, cells, seeds_wanted)
        used = counted[counted["status"] == "finished"]
        history = load_history(tracking_uri, study_name, run_ids=list(used["run_id"]) + list(runs["run_id"]),
                               keys=sorted({*_history_keys(runs), "epoch_seconds"}))
        made, notes = figs.make_figures(agg, runs, used, history, out_dir, header, bench_csv=bench_csv)
        files += made
    return {"agg": agg, "files": files, "sections": sections(agg), "notes": notes, "runs": runs, "cells": cells}


def _history_keys(runs: Any) -> list[str]:
    keys = {c[len("metric."):] for c in runs.columns if c.startswith("metric.")}
    return sorted(k for k in keys if _per_epoch(k) and (k.startswith(("train_", "valid_")) or k == "epoch_seconds"))


# ---------------------------------------------------------------------------------------------
# Console


def rich_tables(secs: list[Section]) -> list[Any]:
    """rich Tables (and footnote texts) for the console; unit specs escaped (they hold brackets)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    for sec in secs:
        table = Table(title=escape(sec.title), title_justify="left")
        for col, a in zip(sec.columns, sec.align):
            table.add_column(escape(col), justify="left" if a == "l" else "right")
        for row in sec.rows:
            table.add_row(*(escape(v) for v in row))
        out.append(table)
        for note in sec.footnotes:
            out.append(Text(note, style="yellow"))
    return out


def print_sections(secs: list[Section], console: Any) -> None:
    """Tables at their natural width even on a narrow (or non-terminal) console: a row per line."""
    from rich.table import Table

    for item in rich_tables(secs):
        if isinstance(item, Table):
            _print_wide(console, item)
        else:
            console.print(item, soft_wrap=True)


def _print_wide(console: Any, table: Any) -> None:
    """Print at the table's natural width (rich caps `print(width=)` at the console's width)."""
    from rich.measure import Measurement

    natural = min(Measurement.get(console, console.options.update_width(1000), table).maximum, 1000)
    saved = getattr(console, "_width", None)
    if natural > console.width:
        console.width = natural
    try:
        console.print(table)
    finally:
        console._width = saved


def cells_frame(cells: Iterable[Any], study_name: str | None = None) -> Any:
    """Cell objects (harness.study.Cell) → the frame `load_cells` returns (no final params)."""
    import pandas as pd

    rows = [{"run_id": None, "cell_id": c.id, "task": c.task, "arch": c.arch, "unit": c.unit,
             "unit_canonical": getattr(c, "unit_canonical", None), "dim": c.dim, "input_dim": c.input_dim,
             "label": c.label, "epochs": getattr(c, "epochs", None), "data": getattr(c, "data", None),
             "task_options": json.dumps(getattr(c, "task_options", {}), sort_keys=True, default=str),
             "final_params_hash": None, "final_params": None} for c in cells]
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


def print_summary(study: Any, cells: list[Any], tracking_uri: str, console: Any) -> Any:
    """The aggregated table of these cells, printed to the console (end of `tprbench run`).

    Cells with no record yet are shown with every seed missing. Returns the aggregated frame.
    """
    import pandas as pd

    section = getattr(study, "study", study)
    name, seeds = section.name, int(section.seeds)
    ids = {c.id for c in cells}
    try:
        runs, recorded = load_runs(tracking_uri, name), load_cells(tracking_uri, name)
    except ReportError:  # nothing recorded yet
        runs, recorded = _frame([], RUN_COLUMNS), cells_frame([])
    runs = runs[runs["cell_id"].isin(ids)].reset_index(drop=True)
    recorded = recorded[recorded["cell_id"].isin(ids)].reset_index(drop=True)
    unrecorded = [c for c in cells if c.id not in set(recorded["cell_id"])]
    if unrecorded:
        recorded = pd.concat([recorded, cells_frame(unrecorded)], ignore_index=True)
    agg = aggregate(runs, recorded, seeds)
    print_sections(sections(agg), console)
    return agg


# ---------------------------------------------------------------------------------------------
# Comparing two studies (or two commits of one study)


def _side(spec: dict[str, Any], seeds_wanted: int | None) -> dict[str, Any]:
    name, seeds, ids, note = resolve_study(spec["study"])
    runs, cells = load_record(spec["uri"], name, ids)
    commit = spec.get("commit")
    if commit:
        recorded = sorted({str(c) for c in runs["git_commit"].dropna()})
        runs = runs[runs["git_commit"].fillna("").astype(str).str.startswith(commit)].reset_index(drop=True)
        if not len(runs):
            raise ReportError(f"study {name!r} in {spec['uri']}: no runs at git commit {commit!r} "
                              f"(commits recorded: {', '.join(recorded) or 'none'})")
    seeds = seeds_wanted if seeds_wanted is not None else seeds
    if seeds is None:
        seeds = infer_seeds(runs)
    agg = aggregate(runs, cells, seeds, any_params=bool(commit))
    title = name + (f"@{commit}" if commit else "")
    return {"name": name, "title": title, "uri": spec["uri"], "agg": agg, "note": note}


def compare_studies(a: dict[str, Any], b: dict[str, Any], seeds_wanted: int | None = None) -> dict[str, Any]:
    """A and B ({"study": file or name, "uri": tracking URI, "commit": prefix or None}) per matching
    cell (same cell id, else same label) and split: means, stds, n and the difference B − A."""
    import pandas as pd

    sa, sb = _side(a, seeds_wanted), _side(b, seeds_wanted)
    notes = [n for n in (sa["note"], sb["note"]) if n]
    ca = sa["agg"].sort_values(["order"], kind="stable").drop_duplicates("cell_id")
    cb = sb["agg"].sort_values(["order"], kind="stable").drop_duplicates("cell_id")
    b_ids, b_labels = set(cb["cell_id"]), {}
    for cid, label in zip(cb["cell_id"], cb["label"]):
        b_labels.setdefault(label, cid)
    pairs, used_b = [], set()
    for cid, label in zip(ca["cell_id"], ca["label"]):
        if cid in b_ids:
            pairs.append((cid, cid, "id"))
            used_b.add(cid)
        elif label in b_labels and b_labels[label] not in used_b:
            pairs.append((cid, b_labels[label], "label"))
            used_b.add(b_labels[label])
    matched_a = {p[0] for p in pairs}
    only_a = [lbl for cid, lbl in zip(ca["cell_id"], ca["label"]) if cid not in matched_a]
    only_b = [lbl for cid, lbl in zip(cb["cell_id"], cb["label"]) if cid not in used_b]
    rows = []
    for ida, idb, how in pairs:
        ga = sa["agg"][sa["agg"]["cell_id"] == ida].set_index("split")
        gb = sb["agg"][sb["agg"]["cell_id"] == idb].set_index("split")
        for split in [s for s in ga.index if s in gb.index]:
            ra, rb = ga.loc[split], gb.loc[split]
            rows.append({
                "label": ra["label"], "split": split, "metric": ra["metric"], "match": how,
                "cell_id_a": ida, "cell_id_b": idb,
                "mean_a": ra["mean"], "std_a": ra["std"], "n_a": int(ra["n"]),
                "failed_a": int(ra["seeds_failed"]), "missing_a": int(ra["seeds_missing"]),
                "mean_b": rb["mean"], "std_b": rb["std"], "n_b": int(rb["n"]),
                "failed_b": int(rb["seeds_failed"]), "missing_b": int(rb["seeds_missing"]),
                "diff": rb["mean"] - ra["mean"],
            })
    cols = ["label", "split", "metric", "match", "cell_id_a", "cell_id_b", "mean_a", "std_a", "n_a", "failed_a",
            "missing_a", "mean_b", "std_b", "n_b", "failed_b", "missing_b", "diff"]
    frame = pd.DataFrame(rows, columns=cols)
    return {"a": sa, "b": sb, "frame": frame, "only_a": only_a, "only_b": only_b, "notes": notes}


def format_diff(diff: Any, metric: str) -> str:
    if _is_missing(diff) or (isinstance(diff, float) and math.isnan(diff)):
        return DASH
    scale, digits, _ = metric_scale(metric)
    x = round(float(diff) * scale, digits) + 0.0
    return f"{x:+.{digits}f}"


def comparison_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    a, b = result["a"]["title"], result["b"]["title"]
    columns = ["cell", "split", f"A: {a}", f"B: {b}", "B − A"]
    rows = []
    for r in result["frame"].to_dict("records"):
        ma = format_cell(r["mean_a"], r["std_a"], r["n_a"], r["metric"]) + ("†" if r["failed_a"] else "") + ("‡" if r["missing_a"] else "")
        mb = format_cell(r["mean_b"], r["std_b"], r["n_b"], r["metric"]) + ("†" if r["failed_b"] else "") + ("‡" if r["missing_b"] else "")
        label = r["label"] + (" (matched by label)" if r["match"] == "label" else "")
        rows.append([label, r["split"], ma, mb, format_diff(r["diff"], r["metric"])])
    return columns, rows


def print_comparison(result: dict[str, Any], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    columns, rows = comparison_rows(result)
    sa, sb = result["a"], result["b"]
    table = Table(title=escape(f"A = {sa['title']} ({sa['uri']})  vs  B = {sb['title']} ({sb['uri']})"), title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(escape(col), justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*(escape(v) for v in row))
    _print_wide(console, table)
    percent = any(str(m).lower() in PERCENT_METRICS for m in result["frame"]["metric"])
    console.print("† some seeds diverged · ‡ some seeds missing" + (" · accuracy in %, B − A in points" if percent else ""))
    for side, labels in (("A", result["only_a"]), ("B", result["only_b"])):
        if labels:
            console.print(f"[yellow]only in {side}:[/] " + escape(", ".join(labels)))
