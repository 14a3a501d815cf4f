"""The driver's ETA counts epochs, not runs (harness/driver/progress.py `EpochEta`).

It once divided the runs left by the mean run time: a staged study (`run --until-epoch 30`,
14 cells × 1 seed, 90 epochs) said "ETA 00:00:59" with three hours left, because runs already
paused at epoch 30 came back in seconds, untrained, and still counted as to do. Fake cell states
and results stand in for the driver; no Ray, no record.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from harness.driver.cells import CellState
from harness.driver.progress import EpochEta, summary_line
from harness.record.contract import RunKey, Tag, WorkerResult
from tasks.result import RunStatus, paused_epoch, paused_reason

H = "ab12cd34"  # the cells' final parameters' hash


def _state(i: int, epochs: int = 90, paused_at: int | None = None) -> CellState:
    """A cell of a study without search trials, planned by an earlier driver (its final
    parameters recorded), its seed 0 paused at `paused_at` if given; not planned by this one yet."""
    cell = SimpleNamespace(id=f"cell{i:02d}", label=f"logic/plain/d8/unit{i}", epochs=epochs)
    st = CellState(cell=cell, study=None, trials_wanted=0, seeds_wanted=1)
    st.tags = {Tag.FINAL_PARAMS_HASH: H, Tag.FINAL_PARAMS: "{}", Tag.FINAL_TRIALS: "0"}  # as the driver records a plan
    if paused_at is not None:
        tags = {Tag.REASON: paused_reason(paused_at, epochs, paused_at)}
        st.records = {_key(st): SimpleNamespace(status=RunStatus.PAUSED, tags=tags, metrics={})}
    return st


def _key(st: CellState) -> str:
    return str(RunKey.seed(st.cell.id, 0, H))


def _dispatch(eta: EpochEta, st: CellState) -> str:
    """What the driver does when it takes a cell's seed: plan it, pop the seed, submit."""
    st.final_params, st.final_todo = {}, []
    st.running += 1
    eta.dispatched(_key(st), st.cell)
    return _key(st)


def _runner(eta: EpochEta, until: int | None) -> SimpleNamespace:
    return SimpleNamespace(study=SimpleNamespace(name="s"), started=time.time() - 60, eta=eta, until_epoch=until)


def _train_live(eta: EpochEta, key: str, first: int, last: int, seconds: float, t0: float = 1000.0) -> None:
    """Live messages of epochs first..last, `seconds` apart (the first one's row says so too)."""
    for n, epoch in enumerate(range(first, last + 1)):
        eta.epoch(key, epoch, {"epoch": epoch, "epoch_seconds": seconds}, t0 + n * seconds)


def test_a_stage_ignores_runs_already_paused_at_its_boundary() -> None:
    """(a) Four runs paused at epoch 30 come back paused at once (their history, restored from the
    checkpoint, says 0.5 s an epoch: not this invocation's); two train at 60 s an epoch, at epoch
    10; eight wait. Left: 8 × 30 + 2 × 20 = 280 epochs × 60 s / 2 in flight = 2 h 20 min."""
    states = [_state(i, paused_at=30) for i in range(4)] + [_state(i) for i in range(4, 14)]
    eta = EpochEta(until_epoch=30)
    eta.start(states)
    for st in states[:4]:
        key = _dispatch(eta, st)
        history = [{"epoch": e, "epoch_seconds": 0.5} for e in range(1, 31)]
        result = WorkerResult(status=RunStatus.PAUSED, seconds=2.0, resumed_from_epoch=30, history=history)
        eta.ended(key, result)
        st.running -= 1
        st.paused += 1
    for st in states[4:6]:
        _train_live(eta, _dispatch(eta, st), 1, 10, 60.0)
    assert sum(eta.remaining(states).values()) == 280
    line = summary_line(_runner(eta, 30), states, 2)
    assert "seeds 0/14 · 2 running · stage: until epoch 30 (4 paused) · elapsed" in line, line
    assert line.endswith("ETA 02:20:00"), line


def test_resumed_runs_count_the_epochs_they_have_left_at_their_cells_cost() -> None:
    """(b) A run resumed at epoch 60 of a cheap cell (10 s an epoch, now at 62), a fresh run of a
    cell 3× as costly (30 s, at epoch 2), and a waiting run paused at 80 of a cell not measured
    yet (priced at the median of all: 20 s): 28 × 10 + 88 × 30 + 10 × 20 = 3120 s / 2 in flight."""
    cheap, costly, waiting = _state(0, paused_at=60), _state(1), _state(2, paused_at=80)
    states = [cheap, costly, waiting]
    eta = EpochEta()
    eta.start(states)
    _train_live(eta, _dispatch(eta, cheap), 61, 62, 10.0)
    _train_live(eta, _dispatch(eta, costly), 1, 2, 30.0)
    assert eta.remaining(states) == {"cell00": 28, "cell01": 88, "cell02": 10}
    line = summary_line(_runner(eta, None), states, 2)
    assert line.endswith("ETA 00:26:00") and "stage" not in line, line


