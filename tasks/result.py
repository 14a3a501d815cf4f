"""What a training run ends as: its status (`RunStatus`) and its result (`RunResult`).

The first half of the record contract (the second is harness/record/contract.py). It lives in
`tasks/` because the trainer (tasks/training.py) produces both and `tasks/` never imports
`harness/`; the harness reads them from here. No torch, no imports from the project: a leaf
module that `study show`, the worker and the trainer import alike.

It also names the files a run directory holds (`CHECKPOINT`, `BEST_WEIGHTS`, `RESULT`): the
trainer writes them and the driver looks for them.

Statuses: `finished`, `pruned`, `paused` (`run --until-epoch`: the best model so far, continued
by the next run), `diverged` (the loss or the validation score became NaN/inf: a
result about the unit, shown as † in tables) and `errored` (the run could not be carried out —
an import error, out of memory, a lost node after retries, a store outage: not a result about
the unit; only the harness gives it). Records and result.json files written before `diverged`
and `errored` were told apart say `failed` for both (`RunStatus.LEGACY_FAILED`); readers treat
it as diverged, as tables always did.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

#: The files `train` keeps in a run's directory (harness.record.contract.RunKey.run_dir names it).
CHECKPOINT = "checkpoint.pt"  # after every epoch: a killed run resumes from it
BEST_WEIGHTS = "best.pt"  # the best epoch's weights (logged as the run's artifact)
RESULT = "result.json"  # the finished run's RunResult (a finished run is never trained again)


class RunStatus(StrEnum):
    """How a trial or seed run ended (the `tprbench.status` tag; equal to its string)."""

    FINISHED = "finished"
    PRUNED = "pruned"
    DIVERGED = "diverged"
    ERRORED = "errored"
    # Stopped on purpose after `run --until-epoch` N: its best model so far is tested and recorded,
    # its checkpoint stays, and the next `run` continues it (the record is then replaced).
    PAUSED = "paused"
    LEGACY_FAILED = "failed"  # diverged or errored, in records written before the two were told apart


#: The statuses a run is given now (not the legacy one).
STATUSES = (RunStatus.FINISHED, RunStatus.PRUNED, RunStatus.DIVERGED, RunStatus.ERRORED, RunStatus.PAUSED)
#: Records that the next record of their run key replaces.
REPLACEABLE = (RunStatus.ERRORED, RunStatus.PAUSED)


def paused_reason(epoch: int, epochs: int, until_epoch: int) -> str:
    """The reason a paused run is recorded with; `paused_epoch` reads the epoch back."""
    return f"paused after epoch {epoch} of {epochs} (until epoch {until_epoch})"


_PAUSED_AT = re.compile(r"paused after epoch (\d+) of ")


def paused_epoch(reason: str | None) -> int | None:
    """The epoch a paused run's checkpoint holds, from its recorded reason (None if it does not
    say): the driver's ETA credits a paused run with it without opening its checkpoint."""
    match = _PAUSED_AT.match(reason or "")
    return int(match.group(1)) if match else None


def is_failure(status: str | None) -> bool:
    """Diverged or errored (or a legacy `failed`): the run produced no score."""
    return status in (RunStatus.DIVERGED, RunStatus.ERRORED, RunStatus.LEGACY_FAILED)


def is_diverged(status: str | None) -> bool:
    """A result about the unit (NaN/inf): shown as † in tables. Errored runs never are."""
    return status in (RunStatus.DIVERGED, RunStatus.LEGACY_FAILED)


@dataclass
class RunResult:
    """What `tasks.training.train` returns and writes to the run directory's result.json."""

    status: RunStatus
    reason: str = ""
    best_epoch: int | None = None
    best_valid: float | None = None
    metric: str = ""  # the validation key that chose the best epoch, e.g. valid_acc
    direction: str = ""
    history: list[dict[str, float]] = field(default_factory=list)
    test: dict[str, dict[str, float]] = field(default_factory=dict)  # split → metrics of the best model
    params_formula: int | None = None
    params_total: int = 0
    seconds: float = 0.0
    resumed_from_epoch: int = 0
    hparams: dict[str, Any] = field(default_factory=dict)  # the resolved hyperparameters
    notes: list[str] = field(default_factory=list)  # things the run had to do (set a corrupt file aside, ...)
    reproducible: bool | None = None  # bitwise reproducible on the same machine and software

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """From a result.json's dict (unknown keys, e.g. the fingerprint, are ignored); a legacy
        `failed` reads as `diverged` (result.json files never hold errored runs)."""
        known = {f.name for f in fields(cls)}
        out = cls(**{k: v for k, v in data.items() if k in known})
        try:
            status = RunStatus(out.status)
        except ValueError:  # a status this version does not know: kept as written
            return out
        out.status = RunStatus.DIVERGED if status is RunStatus.LEGACY_FAILED else status
        return out
