"""The cluster path against real server processes: each server on 127.0.0.1 on a free
port, stopped by its own PIDs even when a test fails (tests/servers.py).

- a Ray cluster of two `ray start` nodes (head: 1 CPU, worker: 2 CPUs, different custom
  resources), a study dispatched to it with `tprbench run --address`, and the worker node killed
  mid-trial: the study finishes, nothing is lost, and the interrupted trial resumes on the head
  from its checkpoint in the shared run directory;
- an `mlflow server` as `--tracking-uri`: the study → cell → run hierarchy with the names a
  person reads, per-epoch metrics logged while runs train with the worker's times, artifacts in
  the server's artifact store, study and cell runs ended with summary metrics — and the report
  regenerated from the server equal, byte for byte, to the one from the embedded store for the
  same study run on the same code;
- PostgreSQL as Optuna `--storage` (installed by scripts/install_servers.sh): a driver killed
  and resumed against it, and two studies driven at once against one database.

docs/cluster.md gives the same commands for a real cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.ray_helpers import (
    TPRBENCH,
    assert_no_duplicates,
    attempts,
    cells_of,
    check_complete,
    count_recorded,
    kill_driver_when,
    kill_session,
    local_ray,
    optuna_trials,
    ray_environ,
    run_study,
    seed_root,
    start_driver,
    write_study,
)
from tests.servers import (
    mlflow_server,
    postgres_server,
    ray_head,
    ray_worker,
    running,
    tail,
    wait_for_nodes,
    why_no_postgres,
)

pytestmark = [pytest.mark.servers, pytest.mark.slow, pytest.mark.timeout(900)]
SLOW = "tests.plugin_units:SlowUnit[delay=0.15]"


def finish(driver: subprocess.Popen, log: Path, timeout: float = 480) -> None:
    try:
        rc = driver.wait(timeout)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        kill_session(driver.pid)
    assert rc == 0, tail(log, 60)


# --------------------------------------------------------------------------------------------
# Ray: two `ray start` nodes


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ray")
    head = ray_head(directory, cpus=1, resources={"head_node": 1})
    worker = None
    try:
        worker = ray_worker(directory, head.info["address"], cpus=2, resources={"worker_node": 1})
        wait_for_nodes(head.info["address"], 2)
        yield head, worker
    finally:
        if worker is not None:
            worker.stop()
        head.stop()
        shutil.rmtree(head.info["temp"], ignore_errors=True)


def _trial_on(node_pids: list[int], work: Path, cells: set[str]) -> Path | None:
    """A run directory of one of `cells` whose current attempt runs in one of `node_pids`, past its
    first epoch. Only slow cells: a GRU trial past its first epoch can finish before the kill lands
    (it did on an idle machine), and then nothing is retried."""
    for d in sorted(p for c in cells for p in work.glob(f"{c}/trial-*")):
        tried = attempts(d)
        if tried and tried[-1]["pid"] in node_pids and (d / "checkpoint.pt").exists() and not (d / "result.json").exists():
            return d
    return None


def test_two_ray_start_nodes_a_worker_node_lost_mid_study(ray_cluster, tmp_path: Path) -> None:
    head, worker = ray_cluster
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "twonodes", [SLOW, "gru"], trials=3, seeds=1, epochs=3)
    log = tmp_path / "driver.log"
    t0 = time.time()
    from harness.study.cells import expand
    from harness.study.load import load_study

    slow = {c.id for c in expand(load_study(path)) if "SlowUnit" in c.unit}
    driver = start_driver(path, root, log, "--address", head.info["address"])
    try:
        hit = None
        while hit is None:
            assert driver.poll() is None, tail(log, 60)
            assert time.time() - t0 < 300, "no trial reached its second epoch on the worker node"
            hit = _trial_on(worker.pids, root / "work" / "twonodes", slow)
            time.sleep(0.05)
        worker.stop(signal.SIGKILL)  # the node is lost at once: raylet, its workers, everything of it
        finish(driver, log)
    finally:
        if driver.poll() is None:
            driver.kill()
    check_complete(path, root)
    tried = attempts(hit)
    assert len(tried) >= 2 and tried[0]["node_id"] != tried[-1]["node_id"], tried  # retried on the other node
    result = json.loads((hit / "result.json").read_text())
    # Retried on the head from the checkpoint the lost node wrote into the shared run directory.
    assert result["status"] == "finished" and result["resumed_from_epoch"] >= 1, result
    nodes = {a["node_id"] for d in (root / "work" / "twonodes").glob("*/*") for a in attempts(d)}
    assert len(nodes) == 2  # both nodes ran trials
    print(f"\ntwo ray start nodes, worker lost mid-trial: {time.time() - t0:.1f} s")


def test_a_ray_start_head_listens_on_every_interface(ray_cluster) -> None:
    """What docs/security.md says: `ray start --head --node-ip-address 127.0.0.1` still binds its
    GCS port on all interfaces (0.0.0.0), so a single-machine cluster needs a firewall (or a
    host without outside routes) to stay private. If Ray changes this, this test tells us to
    update the docs."""
    from tests.servers import listening_sockets

    head, _ = ray_cluster
    sockets = listening_sockets(head.pids)
    gcs = {addr for addr, port in sockets if port == head.info["port"]}
    assert gcs and gcs <= {"0.0.0.0", "::"}, sorted(sockets)
    public = sorted(port for addr, port in sockets if addr in ("0.0.0.0", "::"))
    print(f"\nray head: ports listening on all interfaces: {public}")


def test_a_wrong_address_fails_within_seconds_in_one_line(tmp_path: Path) -> None:
    from tests.servers import free_port

    path = write_study(tmp_path, "wrong", ["gru"], trials=1, seeds=1, epochs=1)
    t0 = time.time()
    out = subprocess.run(
        [TPRBENCH, "run", str(path), "--root", str(tmp_path / "root"), "--address", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        env={**ray_environ()},
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "no Ray cluster reachable there (Connection refused)" in errors[0], out.stderr
    assert time.time() - t0 < 60  # Ray alone retried for minutes; here: imports + one connect
    assert not (tmp_path / "root" / "mlflow.db").exists()  # nothing written


# --------------------------------------------------------------------------------------------
# MLflow: `mlflow server`


@pytest.fixture(scope="module")
def mlflow_srv(tmp_path_factory):
    with running(lambda: mlflow_server(tmp_path_factory.mktemp("mlflow"))) as server:
        yield server


@pytest.fixture(scope="module")
def ray_local():
    with local_ray(num_cpus=2):
        yield


def _watch_live(uri: str, experiment: str, stop: threading.Event, seen: list) -> None:
    """Poll the server while the study runs: a trial/seed run still RUNNING with per-epoch metrics."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    while not stop.is_set() and not seen:
        exp = client.get_experiment_by_name(experiment)
        if exp is not None:
            for run in client.search_runs([exp.experiment_id], "tags.`tprbench.kind` = 'run' and attributes.status = 'RUNNING'"):
                # (a run being ended has its final tags a moment before its status: skip those)
                if "train_loss" in run.data.metrics and run.data.tags.get("tprbench.status") == "running":
                    seen.append((run.info.run_id, run.data.tags.get("tprbench.status")))
        time.sleep(0.2)


