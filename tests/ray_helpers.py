"""Shared pieces of the harness tests (test_study_ray, test_faults, test_concurrency, bench).

Studies are tiny (logic on generated data, d = 8, 2 epochs) and written into the test's run
directory; units slow, diverging or crashing on purpose come from tests/plugin_units.py by
import path. Ray workers import them because the repository root is put on PYTHONPATH before
Ray starts (`ray_environ`): the raylet passes its environment to the workers it starts, on
every node of a simulated cluster too. Every Ray started here gets a short temp dir of its
own under /tmp (Unix socket paths are limited to ~107 characters) and is shut down, and a
killed driver's leftover processes are ended by pid (`kill_session`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `tests.plugin_units` for the driver, however pytest was started
    sys.path.insert(0, str(REPO))
TPRBENCH = str(Path(sys.executable).with_name("tprbench"))
TIMING_METRICS = ("train_seconds", "epoch_seconds")  # the only numbers allowed to differ between runs

SLOW = "tests.plugin_units:SlowUnit[delay=0.05]"
NAN = "tests.plugin_units:NaNUnit"
RAISE = "tests.plugin_units:RaiseUnit"


def ray_environ(**extra: str) -> dict[str, str]:
    """Environment for Ray processes started from here (and for drivers run as subprocesses)."""
    path = os.environ.get("PYTHONPATH", "")
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "PYTHONPATH": str(REPO) + (os.pathsep + path if path else ""),
        "OMP_NUM_THREADS": "1",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    }
    env.update(extra)
    return env


# Ray's fast failure detection: a removed node is declared dead in ~2 s, not ~15 s (measured with Ray 2.60 on this
# project's 2-core machine).
FAST_HEALTH_CHECKS = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_timeout_ms": "1000",
}


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def short_tmp(prefix: str = "tpr") -> str:
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[str]:
    import ray

    tmp = short_tmp("tprl")
    with environ(ray_environ()):
        from harness.driver.ray_start import init_ray

        init_ray(None, num_cpus, tmp)  # as the driver starts it (retried if its node times out on a busy machine)
        try:
            yield tmp
        finally:
            ray.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def simulated_cluster(nodes: int = 2, cpus: int = 2, gpus: int = 0, head_cpus: int = 0) -> Iterator[Any]:
    """Head (no CPUs: trials run on the worker nodes only) + `nodes` worker nodes; driver connected."""
    import ray
    from ray.cluster_utils import Cluster

    tmp = short_tmp("tprc")
    os.makedirs(os.path.join(tmp, "ray"))
    env = ray_environ(RAY_TMPDIR=tmp, **FAST_HEALTH_CHECKS)
    with environ(env):
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "num_gpus": 0,
                "include_dashboard": False,
                "temp_dir": os.path.join(tmp, "ray"),
                "object_store_memory": 100 * 2**20,
            },
        )
        try:
            cluster.node_args = {"num_cpus": cpus, "num_gpus": gpus, "object_store_memory": 100 * 2**20}
            for _ in range(nodes):
                cluster.add_node(**cluster.node_args)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
            cluster.tmp = tmp
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Studies


def study_text(
    name: str,
    units: list[str],
    trials: int = 2,
    seeds: int = 2,
    epochs: int = 2,
    train_size: int = 200,
    eval_size: int = 40,
    cpus: float = 1,
    gpus: float = 0,
    retries: int = 3,
    pruner: str = "none",
    batch_size: int = 32,
) -> str:
    """Logic on generated data, d = 8; 200 training pairs in batches of 32 = 7 steps per epoch."""
    unit_list = ", ".join(json.dumps(u) for u in units)
    return f"""
[study]
name = "{name}"
trials = {trials}
seeds = {seeds}
epochs = {epochs}

[[tasks]]
name = "logic"
data = "generated"
[tasks.options]
train_size = {train_size}
eval_size = {eval_size}

[matrix]
arch = ["plain"]
dim = [8]
units = [{unit_list}]

[search]
lr = {{ log_uniform = [1e-3, 1e-2] }}
batch_size = {batch_size}

[pruner]
kind = "{pruner}"

