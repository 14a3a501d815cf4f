"""Planning: each cell's state from its record, its Optuna study, and the next job it gives.

A part of `StudyRunner` (harness/driver/runner.py), which inherits it: these methods read and
set the runner's attributes (`study`, `cells`, `force`, `work_dir`, `cache_dir`, `until_epoch`,
`storage_url`, `tracker`) and call its `_say` and the record's `_set_cell_tags`
(harness/driver/results.py). They are kept apart because they answer one question — what does
this cell still need, and what is the next job to send? — from what the record holds and what
Optuna proposes, without touching Ray.

Public for `tprbench bench record` (harness/bench/record.py), which writes a synthetic record
through the same rules without running anything: `cell_study`, `trial_job`, `seed_job`,
`final_params`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.result import CHECKPOINT, RunStatus, is_diverged, paused_epoch

from ..record.contract import RunKey, Tag, is_trial_key, will_retry
from ..record.retry import with_retry
from ..record.storage import TrialState, cell_study_name, display_url, open_storage
from ..study.search_space import defaults, make_pruner, suggest
from .cells import SEARCH_SEED_OFFSET, CellState, CellStatus, Job, count_trials, params_hash
from .jobs import TrialRef, WorkerJob
from .status import describe_optuna_study

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


class CellPlanning:
    """Cell states, their Optuna studies (opened lazily), final parameters and the next job."""

    # Set by StudyRunner.__init__ (harness/driver/runner.py); annotated here for the reader.
    study: Study
    cells: list[Cell]
    storage_url: str
    _storage: Any

    @property
    def storage(self) -> Any:
        """The Optuna storage, opened (a journal replayed, a torn last record repaired) when first
        needed: a rerun with nothing to do reads trial states from the journal and never opens it."""
        if self._storage is None:
            self._storage = with_retry(
                lambda: open_storage(self.storage_url, notify=self._say), f"Optuna storage {display_url(self.storage_url)}", self._say
            )
        return self._storage

    @storage.setter
    def storage(self, storage: Any) -> None:  # an already open storage (tests, `tprbench bench record`)
        self._storage = storage

    def _optuna_name(self, cell: Cell) -> str:
        return cell_study_name(self.study.name, cell.id)

    def _optuna_study(self, cell: Cell):
        """The cell's Optuna study, created if it does not exist (one journal append)."""
        import optuna

        study = with_retry(
            lambda: optuna.create_study(
                study_name=self._optuna_name(cell),
                storage=self.storage,
                direction=cell.direction,
                sampler=self._sampler(cell, 0),
                pruner=make_pruner(self.study.pruner),
                load_if_exists=True,
            ),
            f"Optuna storage {display_url(self.storage_url)}",
            self._say,
        )
        with_retry(lambda: describe_optuna_study(study, cell, self.study.name), f"Optuna storage {display_url(self.storage_url)}", self._say)
        return study

    def cell_study(self, st: CellState):
        """The cell's Optuna study, opened (or created) when first needed: a rerun with nothing
        to do, and a study without search trials, never open one per cell."""
        if st.study is None:
            st.study = self._optuna_study(st.cell)
        return st.study

    @staticmethod
    def _sampler(cell: Cell, number: int):
        """The sampler that proposes trial `number` of a cell, seeded by (cell id, trial number).

        One seeded sampler per study would make a restarted driver draw its first random
        numbers again: the first trial asked after a restart got the parameters of trial 0 (a
        duplicate search point, and results that differ from an uninterrupted run). Seeding per
        trial makes each trial's proposal independent of restarts (TPE still conditions on the
        trials finished at that moment)."""
        import optuna

        seed = int(hashlib.sha256(f"{cell.id}/{number}".encode()).hexdigest()[:8], 16)
        return optuna.samplers.TPESampler(seed=seed)

    def _cell_state(self, cell: Cell, records: dict[str, Any], trials: list[tuple[int, int, str]], tags: dict[str, str]) -> CellState:
        """A cell's state from what the record holds: its runs by run key, its Optuna trials as
        (number, trial id, state) and its cell run's tags — all read in bulk by `_open_record`."""
        st = CellState(cell, None, self.study.study.trials, self.study.study.seeds)
        if self.force:
            import optuna

            for rec in records.values():
                self.tracker.retry(lambda run_id=rec.run_id: self.tracker.client.delete_run(run_id), "delete run")
            records, trials = {}, []
            tags = {k: v for k, v in tags.items() if k not in (Tag.FINAL_PARAMS, Tag.FINAL_PARAMS_HASH, Tag.FINAL_TRIALS)}
            try:
                optuna.delete_study(study_name=self._optuna_name(cell), storage=self.storage)
            except KeyError:
                pass
            # The cell's checkpoints and result.json files go too: a finished run directory is
            # returned as is by `train`, so without this --force recomputed nothing.
            shutil.rmtree(self.work_dir / cell.id, ignore_errors=True)
        st.records = records
        st.tags = dict(tags)
        trials = self._give_up_errored(st, trials)
        st.trials_done, st.trials_failed, st.trials_pruned, st.stale = count_trials(trials)
        st.retried += sum(self._errored(st, RunKey.trial(cell.id, number)) is not None for number, _ in st.stale)
        st.to_ask = max(st.trials_wanted - st.trials_done - len(st.stale), 0)
        st.trials_wanted = max(st.trials_wanted, st.trials_done + len(st.stale))
        at_stage = [t for t in st.stale if self._paused_at_stage(st.records.get(str(RunKey.trial(cell.id, t[0]))))]
        st.paused += len(at_stage)  # unfinished in Optuna, but at this stage's epoch: left as they are
        st.stale = [t for t in st.stale if t not in at_stage]
        return st

    @staticmethod
    def _errored(st: CellState, key: RunKey) -> Any:
        rec = st.records.get(str(key))
        return rec if rec is not None and rec.status == RunStatus.ERRORED else None

    def _give_up_errored(self, st: CellState, trials: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        """Trials left unfinished because they errored `max_attempts()` times are failed in Optuna
        now, so the search completes without them; returns the trials with their states after that."""
        from optuna.trial import TrialState as OptunaState

        out = []
        for number, trial_id, state in trials:
            rec = self._errored(st, RunKey.trial(st.cell.id, number))
            if state == TrialState.RUNNING and rec is not None and not will_retry(rec.status, rec.tags):
                with_retry(
                    lambda n=number: self.cell_study(st).tell(n, state=OptunaState.FAIL, skip_if_finished=True),
                    f"Optuna storage {display_url(self.storage_url)}",
                    self._say,
                )
                state = TrialState.FAIL
            out.append((number, trial_id, state))
        for key, rec in st.records.items():  # trials that errored past the cap keep the cell errored
            if is_trial_key(key) and rec.status == RunStatus.ERRORED and not will_retry(rec.status, rec.tags):
                st.note_errored(rec.tags.get(Tag.REASON, ""))
        return out

    def final_params(self, st: CellState) -> dict[str, Any] | None:
        space = st.cell.search
        if st.trials_wanted == 0:
            return defaults(space)
        # Chosen once from the search: recorded with the number of trials it saw, and current
        # while that number is (trials are only ever added), so a rerun opens no Optuna study.
        if st.recorded_final_hash():
            return json.loads(st.tags[Tag.FINAL_PARAMS])
        from optuna.trial import TrialState as OptunaState

        study = self.cell_study(st)
        complete = [t for t in study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,))]
        if not complete:
            return None
        best = study.best_trial
        return {**defaults(space), **best.params, **best.user_attrs.get("fixed", {})}

    def _plan_final(self, st: CellState) -> None:
        params = self.final_params(st)
        if params is None:
            # No trial completed: every one diverged or was pruned (a result: failed), or some
            # errored past the retry cap (not a result: the cell is errored, `study show` says why).
            st.note = CellStatus.ERRORED if st.errored else f"{CellStatus.FAILED}: no search trial completed"
            return
        st.final_params = params
        h = params_hash(params)
        # The report reads which seed runs are current from the cell's record.
        self._set_cell_tags(st, {Tag.FINAL_PARAMS_HASH: h, Tag.FINAL_PARAMS: json.dumps(params, sort_keys=True), Tag.FINAL_TRIALS: st.trials_done})
        recorded = {s: st.records.get(str(RunKey.seed(st.cell.id, s, h))) for s in range(st.seeds_wanted)}
        done = [s for s, rec in recorded.items() if rec is not None and not will_retry(rec.status, rec.tags)]
        st.seeds_done = len(done)
        st.seeds_failed = sum(is_diverged(recorded[s].status) for s in done)
        for s in done:  # seeds that errored past the cap
            if recorded[s].status == RunStatus.ERRORED:
                st.note_errored(recorded[s].tags.get(Tag.REASON, ""))
        st.final_todo = [s for s in range(st.seeds_wanted) if s not in done]
        at_stage = [s for s in st.final_todo if self._paused_at_stage(recorded[s])]
        st.paused += len(at_stage)
        st.final_todo = [s for s in st.final_todo if s not in at_stage]
        st.retried += sum(recorded[s] is not None and recorded[s].status == RunStatus.ERRORED for s in st.final_todo)
        paused = [s for s in st.final_todo if recorded[s] is not None and recorded[s].status == RunStatus.PAUSED]

        def checkpointed(seed: int) -> bool:
            return (RunKey.seed(st.cell.id, seed, h).run_dir(self.work_dir) / CHECKPOINT).exists()

        saved = sum(checkpointed(s) for s in paused)
        st.continued += saved
        st.started_over += len(paused) - saved
        if st.tags:  # a driver ran this cell before: a seed it had in flight when it stopped has no record, maybe a checkpoint
            st.interrupted += sum(checkpointed(s) for s in st.final_todo if recorded[s] is None)

    def _paused_at_stage(self, rec: Any) -> bool:
        """A run recorded paused at this stage's epoch (`--until-epoch`) or later is not dispatched
        again: a worker would load its checkpoint only to pause it at once (~30 s a run on this
        project's machine; thousands of worker-minutes in a study of thousands of cells)."""
        if rec is None or rec.status != RunStatus.PAUSED or self.until_epoch is None:
            return False
        epoch = paused_epoch(rec.tags.get(Tag.REASON))
        return epoch is not None and epoch >= self.until_epoch

    def _has_work(self, st: CellState) -> bool:
        if st.stale or st.to_ask:
            return True
        if st.trials_done < st.trials_wanted:
            return True
        if st.final_params is None and not st.note:
            self._plan_final(st)
        return bool(st.final_todo)

    def _next_job(self, st: CellState) -> Job | None:
        cell = st.cell
        t0 = time.perf_counter()
        if st.stale:
            number, trial_id = st.stale.pop(0)
            return self.trial_job(st, number, trial_id, t0)
        if st.to_ask:
            st.to_ask -= 1
            study = self.cell_study(st)
            trial = with_retry(study.ask, f"Optuna storage {display_url(self.storage_url)}", self._say)
            return self.trial_job(st, trial.number, trial._trial_id, t0)
        if st.running_search or st.trials_done < st.trials_wanted or st.note:
            return None
        if st.final_params is None:
            self._plan_final(st)
        if st.final_todo:
            return self.seed_job(cell, st.final_todo.pop(0), st.final_params)
        return None

    def seed_job(self, cell: Cell, seed: int, params: dict[str, Any]) -> Job:
        """The final-phase run of `seed` with the cell's final parameters (its run key names their hash)."""
        key = RunKey.seed(cell.id, seed, params_hash(params))
        return Job(cell, key, self._work(cell, key.number, dict(params), key.run_dir(self.work_dir)))

    def _work(self, cell: Cell, seed: int, hparams: dict[str, Any], run_dir: Path, trial: TrialRef | None = None) -> WorkerJob:
        res = self.study.resources
        return WorkerJob.for_cell(
            cell,
            seed=seed,
            hparams=hparams,
            run_dir=str(run_dir),
            cache_dir=str(self.cache_dir),
            threads=res.threads,
            trial=trial,
            deterministic=getattr(self.study, "deterministic", True),
            until_epoch=self.until_epoch,
        )

    def trial_job(self, st: CellState, number: int, trial_id: int, t0: float | None = None) -> Job:
        import optuna

        study = self.cell_study(st)

        def propose() -> dict[str, Any]:  # idempotent: stored values come back for a re-dispatched trial
            study.sampler = self._sampler(st.cell, number)
            trial = optuna.trial.Trial(study, trial_id)
            params = suggest(trial, st.cell.search)
            trial.set_user_attr("fixed", {k: v for k, v in params.items() if k not in trial.params})
            return params

        params = with_retry(propose, f"Optuna storage {display_url(self.storage_url)}", self._say)
        st.running_search += 1
        ref = TrialRef(self.storage_url, study.study_name, trial_id, _dump(self.study.pruner))
        key = RunKey.trial(st.cell.id, number)
        job = Job(st.cell, key, self._work(st.cell, SEARCH_SEED_OFFSET + number, params, key.run_dir(self.work_dir), ref))
        job.prepare_seconds = time.perf_counter() - t0 if t0 is not None else 0.0
        return job

    def _tell(self, st: CellState, job: Job, value: float | None = None, state: Any = None) -> None:
        """Optuna `tell`, retried while the storage is unavailable (skip_if_finished: idempotent)."""
        with_retry(
            lambda: self.cell_study(st).tell(job.trial_number, value, state=state, skip_if_finished=True),
            f"Optuna storage {display_url(self.storage_url)}",
            self._say,
        )


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json") if hasattr(model, "model_dump") else model