def test_a_result_times_its_epochs_when_no_live_message_did() -> None:
    """Live metrics off: a finished run's epochs trained here (after its resume) are measured from
    its epoch times; a run's first epoch seen, from the trainer's `epoch_seconds`."""
    done, waiting = _state(0, epochs=4, paused_at=2), _state(1, epochs=4)
    eta = EpochEta()
    eta.start([done, waiting])
    key = _dispatch(eta, done)
    history = [{"epoch": e, "epoch_seconds": 7.0 if e == 3 else 0.5} for e in range(1, 5)]
    eta.ended(key, WorkerResult(status=RunStatus.FINISHED, resumed_from_epoch=2, history=history, epoch_times={3: 100.0, 4: 109.0}))
    assert list(eta.recent["cell00"]) == [7.0, 9.0] and not eta.running
    assert eta.seconds([done, waiting], 0) == 4 * 8.0


def test_no_epoch_measured_is_a_dash() -> None:
    """(c) Before any epoch is measured (a paused run back at once included) the ETA is `–`."""
    states = [_state(0, paused_at=30), _state(1)]
    eta = EpochEta(until_epoch=30)
    eta.start(states)
    eta.ended(_dispatch(eta, states[0]), WorkerResult(status=RunStatus.PAUSED, seconds=1.0, resumed_from_epoch=30))
    assert eta.remaining(states) == {"cell00": 0, "cell01": 30}
    assert summary_line(_runner(eta, 30), states, 1).endswith("ETA –")
    assert summary_line(SimpleNamespace(started=time.time()), states, 0).endswith("ETA –")  # a runner without one


def test_cells_done_or_planned_count_only_what_is_left() -> None:
    """A cell whose seed ended (recorded before this driver) is not left, planned or not; a cell
    still searching counts its trials to ask and every seed; a failed cell counts nothing."""
    ended = _state(0)
    ended.records = {_key(ended): SimpleNamespace(status=RunStatus.FINISHED, tags={}, metrics={})}
    searching = _state(1, epochs=10)
    searching.trials_wanted, searching.to_ask, searching.seeds_wanted = 4, 3, 2
    failed = _state(2)
    failed.note = "failed: no search trial completed"
    eta = EpochEta()
    eta.start([ended, searching, failed])
    assert eta.remaining([ended, searching, failed]) == {"cell00": 0, "cell01": 3 * 10 + 2 * 10, "cell02": 0}
    ended.final_params, ended.final_todo = {}, []
    assert eta.remaining([ended])["cell00"] == 0


def test_a_paused_runs_reason_gives_its_epoch_back() -> None:
    assert paused_epoch(paused_reason(30, 90, 30)) == 30
    assert paused_epoch("stopped after epoch 12: no better valid_acc") is None and paused_epoch(None) is None


def test_an_eta_past_a_day_keeps_its_hours() -> None:
    from harness.driver.progress import _clock

    assert _clock(2 * 86400 + 3 * 3600 + 61) == "51:01:01" and _clock(59) == "00:00:59"


def test_live_messages_reach_the_eta(monkeypatch) -> None:
    """harness/driver/live.py hands each epoch of a job in flight to `on_epoch`, MLflow run or not."""
    import ray

    from harness.driver.live import LiveRuns

    items = [("c/seed/0/h", 0.0, None, {}, 1.0), ("c/seed/0/h", 0.0, 1, {"epoch_seconds": 5.0}, 6.0), ("gone/seed/0/h", 0.0, 1, {}, 6.0)]
    sink = SimpleNamespace(take=SimpleNamespace(remote=lambda: "ref"))
    monkeypatch.setattr(ray, "wait", lambda refs, timeout: (refs, []))
    monkeypatch.setattr(ray, "get", lambda ref, timeout: items)
    seen: list[tuple] = []
    live = LiveRuns(SimpleNamespace(log_epochs=lambda *a: None), sink, print, on_epoch=lambda *a: seen.append(a))
    live.poll({"c/seed/0/h": object()}, lambda job, start: None)
    assert seen == [("c/seed/0/h", 1, {"epoch_seconds": 5.0}, 6.0)]