[resources]
cpus = {cpus}
gpus = {gpus}
retries = {retries}
"""


def write_study(directory: Path, name: str, units: list[str], **kw: Any) -> Path:
    path = Path(directory) / f"{name}.toml"
    path.write_text(study_text(name, units, **kw))
    return path


_TEMPLATE: list[Path] = []


def seed_root(root: Path) -> Path:
    """A run directory holding an empty MLflow store copied from a template made once per test
    session (MLflow's schema migrations take ~7 s per fresh SQLite file here)."""
    if not _TEMPLATE:
        import atexit

        from mlflow import MlflowClient

        path = Path(short_tmp("tprm")) / "mlflow.db"
        atexit.register(shutil.rmtree, str(path.parent), True)
        MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
        _TEMPLATE.append(path)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(_TEMPLATE[0], root / "mlflow.db")
    return root


def run_study(
    study_path: Path,
    root: Path,
    only: list[str] | None = None,
    force: bool = False,
    tracking_uri: str | None = None,
    storage: str | None = None,
    until_epoch: int | None = None,
    **run_kw: Any,
):
    """Drive a study in this process (Ray must already be up); returns (runner, summary)."""
    from harness.driver.runner import StudyRunner
    from harness.study.cells import expand, filter_cells
    from harness.study.load import load_study

    study = load_study(study_path)
    cells = filter_cells(expand(study), only) if only else expand(study)
    runner = StudyRunner(study, cells, root, tracking_uri, storage, force=force, until_epoch=until_epoch)
    return runner, runner.run(**run_kw)


def cells_of(study_path: Path) -> list[Any]:
    from harness.study.cells import expand
    from harness.study.load import load_study

    return expand(load_study(study_path))


# --------------------------------------------------------------------------------------------
# Reading the record


def tracker(root: Path, study: str):
    from harness.record.sources import default_tracking_uri
    from harness.record.writer import Tracker

    return Tracker(default_tracking_uri(Path(root)), study, create=False)


def run_rows(root: Path, study: str) -> list[Any]:
    """Every MLflow run tagged as a trial/seed run (any status): duplicates would show here."""
    t = tracker(root, study)
    return t.search("tags.`tprbench.kind` = 'run'") if t.experiment_id else []


def records(root: Path, study: str) -> dict[str, Any]:
    return tracker(root, study).records()


def assert_no_duplicates(root: Path, study: str) -> list[str]:
    rows = run_rows(root, study)
    keys = [r.data.tags["tprbench.run_key"] for r in rows]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    assert not dup, f"duplicated run keys in MLflow: {dup}"
    unfinished = [r.data.tags["tprbench.run_key"] for r in rows if r.info.status not in ("FINISHED", "FAILED")]
    assert not unfinished, f"runs left half-written: {unfinished}"
    return keys


def count_recorded(root: Path) -> int:
    """Finished trial/seed runs in the SQLite store, read with sqlite3 (cheap enough to poll)."""
    db = Path(root) / "mlflow.db"
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(
                "select count(*) from runs r join tags t on t.run_uuid = r.run_uuid where t.key = 'tprbench.kind' "
                "and t.value = 'run' and r.status in ('FINISHED', 'FAILED') and r.lifecycle_stage = 'active'"
            ).fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def optuna_trials(root: Path, study: str, cell_id: str, storage: str | None = None) -> list[Any]:
    import optuna

    from harness.record.storage import default_storage_url, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=f"{study}/{cell_id}", storage=open_storage(storage or default_storage_url(Path(root)))).get_trials(
            deepcopy=False
        )
    except KeyError:
        return []


def results(root: Path, study: str) -> dict[str, tuple[int, Path]]:
    """result.json of every run directory: {'<cell>/<trial-NNNN|seed-…>': (mtime_ns, path)}."""
    out = {}
    for path in (Path(root) / "work" / study).glob("*/*/result.json"):
        out[f"{path.parent.parent.name}/{path.parent.name}"] = (path.stat().st_mtime_ns, path)
    return out


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "attempts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def numbers(root: Path, study: str) -> dict[str, tuple[str, dict[str, float], dict[str, str]]]:
    """Per run key: status, every metric except timings, params — what must not depend on faults."""
    out = {}
    for key, rec in records(root, study).items():
        metrics = {k: v for k, v in rec.metrics.items() if k not in TIMING_METRICS}
        out[key] = (rec.status, metrics, rec.params)
    return out


