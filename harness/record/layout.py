"""A study's run root (`--root`, default ./runs): every file and folder in it, named here only.

    <root>/
    ├── mlflow.db            the MLflow record (a SQLite store; `DB`)
    ├── mlflow.db.gz         a committed record, compressed (`GZ`: records/<study>/, read-only)
    ├── optuna.journal       the Optuna storage of every cell's search (`JOURNAL`)
    ├── mlartifacts/         a local store's artifacts: each run's best.pt (`ARTIFACTS`)
    ├── work/<study>/        each run's directory: <cell>/trial-<n>, <cell>/seed-<s>-<hash> (`WORK`)
    ├── locks/<study>.lock   one driver per study (`LOCKS`)
    ├── snapshots/           the record's snapshots (harness.record.guard; `SNAPSHOTS`)
    ├── train/<fingerprint>/ `tprbench train` run directories (`TRAIN`)
    └── cache/               prepared data (`CACHE`), the summary of ended runs (cache/summary)
                             and the record check's stamps (cache/record-check)

Imports nothing from the project: `study show` and the record's leaf modules import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DB = "mlflow.db"
GZ = DB + ".gz"
JOURNAL = "optuna.journal"
ARTIFACTS = "mlartifacts"
WORK = "work"
LOCKS = "locks"
SNAPSHOTS = "snapshots"
TRAIN = "train"
CACHE = "cache"
SUMMARY = "summary"  # under cache/
RECORD_CHECK = "record-check"  # under cache/
SQLITE = "sqlite:///"  # the URI scheme of a SQLite MLflow store
JOURNAL_PREFIX = "journal://"  # Optuna's journal file storage, as --storage names it


def user_cache(*parts: str) -> Path:
    """`$XDG_CACHE_HOME/tprbench/<parts>` (~/.cache/tprbench/...): what this machine keeps for any
    root (committed records decompressed, the empty MLflow store new roots copy). Not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).joinpath("tprbench", *parts)


@dataclass(frozen=True)
class RunRoot:
    """The paths of one run root (nothing is created or resolved: `RunRoot(root.resolve())` for absolute ones)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def db(self) -> Path:
        return self.path / DB

    @property
    def gz(self) -> Path:
        return self.path / GZ

    @property
    def journal(self) -> Path:
        return self.path / JOURNAL

    @property
    def artifacts(self) -> Path:
        return self.path / ARTIFACTS

    @property
    def work(self) -> Path:
        return self.path / WORK

    def work_dir(self, study: str) -> Path:
        """Where a study's runs train (harness.record.contract.RunKey.run_dir under it)."""
        return self.work / study

    @property
    def locks(self) -> Path:
        return self.path / LOCKS

    def lock(self, study: str) -> Path:
        return self.locks / f"{study}.lock"

    @property
    def snapshots(self) -> Path:
        return self.path / SNAPSHOTS

    @property
    def train(self) -> Path:
        return self.path / TRAIN

    @property
    def cache(self) -> Path:
        return self.path / CACHE

    @property
    def summary(self) -> Path:
        return self.cache / SUMMARY

    @property
    def record_check(self) -> Path:
        return self.cache / RECORD_CHECK

    @property
    def tracking_uri(self) -> str:
        """The MLflow URI of the root's SQLite record (absolute)."""
        return sqlite_uri(self.db.resolve())

    @property
    def storage_url(self) -> str:
        """The Optuna journal storage URL of the root (absolute)."""
        return JOURNAL_PREFIX + str(self.journal.resolve())


def sqlite_uri(path: Path | str) -> str:
    """The MLflow URI of a SQLite store file."""
    return f"{SQLITE}{path}"
