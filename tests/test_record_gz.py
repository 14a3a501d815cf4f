"""Committed records are gzip-compressed (harness/record/compressed.py): the records under
records/ made the tracked tree 77 MB, over the 64 MiB the GPU machines' tree copy accepts.

`record save` writes `mlflow.db.gz`, the same bytes for the same database; `record load` gives the
database back, plain; a command that reads a folder holding only `mlflow.db.gz` reads a
decompressed copy in the user's cache, the same runs as from the plain file, and writes nothing
into the folder; `run --root` on it refuses in one line; a damaged `.gz` is one line naming it.
Checked on the golden record (tests/fixtures/record-v1).
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from harness.cli import main
from harness.record.carry import load, save
from harness.record.compressed import DB, GZ, cache_home, reading_root
from harness.record.guard import RecordCorrupt
from harness.report.papers import record_problem

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "record-v1"
STUDY = FIXTURE / "study.toml"
EXPECTED = FIXTURE / "expected"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch) -> Path:
    """Every test decompresses into its own cache, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def _plain_root(root: Path) -> Path:
    root.mkdir(parents=True)
    with gzip.open(FIXTURE / "mlflow.db.gz", "rb") as src, open(root / DB, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return root


def _saved(tmp_path: Path) -> tuple[Path, Path]:
    """(a run directory holding the golden record, the folder `record save` wrote from it)."""
    root = _plain_root(tmp_path / "root")
    save(root, tmp_path / "records" / "golden")
    return root, tmp_path / "records" / "golden"


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _dump(db: Path) -> list[str]:
    """The database's content, the experiments' artifact folder left out (`load` points it at its root)."""
    copy = db.with_name(db.name + ".dump")
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as con:
        con.execute("UPDATE experiments SET artifact_location = ''")
        lines = list(con.iterdump())
    con.close()
    copy.unlink()
    return lines


def test_save_writes_the_same_gz_for_the_same_database_and_removes_an_older_plain_one(tmp_path: Path) -> None:
    root, saved = _saved(tmp_path)
    assert (saved / GZ).is_file() and not (saved / DB).exists()
    first = (saved / GZ).read_bytes()
    assert first[3] == 0 and first[4:8] == b"\0\0\0\0"  # no file name, mtime 0: nothing of the day or the path
    (saved / DB).write_bytes(b"an older save's plain record")
    save(root, saved)
    assert (saved / GZ).read_bytes() == first
    assert not (saved / DB).exists()
    assert sorted(p.name for p in saved.iterdir()) == ["mlflow.db.gz", "state"]  # no temporary file left


def test_load_gives_back_the_saved_database_from_a_gz_and_from_an_older_plain_save(tmp_path: Path) -> None:
    root, saved = _saved(tmp_path)
    load(saved, tmp_path / "fresh")
    assert _dump(tmp_path / "fresh" / DB) == _dump(root / DB)
    older = _plain_root(tmp_path / "older-save")  # a folder saved before records were compressed
    load(older, tmp_path / "fresh-2")
    assert _dump(tmp_path / "fresh-2" / DB) == _dump(root / DB)
    with pytest.raises(Exception, match="exists; load into a fresh --root"):
        load(saved, tmp_path / "records" / "golden")  # a folder holding a compressed record is not fresh


def test_a_reader_reads_the_same_runs_from_a_gz_only_folder_and_writes_nothing_into_it(tmp_path: Path, own_cache: Path, capsys) -> None:
    root, saved = _saved(tmp_path)
    before = _tree(saved)
    for where, out in ((root, "plain"), (saved, "gz")):
        assert main(["report", "golden", "--root", str(where), "--out", str(tmp_path / out), "--no-figures", "--seeds", "2"]) == 0
    for name in ("table.csv", "search.csv"):
        assert (tmp_path / "gz" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes() == (EXPECTED / name).read_bytes(), name
    tables = [[line for line in (tmp_path / out / "table.md").read_text().splitlines() if "--root" not in line] for out in ("plain", "gz")]
    assert tables[0] == tables[1]
    compared = ["compare", "golden", "golden", "--root-a", str(root), "--root-b", str(saved), "--seeds", "2", "--csv", str(tmp_path / "c.csv")]
    assert main(compared) == 0
    assert (tmp_path / "c.csv").read_bytes() == (EXPECTED / "compare.csv").read_bytes()
    assert record_problem(saved) is None
    capsys.readouterr()
    assert main(["record", "check", "--root", str(saved)]) == 0
    assert "ok (SQLite quick_check of its decompressed copy" in capsys.readouterr().out
    assert _tree(saved) == before  # nothing written into the committed folder, not even a cache

    copy = reading_root(saved) / DB
    assert copy.parent.parent == cache_home() and copy.parent.is_relative_to(own_cache)
    assert _dump(copy) == _dump(root / DB)
    assert not copy.stat().st_mode & 0o222  # read-only
    stamp = copy.stat().st_mtime_ns
    assert reading_root(saved) / DB == copy and copy.stat().st_mtime_ns == stamp  # decompressed once, then reused
    assert reading_root(root) == root  # a plain record is read where it is


def test_run_on_a_compressed_record_refuses_in_one_line_and_changes_nothing(tmp_path: Path, capsys) -> None:
    _, saved = _saved(tmp_path)
    before = _tree(saved)
    assert main(["run", str(STUDY), "--root", str(saved)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert f"{saved / GZ} is a committed record" in err[0] and f"tprbench record load --from {saved} --root DIR" in err[0]
    assert _tree(saved) == before


def test_an_empty_plain_file_beside_a_gz_is_refused_in_one_line_by_readers_and_writers(tmp_path: Path, capsys) -> None:
    _, saved = _saved(tmp_path)
    (saved / DB).touch()  # as `sqlite3.connect(path)` on a mistyped path leaves it
    before = _tree(saved)
    for argv in (
        ["report", str(STUDY), "--root", str(saved), "--out", str(tmp_path / "out"), "--no-figures"],
        ["run", str(STUDY), "--root", str(saved)],
    ):
        assert main(argv) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and f"{saved / DB} is an empty file beside the committed record {saved / GZ}" in err[0], err
    assert _tree(saved) == before


def test_a_damaged_gz_is_one_line_naming_the_file(tmp_path: Path, own_cache: Path, capsys) -> None:
    _, saved = _saved(tmp_path)
    data = (saved / GZ).read_bytes()
    (saved / GZ).write_bytes(data[: len(data) // 2])  # cut short, as by a failed copy
    assert main(["report", str(STUDY), "--root", str(saved), "--out", str(tmp_path / "out"), "--no-figures"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"{saved / GZ}: the compressed record is damaged" in err[0], err
    assert not list(own_cache.rglob(DB)) and not list(own_cache.rglob("*.tmp"))  # no half database kept
    with pytest.raises(RecordCorrupt, match=f"{saved / GZ}: the compressed record is damaged"):
        load(saved, tmp_path / "fresh")
    assert not (tmp_path / "fresh" / DB).exists() and not list((tmp_path / "fresh").glob("*.tmp"))
