"""A study end to end on Ray: record, resume, filters, a diverging cell, a killed driver, and
fractional GPUs on a simulated cluster that loses a node.

Tiny study: logic on generated data (200 training pairs, 40 per evaluation split), d = 8,
2 epochs, 2 Optuna trials and 2 seeds per cell. Plug-in units from tests/plugin_units.py
(import path, as a user's own unit) make a cell diverge (NaNUnit) or trials slow enough to be
interrupted (SlowUnit: sleeps, no CPU). See tests/ray_helpers.py for how Ray is started.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.ray_helpers import (
    NAN,
    SLOW,
    attempts,
    cells_of,
    check_complete,
    count_recorded,
    kill_driver_when,
    kill_session,
    local_ray,
    optuna_trials,
    records,
    results,
    run_rows,
    run_study,
    seed_root,
    short_tmp,
    simulated_cluster,
    start_driver,
    status_rows,
    write_study,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
ELMAN = "tests.plugin_units:ElmanUnit"
UNITS = ["lstm", "gru", NAN]


@pytest.fixture(scope="class")
def ray_local():
    with local_ray(2) as tmp:
        yield tmp


@pytest.fixture(scope="class")
def done(ray_local, tmp_path_factory):
    """The tiny study run once, uninterrupted: (study file, root, runner, summary, seconds)."""
    base = tmp_path_factory.mktemp("study")
    root = seed_root(base / "root")
    path = write_study(base, "tiny", UNITS)
    t0 = time.time()
    runner, summary = run_study(path, root)
    return path, root, runner, summary, time.time() - t0


@pytest.mark.usefixtures("ray_local")
class TestLocal:
    def test_end_to_end(self, done):
        path, root, runner, summary, seconds = done
        cells = {c.unit: c for c in cells_of(path)}
        states = summary["states"]
        assert states[cells["lstm"].id] == states[cells["gru"].id] == "done"
        assert states[cells[NAN].id] == "failed: no search trial completed"
        # MLflow: 2 trials + 2 seeds for each healthy cell, 2 failed trials for the diverging one,
        # counted over every run tagged kind=run (duplicates would be counted too).
        counts = check_complete(path, root, failing=(NAN,))
        assert counts["runs"] == len(run_rows(root, "tiny")) == 2 * (2 + 2) + 2
        recs = records(root, "tiny")
        for unit in ("lstm", "gru"):
            cell = cells[unit]
            phases = sorted(r.tags["tprbench.phase"] for k, r in recs.items() if k.startswith(cell.id))
            assert phases == ["final", "final", "search", "search"]
            assert [t.state.name for t in optuna_trials(root, "tiny", cell.id)] == ["COMPLETE", "COMPLETE"]
            seeds = [r for r in recs.values() if r.tags["tprbench.cell_id"] == cell.id and r.tags["tprbench.phase"] == "final"]
            assert sorted(int(r.tags["tprbench.seed"]) for r in seeds) == [0, 1]
            assert all(r.status == "finished" and "test_test_easy_acc" in r.metrics for r in seeds)
        print(f"\nend to end: {counts['runs']} runs in {seconds:.1f} s")

    def test_the_record_as_people_read_it(self, done):
        """The record as people read it, on the embedded store (tests/test_servers.py does the same on an MLflow
        server): the classic runs view, runs named by cell label, study and cell runs ended with
        summary metrics, the worker's times, per-epoch timestamps, Optuna studies described."""
        import optuna

        from harness.record.storage import default_storage_url, open_storage
        from tests.ray_helpers import tracker

        path, root, *_ = done
        cells = {c.unit: c for c in cells_of(path)}
        t = tracker(root, "tiny")
        client = t.client
        assert client.get_experiment(t.experiment_id).tags.get("mlflow.experimentKind") == "custom_model_development"
        (study_run,) = t.search("tags.`tprbench.kind` = 'study'")
        # The diverging cell is not done: the study run says so (FAILED), the healthy cells FINISHED.
        assert study_run.info.run_name == "tiny" and study_run.info.status == "FAILED"
        cell_runs = {r.data.tags["tprbench.cell_id"]: r for r in t.search("tags.`tprbench.kind` = 'cell'")}
        for unit, cell in cells.items():
            run = cell_runs[cell.id]
            assert run.info.run_name == cell.label and run.info.end_time
            assert run.info.status == ("FAILED" if unit == NAN else "FINISHED")
        gru = cell_runs[cells["gru"].id].data.metrics
        assert {
            "valid_acc_mean",
            "valid_acc_std",
            "test_test_easy_acc_mean",
            "best_search_valid_acc",
            "params_formula",
            "params_total",
            "seeds_finished",
        } <= set(gru), sorted(gru)
        assert gru["seeds_finished"] == 2
        for run in run_rows(root, "tiny"):
            tags = run.data.tags
            label = next(c.label for c in cells.values() if c.id == tags["tprbench.cell_id"])
            n = tags["tprbench.trial"] if tags["tprbench.phase"] == "search" else tags["tprbench.seed"]
            assert run.info.run_name == f"{label} {'trial' if tags['tprbench.phase'] == 'search' else 'seed'} {n}"
            if tags["tprbench.status"] != "finished":
                continue
            seconds = (run.info.end_time - run.info.start_time) / 1000  # the worker's start and end
            assert seconds >= 0.8 * run.data.metrics["train_seconds"], (seconds, run.data.metrics["train_seconds"])
            history = sorted(client.get_metric_history(run.info.run_id, "train_loss"), key=lambda h: h.step)
            stamps = [h.timestamp for h in history]
            assert [h.step for h in history] == [1, 2] and stamps[0] < stamps[1]  # each epoch its own time
            assert run.info.start_time <= stamps[0] and stamps[-1] <= run.info.end_time
        storage = open_storage(default_storage_url(root))
        st = optuna.load_study(study_name=f"tiny/{cells['gru'].id}", storage=storage)
        assert st.user_attrs["label"] == cells["gru"].label and st.user_attrs["metric"] == "valid_acc"
        assert st.metric_names == ["valid_acc"]

    def test_nan_trial_is_recorded_diverged_and_the_study_goes_on(self, done):
        path, root, *_ = done
        nan_cell = next(c for c in cells_of(path) if c.unit == NAN)
        failed = [r for r in run_rows(root, "tiny") if r.data.tags["tprbench.cell_id"] == nan_cell.id]
        assert len(failed) == 2
        for run in failed:
            assert run.info.status == "FAILED"
            assert run.data.tags["tprbench.status"] == "diverged"
            assert "loss became nan at epoch 1" in run.data.tags["tprbench.reason"]
        assert [t.state.name for t in optuna_trials(root, "tiny", nan_cell.id)] == ["FAIL", "FAIL"]
        assert status_rows(path, root)[nan_cell.id]["status"] == "failed"

    def test_second_run_recomputes_nothing(self, done):
        path, root, *_ = done
        rows_before = {r.info.run_id for r in run_rows(root, "tiny")}
        trials_before = {c.id: len(optuna_trials(root, "tiny", c.id)) for c in cells_of(path)}
        mtimes = results(root, "tiny")
        t0 = time.time()
        runner, summary = run_study(path, root)
        seconds = time.time() - t0
        assert any("nothing to do" in e for e in runner.events)
        assert {r.info.run_id for r in run_rows(root, "tiny")} == rows_before
        assert {c.id: len(optuna_trials(root, "tiny", c.id)) for c in cells_of(path)} == trials_before
        assert results(root, "tiny") == mtimes
        assert seconds < 15, seconds
        print(f"\nsecond run: nothing recomputed, {seconds:.1f} s")

    def test_added_unit_runs_only_its_cell(self, done):
        path, root, *_ = done
        before = {k: r.run_id for k, r in records(root, "tiny").items()}
        mtimes = results(root, "tiny")
        path.write_text(path.read_text().replace(f'"{NAN}"]', f'"{NAN}", "{ELMAN}"]'))
        new_cell = next(c for c in cells_of(path) if c.unit == ELMAN)
        runner, summary = run_study(path, root)
        after = {k: r.run_id for k, r in records(root, "tiny").items()}
        assert {k: v for k, v in after.items() if k in before} == before  # old records untouched
        assert {k.split("/")[0] for k in set(after) - set(before)} == {new_cell.id}
        assert len(set(after) - set(before)) == 4
        assert {k: v for k, v in results(root, "tiny").items() if k in mtimes} == mtimes  # nothing retrained
        assert summary["states"][new_cell.id] == "done"
        check_complete(path, root, failing=(NAN,))

    def test_only_filters_and_force_reruns_only_the_selected_cells(self, done, capsys):
        from harness.cli import main

        path, root, *_ = done
        gru = next(c for c in cells_of(path) if c.unit == "gru")
        before = {k: r.run_id for k, r in records(root, "tiny").items()}
        mtimes = results(root, "tiny")
        # --only on a finished study: nothing to do, nothing written
        assert main(["run", str(path), "--root", str(root), "--only", "unit=gru", "--quiet"]) == 0
        assert {k: r.run_id for k, r in records(root, "tiny").items()} == before
        # --force --only: the gru cell is retrained and re-recorded, nothing else
        assert main(["run", str(path), "--root", str(root), "--only", "unit=gru", "--force", "--quiet"]) == 0
        out = capsys.readouterr().out
        assert "1 cells" in out
        after = {k: r.run_id for k, r in records(root, "tiny").items()}
        assert set(after) == set(before)
        changed = {k for k in after if after[k] != before[k]}
        assert changed == {k for k in before if k.startswith(gru.id)} and len(changed) == 4
        new_mtimes = results(root, "tiny")
        assert {k for k in mtimes if new_mtimes[k] != mtimes[k]} == {k for k in mtimes if k.startswith(gru.id)}
        check_complete(path, root, failing=(NAN,))


