"""harness.record.storage.journal_trial_states reads trial states from an Optuna journal without Optuna's
replay: it must give exactly what Optuna's JournalStorage gives, for every state, a
deleted-and-recreated study, a second writer's records, a torn last record and a damaged one."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from harness.record.storage import JournalError, journal_trial_states, read_trial_states, trial_states

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _journal(path: Path) -> list[str]:
    storage = JournalStorage(JournalFileBackend(str(path)))
    names = []
    for k in range(4):
        name = f"s/{k}"
        names.append(name)
        study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
        study.set_user_attr("label", name)
        for j in range(5):
            trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
            trial.report(0.1 * j, 0)
            trial.set_user_attr("run", j)
            if j == 0:
                study.tell(trial, 0.5)
            elif j == 1:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            elif j == 2:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            # j = 3, 4: left RUNNING (a driver that died)
        study.enqueue_trial({"lr": 1e-3})  # WAITING
    optuna.delete_study(study_name="s/1", storage=storage)
    again = optuna.create_study(study_name="s/1", storage=storage, direction="maximize")
    t = again.ask()
    again.tell(t, 0.7)
    try:  # a second create of a live name is refused (and must not create a study in the reader)
        optuna.create_study(study_name="s/2", storage=storage)
    except optuna.exceptions.DuplicatedStudyError:
        pass
    return names + ["missing"]


def _optuna(path: Path, names: list[str]):
    return trial_states(JournalStorage(JournalFileBackend(str(path))), names)


def test_the_same_states_as_optunas_replay(tmp_path: Path) -> None:
    path = tmp_path / "optuna.journal"
    names = _journal(path)
    want = _optuna(path, names)
    got = journal_trial_states(path, names)
    assert got == want
    assert {s for _, _, s in want["s/0"]} == {"COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"}
    assert "missing" not in got and len(got["s/1"]) == 1
    assert read_trial_states(f"journal://{path}", names) == want
    assert read_trial_states(f"journal://{tmp_path / 'none.journal'}", names) == {}
    assert not (tmp_path / "none.journal").exists()


def test_a_torn_last_record_is_skipped_and_a_damaged_one_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "optuna.journal"
    names = _journal(path)
    good = path.read_bytes()
    path.write_bytes(good + b'{"op_code":6,"worker_id":"x","trial_id":3,"state":1,"val')  # torn: no newline
    assert journal_trial_states(path, names) == _optuna(path, names)
    path.write_bytes(good + b'{"op_code":6,"worker_id":"x","trial_id":3,"sta\n')  # undecodable last line
    assert journal_trial_states(path, names) == _optuna(path, names)
    lines = good.split(b"\n")
    lines[3] = b'{"op_code":4,"study_id":0,"stat'
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match="line 4"):
        journal_trial_states(path, names)