def test_mlflow_server_record_as_people_read_it_and_the_same_report(mlflow_srv, ray_local, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from harness.record.sources import default_tracking_uri
    from harness.report import write_report

    uri = mlflow_srv.info["uri"]
    path = write_study(tmp_path, "served", [SLOW, "gru"], trials=2, seeds=2, epochs=3)
    cells = {c.unit: c for c in cells_of(path)}
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch_live, args=(uri, "tprbench/served", stop, seen), daemon=True)
    watcher.start()
    server_root = tmp_path / "server-root"
    try:
        run_study(path, server_root, tracking_uri=uri)
    finally:
        stop.set()
        watcher.join(10)
    assert seen and seen[0][1] == "running", "no run showed per-epoch metrics while it was training"

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tprbench/served")
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"  # a model-development experiment
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # the server's artifact store
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    by_kind: dict[str, list] = {}
    for run in runs:
        by_kind.setdefault(run.data.tags["tprbench.kind"], []).append(run)
    (study_run,) = by_kind["study"]
    assert study_run.info.run_name == "served" and study_run.info.status == "FINISHED"
    cell_runs = {r.data.tags["tprbench.cell_id"]: r for r in by_kind["cell"]}
    assert set(cell_runs) == {c.id for c in cells.values()}
    for cell in cells.values():
        cr = cell_runs[cell.id]
        assert cr.info.run_name == cell.label and cr.info.status == "FINISHED"
        assert cr.data.tags["mlflow.parentRunId"] == study_run.info.run_id
        m = cr.data.metrics  # summary metrics: the runs table compares cells without `tprbench report`
        assert {
            "valid_acc_mean",
            "valid_acc_std",
            "test_test_easy_acc_mean",
            "best_search_valid_acc",
            "params_formula",
            "params_total",
            "seeds_finished",
        } <= set(m), sorted(m)
        assert m["seeds_finished"] == 2
    trial_runs = by_kind["run"]
    assert len(trial_runs) == 2 * (2 + 2)
    for run in trial_runs:
        tags = run.data.tags
        label = next(c.label for c in cells.values() if c.id == tags["tprbench.cell_id"])
        assert tags["mlflow.parentRunId"] == cell_runs[tags["tprbench.cell_id"]].info.run_id
        kind = "trial" if tags["tprbench.phase"] == "search" else "seed"
        assert run.info.run_name == f"{label} {kind} {tags['tprbench.trial' if kind == 'trial' else 'tprbench.seed']}"
        assert run.info.status == "FINISHED" and tags["tprbench.status"] == "finished"
        # The worker's times: the run lasts as long as its training did (not the 50 ms of the record).
        seconds = (run.info.end_time - run.info.start_time) / 1000
        assert seconds >= 0.8 * run.data.metrics["train_seconds"], (seconds, run.data.metrics["train_seconds"])
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert [h.step for h in sorted(history, key=lambda h: h.step)] == [1, 2, 3]
        stamps = [h.timestamp for h in sorted(history, key=lambda h: h.step)]
        assert stamps == sorted(stamps) and len(set(stamps)) == 3  # each epoch its own time
        assert run.info.start_time <= stamps[0] <= stamps[-1] <= run.info.end_time
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["best.pt"]
    # best.pt lives in the server's artifact store and downloads from anywhere that reaches the server.
    assert list(Path(mlflow_srv.info["artifacts"]).rglob("best.pt"))
    assert not (server_root / "mlartifacts").exists()
    got = client.download_artifacts(trial_runs[0].info.run_id, "best.pt", str(tmp_path))
    assert Path(got).stat().st_size > 0

    # The same study on the same code with the embedded store: the same report, byte for byte
    # (everything but timings, which no table shows; the speed figure plots them and is left out).
    embedded_root = seed_root(tmp_path / "embedded-root")
    run_study(path, embedded_root)
    out_server, out_embedded = tmp_path / "report-server", tmp_path / "report-embedded"
    write_report(uri, "served", out_server, seeds_wanted=2, command="tprbench report served")
    write_report(default_tracking_uri(embedded_root), "served", out_embedded, seeds_wanted=2, command="tprbench report served")
    names = sorted(p.name for p in out_server.iterdir() if not p.name.startswith("speed."))
    assert "table.csv" in names and "units.svg" in names and "curves.svg" in names, names
    assert names == sorted(p.name for p in out_embedded.iterdir() if not p.name.startswith("speed."))
    for name in names:
        assert (out_server / name).read_bytes() == (out_embedded / name).read_bytes(), name