@pytest.mark.slow
def test_driver_killed_midway_then_rerun(tmp_path: Path) -> None:
    """`tprbench run` SIGKILLed after some runs are recorded; its local Ray goes down with it
    (leftover processes are ended by pid); the rerun finishes without recomputing or
    re-recording anything that was finished."""
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "killme", [SLOW, "gru"])
    total = 2 * (2 + 2)
    env = {"RAY_TMPDIR": short_tmp("tprk")}  # the drivers' local Ray (Unix socket paths must stay short)
    try:
        _kill_then_rerun(path, root, tmp_path / "driver.log", env, total)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def _end(proc) -> list[str]:
    """A driver that is still running is killed; then whatever its session started is ended."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    return kill_session(proc.pid)


def _driver_to_the_end(path: Path, root: Path, log: Path, env: dict) -> None:
    """`tprbench run` as a user reruns it, to its end (exit 0); whatever it started is ended after."""
    proc = start_driver(path, root, log, "--num-cpus", "2", env=env)
    try:
        rc = proc.wait(timeout=300)
    finally:
        _end(proc)
    assert rc == 0, log.read_text()[-3000:]


def _kill_then_rerun(path: Path, root: Path, log: Path, env: dict, total: int) -> None:
    proc = start_driver(path, root, log, "--num-cpus", "2", env=env)
    try:
        waited = kill_driver_when(proc, lambda: count_recorded(root) >= 2)
    finally:
        leftovers = _end(proc)
    recorded = records(root, "killme")
    finished = results(root, "killme")  # result.json written before the kill (recorded or not)
    print(
        f"\nkilled after {waited:.1f} s with {len(recorded)}/{total} runs recorded, {len(finished)} finished; ended leftover processes: {leftovers}"
    )
    assert 2 <= len(recorded) < total
    _driver_to_the_end(path, root, log, env)
    # The rerun says what it resumes, e.g. "resuming: 1 trial(s) continue from their
    # checkpoints, 2 run(s) already recorded" (with --quiet too: only the progress lines go).
    # The console wraps a long message at 80 columns in a log: read it as one text.
    text = " ".join(log.read_text().split())
    resume = re.findall(r"resuming: .*?already recorded", text)
    said = re.search(r"(\d+) run\(s\) already recorded", resume[0]) if len(resume) == 1 else None
    assert said and int(said.group(1)) >= 2, resume
    counts = check_complete(path, root)
    assert counts["runs"] == total
    after = records(root, "killme")
    assert {k: after[k].run_id for k in recorded} == {k: r.run_id for k, r in recorded.items()}
    now = results(root, "killme")
    assert {k: now[k][0] for k in finished} == {k: v[0] for k, v in finished.items()}, "finished runs were retrained"
    resumed = [k for k, (_, p) in now.items() if k not in finished and '"resumed_from_epoch": 1' in p.read_text()]
    print(f"rerun: {total - len(recorded)} runs recorded, {len(finished)} finished runs reused, {len(resumed)} resumed from a checkpoint")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, rc_expected, said",
    [
        pytest.param(signal.SIGINT, 130, "interrupted", id="ctrl-c"),
        # A cluster scheduler's stop: Ray core's own handler used to end the driver at once, with its
        # cell runs left RUNNING (harness.driver.ray_start.stop_on_sigterm).
        pytest.param(signal.SIGTERM, 143, "stopped by SIGTERM", id="sigterm"),
    ],
)
def test_ctrl_c_ends_the_record_killed_then_rerun_finishes(tmp_path: Path, signum: int, rc_expected: int, said: str) -> None:
    """Ctrl-C (SIGINT), or SIGTERM, on `tprbench run` after some runs are recorded: the driver says
    how to resume and exits 130 (143); the study run and every unfinished cell run end KILLED in
    MLflow (not RUNNING forever), finished cells FINISHED, no live run of a cancelled job is left
    RUNNING; the same command then finishes the study without re-recording anything."""
    import sqlite3

    root = seed_root(tmp_path / "root")
    # Slower than SLOW: the signal must land while runs are left. At SLOW's 0.05 s a step the whole study once
    # ended (22.5 s, beside the other test worker in CI) before the poll below saw two runs recorded (rc 0).
    path = write_study(tmp_path, "ctrlc", ["tests.plugin_units:SlowUnit[delay=0.15]", "gru"])
    total = 2 * (2 + 2)
    log = tmp_path / "driver.log"
    env = {"RAY_TMPDIR": short_tmp("tprc")}

    def statuses() -> dict[str, list[str]]:
        con = sqlite3.connect(f"file:{root / 'mlflow.db'}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute(
                "select t.value, r.status from runs r join tags t on t.run_uuid = r.run_uuid "
                "where t.key = 'tprbench.kind' and t.value in ('study', 'cell')"
            ).fetchall()
        finally:
            con.close()
        out: dict[str, list[str]] = defaultdict(list)
        for kind, status in rows:
            out[kind].append(status)
        return out

    try:
        proc = start_driver(path, root, log, "--num-cpus", "2", env=env)
        try:
            t0 = time.time()
            while count_recorded(root) < 2:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.time() - t0 < 150, "the driver never recorded two runs"
                time.sleep(0.2)
            os.kill(proc.pid, signum)
            rc = proc.wait(timeout=120)
        finally:
            _end(proc)
        text = log.read_text()
        assert rc == rc_expected, text[-3000:]
        assert f"{said}; everything finished so far is recorded" in text
        # deleted runs (the cancelled jobs' live runs) are ended KILLED too: a committed record is read without MLflow's filter
        assert _left_running(root) == [], f"run(s) left RUNNING: {_left_running(root)}"
        recorded = records(root, "ctrlc")
        assert 2 <= len(recorded) < total
        ended = statuses()
        assert ended["study"] == ["KILLED"], ended
        assert ended["cell"] and set(ended["cell"]) <= {"KILLED", "FINISHED"} and "KILLED" in ended["cell"], ended

        _driver_to_the_end(path, root, log, env)
        assert check_complete(path, root)["runs"] == total
        after = records(root, "ctrlc")
        assert {k: after[k].run_id for k in recorded} == {k: r.run_id for k, r in recorded.items()}
        ended = statuses()
        assert ended["study"] == ["FINISHED"] and set(ended["cell"]) == {"FINISHED"}, ended
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def _left_running(root: Path) -> list[tuple[str, int]]:
    """(lifecycle stage, count) of the record's runs still RUNNING, deleted ones included: read with
    plain SQL, as a committed record is read by a tool without MLflow's lifecycle filter."""
    import sqlite3

    con = sqlite3.connect(f"file:{root / 'mlflow.db'}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("select lifecycle_stage, count(*) from runs where status = 'RUNNING' group by 1").fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_sigterm_while_a_run_is_recorded_leaves_nothing_running(tmp_path: Path) -> None:
    """SIGTERM that lands while a finished job's record is half-written (created, metrics logged,
    not ended; `TPRBENCH_FAULT_AT=recording:SIGTERM` makes it land there every time): the driver
    still exits 143 with no run left RUNNING, that record deleted, and the rerun records it again.
    Before the close retired half-written runs, this left one RUNNING (a CI failure of the test above)."""
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "midrecord", [SLOW])
    total = 2 + 2
    log = tmp_path / "driver.log"
    env = {"RAY_TMPDIR": short_tmp("tprm")}
    try:
        proc = start_driver(path, root, log, "--num-cpus", "2", env={**env, "TPRBENCH_FAULT_AT": "recording:SIGTERM"})
        try:
            rc = proc.wait(timeout=300)
        finally:
            _end(proc)
        text = log.read_text()
        assert rc == 143, text[-3000:]
        assert "stopped by SIGTERM; everything finished so far is recorded" in text
        assert _left_running(root) == [], f"run(s) left RUNNING: {_left_running(root)}"
        assert records(root, "midrecord") == {}, "the half-written record was read as recorded"

        _driver_to_the_end(path, root, log, env)
        assert check_complete(path, root)["runs"] == total
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


