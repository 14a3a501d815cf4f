"""A new SQLite store is copied from an empty one migrated once per MLflow version
(harness.record.schema_template): the copy must be the store MLflow's migrations would have made,
and a missing or damaged copy must only cost the time it was meant to save."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from harness.record import schema_template
from harness.record.writer import Tracker, create_sqlite_store


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "tprbench" / schema_template.FOLDER


def _schema(db: Path) -> list[tuple]:
    with closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def _rows(db: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(db)) as con:
        return con.execute(sql).fetchall()


def test_the_first_store_migrates_and_keeps_an_empty_copy_the_next_store_is(cache, tmp_path):
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    create_sqlite_store(first)
    (template,) = cache.iterdir()
    assert template == schema_template.template_path() and template.name.startswith("mlflow-")
    assert _rows(first, "SELECT experiment_id, name FROM experiments") == [(0, "Default")]  # migrated by MLflow
    assert _rows(template, "SELECT count(*) FROM experiments") == [(0,)]  # the Default experiment is the opener's

    create_sqlite_store(second)
    assert second.read_bytes() == template.read_bytes()
    assert _schema(second) == _schema(first)
    for table in ("alembic_version", "workspaces"):
        assert _rows(second, f"SELECT * FROM {table}") == _rows(first, f"SELECT * FROM {table}")


def test_mlflow_opens_a_copied_store_and_writes_its_default_experiment_as_a_migrated_one(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    create_sqlite_store(tmp_path / "warm" / "mlflow.db")  # leaves the copy
    root = tmp_path / "root"
    tracker = Tracker(f"sqlite:///{root / 'mlflow.db'}", "s", artifact_root=root / "mlartifacts")
    assert tracker.experiment_id == "1"
    default, study = _rows(root / "mlflow.db", "SELECT experiment_id, name, artifact_location FROM experiments ORDER BY experiment_id")
    assert default == (0, "Default", str(tmp_path / "mlruns" / "0"))  # MLflow's ./mlruns under this process's directory
    assert study[1:] == ("tprbench/s", (root / "mlartifacts").resolve().as_uri())


def test_a_damaged_copy_is_dropped_and_the_store_migrated(cache, tmp_path):
    create_sqlite_store(tmp_path / "a" / "mlflow.db")
    template = schema_template.template_path()
    template.write_bytes(b"not a database" * 100)
    db = tmp_path / "b" / "mlflow.db"
    create_sqlite_store(db)
    assert _rows(db, "SELECT name FROM experiments") == [("Default",)]  # migrated, not copied
    assert not list(db.parent.glob("*.creating"))
    create_sqlite_store(tmp_path / "c" / "mlflow.db")  # and a sound copy is kept again
    assert _rows(template, "SELECT count(*) FROM alembic_version") == [(1,)]


def test_an_unwritable_cache_only_costs_the_migration(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    db = tmp_path / "r" / "mlflow.db"
    create_sqlite_store(db)
    assert _rows(db, "SELECT name FROM experiments") == [("Default",)]
    assert schema_template.copy_to(tmp_path / "x.db") is False and not (tmp_path / "x.db").exists()