# --------------------------------------------------------------------------------------------
# PostgreSQL as the Optuna storage


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    why = why_no_postgres()
    if why:
        pytest.skip(why)
    with running(
        lambda: postgres_server(tmp_path_factory.mktemp("pg")), cleanup=lambda s: shutil.rmtree(s.info["base"], ignore_errors=True)
    ) as server:
        yield server


def test_postgres_driver_killed_then_resumed(pg, tmp_path: Path) -> None:
    url = pg.info["url"]
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "pgkill", [SLOW, "gru"], trials=2, seeds=1, epochs=2)
    log = tmp_path / "driver.log"
    driver = start_driver(path, root, log, "--storage", url)
    kill_driver_when(driver, lambda: count_recorded(root) >= 2, timeout=300)
    kill_session(driver.pid)
    slow = next(c for c in cells_of(path) if c.unit == SLOW)
    assert len(optuna_trials(root, "pgkill", slow.id, url)) >= 1  # the trials live in PostgreSQL
    driver = start_driver(path, root, log, "--storage", url)
    finish(driver, log)
    assert "resuming:" in log.read_text()
    check_complete(path, root, storage=url)
    out = subprocess.run(
        [TPRBENCH, "study", "show", str(path), "--root", str(root), "--storage", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ray_environ()},
    )  # tests.plugin_units importable
    assert out.returncode == 0, out.stderr
    assert {r["status"] for r in json.loads(out.stdout)["cells"]} == {"done"}