@pytest.fixture(scope="module")
def gpu_cluster():
    # 2 nodes × (4 CPUs, 1 fake GPU); the head has no CPUs, so trials run on the two nodes only.
    with simulated_cluster(nodes=2, cpus=4, gpus=1) as cluster:
        yield cluster


@pytest.mark.slow
def test_fractional_gpus_pack_and_a_removed_node_loses_nothing(gpu_cluster, tmp_path: Path) -> None:
    """gpus = 0.25: four trials share each fake GPU (Ray assigns {CPU: 1, GPU: 0.25}); workers are
    reused across GPU tasks (max_calls=0). A node removed while its trials run: they are retried
    on the other node, and every trial is recorded exactly once."""
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "gpus", ["tests.plugin_units:SlowUnit[delay=0.1]", SLOW], trials=6, seeds=1, gpus=0.25)
    box: dict = {}

    def drive() -> None:
        try:
            box["runner"], box["summary"] = run_study(path, root)
        except BaseException as exc:  # surfaced by the main thread
            box["error"] = exc

    thread = threading.Thread(target=drive)
    thread.start()
    nodes = {n.node_id: n for n in gpu_cluster.worker_nodes}
    t0 = time.time()
    while True:  # until a node has two trials really started and one of them still running
        dirs = list((root / "work" / "gpus").glob("*/trial-*"))
        started = defaultdict(list)
        for d in dirs:
            for a in attempts(d):
                started[a.get("node_id")].append(d)
        victim = next(
            (nodes[n] for n, ds in started.items() if n in nodes and len(ds) >= 2 and any(not (d / "result.json").exists() for d in ds)), None
        )
        if victim is not None:
            break
        assert time.time() - t0 < 180 and thread.is_alive(), box.get("error")
        time.sleep(0.05)
    gpu_cluster.remove_node(victim, allow_graceful=False)
    removed_at = time.time()
    thread.join(timeout=400)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    runner = box["runner"]
    counts = check_complete(path, root)
    assert counts["runs"] == 2 * (6 + 1)
    every = [a for d in (root / "work" / "gpus").glob("*/*") for a in attempts(d)]
    assert all(a["resources"] == {"CPU": 1.0, "GPU": 0.25} for a in every), every
    retried = [d.name for d in (root / "work" / "gpus").glob("*/*") if len({a["node_id"] for a in attempts(d)}) > 1]
    assert retried, "no trial was moved off the removed node"
    rows = runner.timings
    per_gpu, per_node = defaultdict(list), defaultdict(list)
    for r in rows:
        per_node[r["node_id"]].append((r["start"], r["end"]))
        for g in r["gpu_ids"]:
            per_gpu[(r["node_id"], g)].append((r["start"], r["end"]))
    gpu_peak = {k: _max_overlap(v) for k, v in per_gpu.items()}
    node_peak = {k[:8]: _max_overlap(v) for k, v in per_node.items()}
    pids = [r["pid"] for r in rows]
    print(
        f"\nGPU packing: peak concurrent trials per fake GPU {sorted(gpu_peak.values())}, per node {node_peak}; "
        f"{len(rows)} runs on {len(set(pids))} worker processes; node removed after {removed_at - t0:.1f} s, "
        f"{len(retried)} runs moved: {retried}"
    )
    assert max(gpu_peak.values()) <= 4
    assert max(node_peak.values()) > 1
    assert len(set(pids)) < len(rows), "every GPU task got a fresh worker: max_calls=0 not in effect"