def aggregated(root: Path, study: str, seeds: int) -> Any:
    from harness.record.sources import default_tracking_uri
    from harness.report import aggregate, load_cells, load_runs

    uri = default_tracking_uri(Path(root))
    agg = aggregate(load_runs(uri, study), load_cells(uri, study), seeds)
    return (
        agg[["cell_id", "split", "mean", "std", "n", "seeds_finished", "seeds_failed", "trials", "trials_failed", "best_search"]]
        .sort_values(["cell_id", "split"])
        .reset_index(drop=True)
    )


def status_rows(study_path: Path, root: Path, storage: str | None = None) -> dict[str, dict[str, Any]]:
    from harness.driver.status import study_status
    from harness.study.cells import expand
    from harness.study.load import load_study

    study = load_study(study_path)
    return {r["id"]: r for r in study_status(study, expand(study), root, storage_url=storage)}


def check_complete(
    study_path: Path, root: Path, failing: tuple[str, ...] = (), errored: tuple[str, ...] = (), storage: str | None = None
) -> dict[str, int]:
    """Every cell done (or failed, for the units listed; errored for those in `errored`, which
    must also be in `failing`, with the retry cap reached); in MLflow one record per run key and
    exactly the expected keys; in Optuna exactly `trials` finished trials per cell."""
    from harness.study.load import load_study

    study = load_study(study_path)
    keys = set(assert_no_duplicates(root, study.name))
    expected = set()
    for cell in cells_of(study_path):
        bad = cell.unit in failing
        trials = optuna_trials(root, study.name, cell.id, storage)
        assert len(trials) == study.trials, (cell.label, [t.state for t in trials])
        assert all(t.state.is_finished() for t in trials), (cell.label, [t.state for t in trials])
        expected |= {f"{cell.id}/trial/{n}" for n in range(study.trials)}
        if not bad:
            seeds = {k for k in keys if k.startswith(f"{cell.id}/seed/")}
            assert len(seeds) == study.seeds, (cell.label, seeds)
            expected |= seeds
    assert keys == expected, (sorted(keys - expected), sorted(expected - keys))
    rows = status_rows(study_path, root, storage)
    for cell in cells_of(study_path):
        want = "errored" if cell.unit in errored else "failed" if cell.unit in failing else "done"
        assert rows[cell.id]["status"] == want, rows[cell.id]
    return {"runs": len(keys), "cells": len(rows)}


# --------------------------------------------------------------------------------------------
# Drivers as subprocesses, killed on purpose


def start_driver(study_path: Path, root: Path, log: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`tprbench run` in its own session (so everything it starts can be found and ended)."""
    return subprocess.Popen(
        [TPRBENCH, "run", str(study_path), "--root", str(root), "--quiet", *extra],
        cwd=str(REPO),
        env={**os.environ, **ray_environ(), **(env or {})},
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )


def _ctrl_c_as_at_a_terminal() -> None:
    """In the driver's process before exec: SIGINT handled by default, as at a terminal. A test run
    started in the background by a non-interactive shell (`cmd &`, as CI scripts may) inherits SIGINT
    ignored, and Python then never raises KeyboardInterrupt (the Ctrl-C test sent it to a driver that
    ran on to the end)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def session_pids(sid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != sid:
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def kill_session(sid: int, grace: float = 5.0) -> list[str]:
    """After a driver (session leader `sid`) was killed: wait `grace` s for Ray's processes to
    exit by themselves, then SIGKILL by pid whatever of that session is still alive. Returns
    the names of the processes that had to be killed (Ray's dashboard/runtime-env agents outlive
    a SIGKILLed driver by ~1 min; raylet, GCS and workers go on their own)."""
    deadline = time.time() + grace
    while time.time() < deadline and any(_alive(p) for p in session_pids(sid)):
        time.sleep(0.25)
    killed = []
    for pid in session_pids(sid):
        if _alive(pid):
            try:
                name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
                os.kill(pid, signal.SIGKILL)
                killed.append(name)
            except OSError:
                pass
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(p) for p in session_pids(sid)):
        time.sleep(0.1)
    assert not [p for p in session_pids(sid) if _alive(p)], "processes of the killed driver still running"
    return killed


def kill_driver_when(proc: subprocess.Popen, ready, timeout: float = 150.0, poll: float = 0.2) -> float:
    """SIGKILL the driver as soon as `ready()` is true; returns the seconds waited."""
    t0 = time.time()
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"driver exited (rc {proc.returncode}) before it could be killed")
        if time.time() - t0 > timeout:
            proc.kill()
            raise AssertionError("the driver never reached the point where it was to be killed")
        time.sleep(poll)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.time() - t0