def test_postgres_two_studies_driven_at_once(pg, tmp_path: Path) -> None:
    import optuna

    from harness.record.storage import open_storage

    url = pg.info["url"]
    drivers = []
    for name in ("pga", "pgb"):
        root = seed_root(tmp_path / name)
        path = write_study(tmp_path, name, ["gru", "lstm"], trials=2, seeds=1, epochs=1)
        log = tmp_path / f"{name}.log"
        drivers.append((path, root, log, start_driver(path, root, log, "--storage", url, "--num-cpus", "1")))
    for _, _, log, driver in drivers:
        finish(driver, log)
    names = set(optuna.get_all_study_names(open_storage(url)))
    for path, root, _, _ in drivers:
        check_complete(path, root, storage=url)
        assert_no_duplicates(root, path.stem)
        assert {f"{path.stem}/{c.id}" for c in cells_of(path)} <= names
    # The same cell in both studies: two Optuna studies, each with its label and metric for the dashboard.
    gru = next(c for c in cells_of(drivers[0][0]) if c.unit == "gru")
    for name in ("pga", "pgb"):
        st = optuna.load_study(study_name=f"{name}/{gru.id}", storage=open_storage(url))
        assert st.user_attrs["label"] == gru.label and st.metric_names == ["valid_acc"]


# --------------------------------------------------------------------------------------------
# MLflow: `report` of a 10k-run record through a tracking server


def _report_files(out: Path) -> dict[str, list[str]]:
    """The report's files without their "Regenerate with" line (it names the store it was read from)."""
    return {p.name: [ln for ln in p.read_text().splitlines() if "Regenerate with" not in ln] for p in sorted(out.iterdir())}


def test_report_of_a_10k_run_record_through_an_mlflow_server(tmp_path: Path, capsys) -> None:
    """`tprbench report --tracking-uri http://…` over a record of 10,021 runs (bench record's
    `tiny-5010`, written by the driver's record code): the same tables as read from the SQLite
    file, cold (no summary of ended runs: every run through MLflow's REST API) and warm. The
    seconds are printed, not asserted (speed targets live in `tprbench bench record
    --tracking-server`, docs/benchmarks-record.md)."""
    from harness.bench.record import CASES, build, tracking_server

    case = CASES["tiny-5010"]
    root = tmp_path / "record"
    info = build(case, root, say=lambda *_: None)
    assert info["mlflow_runs"] == case.runs == 10_021
    study = root / "studies" / f"{case.name}.toml"
    env = {**os.environ, **ray_environ()}

    def report(out: Path, *extra: str) -> float:
        t0 = time.perf_counter()
        done = subprocess.run(
            [TPRBENCH, "report", str(study), "--root", str(root), "--out", str(out), "--no-figures", *extra],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return time.perf_counter() - t0

    report(tmp_path / "file")
    want = _report_files(tmp_path / "file")
    assert {"table.md", "table.csv", "search.csv"} <= set(want)
    assert len(want["table.csv"]) > 5010  # a row per cell and split
    seconds = {}
    with tracking_server(root, say=lambda *_: None) as url:
        shutil.rmtree(root / "cache" / "summary", ignore_errors=True)
        seconds["cold"] = report(tmp_path / "cold", "--tracking-uri", url)
        seconds["warm"] = report(tmp_path / "warm", "--tracking-uri", url)
    for mode in ("cold", "warm"):
        assert _report_files(tmp_path / mode) == want, mode
    with capsys.disabled():  # in the CI log, whatever pytest's capture
        print(
            f"\n[record at scale] report of {case.runs:,} runs through mlflow server: cold {seconds['cold']:.1f} s, "
            f"warm {seconds['warm']:.1f} s (load {os.getloadavg()[0]:.1f})"
        )