def test_restarted_driver_proposes_the_parameters_an_uninterrupted_one_would(tmp_path: Path) -> None:
    """Regression: a driver restarted mid-search re-created the cell's seeded sampler, so the
    next trial it asked got trial 0's parameters again. Proposals are now seeded per trial."""
    from harness.driver.cells import CellState
    from harness.driver.runner import StudyRunner
    from harness.record.storage import open_storage
    from harness.study.load import load_study

    path = write_study(tmp_path, "sampler", ["gru"], trials=4)
    study = load_study(path)
    cell = cells_of(path)[0]

    def proposals(restart_at: int | None) -> list[dict]:
        url = f"journal://{tmp_path}/optuna-{restart_at}.journal"

        def driver() -> tuple[StudyRunner, CellState]:
            runner = StudyRunner(study, [cell], tmp_path / "root", storage_url=url)
            runner.storage = open_storage(url)
            return runner, CellState(cell, runner._optuna_study(cell), 4, 0)

        runner, st = driver()
        out = []
        for n in range(4):
            if n == restart_at:
                runner, st = driver()
            trial = st.study.ask()
            out.append(runner.trial_job(st, trial.number, trial._trial_id).hparams)
        return out

    uninterrupted = proposals(None)
    assert len({json.dumps(p, sort_keys=True) for p in uninterrupted}) == 4
    assert proposals(1) == proposals(3) == uninterrupted
