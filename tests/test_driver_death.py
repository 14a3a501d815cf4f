"""A driver SIGKILLed while it closes a study, with the real store and real processes.

`tprbench run` (a subprocess in its own session, starting its own local Ray) records its last
run and is killed at the exact moment it starts closing the record (`TPRBENCH_FAULT_AT=closing`,
harness/faults.py): its cell run and study run are left RUNNING without summary metrics, and no
snapshot is taken. Then:

- every process of that driver's session (Ray's GCS, raylet, agents, workers) is gone within
  seconds, by itself: the driver's watchdog (harness/driver/ray_watchdog.py) ends what Ray's own
  fate-sharing leaves (its two agents, which do not carry the watchdog's token, lived ~60 s under
  PID 1 before it followed the token holders' children);
- the rerun trains nothing and needs no Ray: it closes what the dead driver left open as a
  finished close does (summary metrics, FINISHED, a snapshot) and says "nothing to do";
- a third run writes nothing at all.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.ray_helpers import _alive, kill_session, run_study, seed_root, session_pids, start_driver, write_study

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]
# The watchdog polls every 0.25 s and usually leaves nothing within seconds. Ray's two agents do not
# carry its token (their environment is Ray's own), so it follows the token holders' children while
# the driver lives (tests/test_ray_watchdog.py); without that they lived ~60 s, Ray's GCS reconnect
# timeout. 15 s leaves slack for a loaded machine.
RAY_GONE_S = 15.0


def _runs(root: Path) -> dict[str, tuple[str, set[str]]]:
    """{kind/cell: (MLflow status, metric keys)} of the study and cell runs, read with plain SQL."""
    import sqlite3

    con = sqlite3.connect(f"file:{root / 'mlflow.db'}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT r.run_uuid, r.status, k.value, coalesce(c.value, '') FROM runs r "
            "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'tprbench.kind' "
            "LEFT JOIN tags c ON c.run_uuid = r.run_uuid AND c.key = 'tprbench.cell_id' "
            "WHERE k.value IN ('study', 'cell') AND r.lifecycle_stage = 'active'"
        ).fetchall()
        out = {}
        for run_id, status, kind, cell in rows:
            keys = {m[0] for m in con.execute("SELECT key FROM latest_metrics WHERE run_uuid = ?", (run_id,))}
            out[f"{kind}/{cell}".rstrip("/")] = (status, keys)
        return out
    finally:
        con.close()


def _session_left(sid: int, within: float) -> tuple[float, list[str]]:
    """Seconds until no process of session `sid` is alive (at most `within`), and what was left."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if not [p for p in session_pids(sid) if _alive(p)]:
            return time.monotonic() - t0, []
        time.sleep(0.2)
    names = []
    for pid in session_pids(sid):
        try:
            names.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace"))
        except OSError:
            pass
    return time.monotonic() - t0, names


def test_a_driver_killed_while_closing_is_closed_by_the_rerun_and_leaves_no_ray_process(tmp_path: Path) -> None:
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "closing", ["gru"], trials=1, seeds=1, epochs=1)
    log = tmp_path / "driver.log"
    proc = start_driver(path, root, log, "--num-cpus", "1", env={"TPRBENCH_FAULT_AT": "closing"})
    try:
        rc = proc.wait(timeout=400)
        gone_after, left = _session_left(proc.pid, RAY_GONE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_session(proc.pid, grace=0)
    print(f"\nkilled at closing (rc {rc}); its Ray processes gone {gone_after:.1f} s later")
    assert rc == -9, log.read_text()[-3000:]
    assert not left, f"Ray processes of the killed driver still alive after {RAY_GONE_S} s: {left}"

    killed = _runs(root)
    assert {k: v[0] for k, v in killed.items()} == {"study": "RUNNING", **{k: "RUNNING" for k in killed if k != "study"}}
    (cell_key,) = [k for k in killed if k.startswith("cell/")]
    assert "seeds_finished" not in killed[cell_key][1]  # the state the issue describes: no summary metrics
    assert not list((root / "snapshots").glob("mlflow-*.db"))

    runner, summary = run_study(path, root)  # no Ray started here: nothing is left to train
    assert any("closed what a stopped driver left open (1 cell run(s) and the study run)" in e for e in runner.events), runner.events
    assert any(e.startswith("nothing to do") for e in runner.events), runner.events
    closed = _runs(root)
    assert {k: v[0] for k, v in closed.items()} == {"study": "FINISHED", cell_key: "FINISHED"}
    assert {"seeds_finished", "best_search_valid_acc"} <= closed[cell_key][1], closed[cell_key][1]
    assert any(k.startswith("test_") and k.endswith("_mean") for k in closed[cell_key][1])
    assert list((root / "snapshots").glob("mlflow-*.db")), "no snapshot of the closed record"
    assert summary["states"] == {cell_key.split("/", 1)[1]: "done"}

    before = (root / "mlflow.db").stat().st_mtime_ns
    again, _ = run_study(path, root)
    assert [e for e in again.events if "closed" in e] == [] and any(e.startswith("nothing to do") for e in again.events)
    assert (root / "mlflow.db").stat().st_mtime_ns == before  # a no-op rerun writes nothing
