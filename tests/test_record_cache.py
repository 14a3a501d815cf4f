"""A cache beside the record never changes a table, and never stops a reader.

One small record (3 cells, 1 trial and 2 seeds each: 13 MLflow runs, built through the
driver's record-writing code as `tprbench bench record` does). On it:

- bits flipped in the summary of ended runs (`<root>/cache/summary/*.parquet`, mtime kept) at
  positions spread over the whole file: every read still equals a full read of the record, and
  the file is rebuilt; without the digest check some of those files would be read with other
  numbers (counted here, so the test shows the danger it guards against);
- the finished record on a read-only mount: `report`, `study show` and `compare` print what
  they print on a writable root, write nothing, and say once that the cache could not be saved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # building the record and ~160 reads: ~40 s on a busy 2-core machine
STUDY = "bench-ro"


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    from harness.bench.record import Case, build

    root = tmp_path_factory.mktemp("cache-record")
    info = build(Case("ro", (8,), (2, 3), 1, 2, 2), root, say=lambda _text: None)
    assert info["mlflow_runs"] == 13
    shutil.rmtree(root / "cache" / "summary", ignore_errors=True)
    return root


def _uri(root: Path) -> str:
    return f"sqlite:///{root / 'mlflow.db'}"


def _ended(root: Path) -> dict:
    from harness.record.reader import RecordReader

    return RecordReader(_uri(root), STUDY, root=root).ended()


def _sorted(cols: dict) -> dict:
    order = sorted(range(len(cols["run_id"])), key=lambda i: cols["run_id"][i])
    return {k: [v[i] for i in order] for k, v in cols.items()}


def _flip(data: bytes, position: int, bit: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 1 << bit
    return bytes(out)


def _parses_with_other_values(data: bytes, good: dict) -> bool:
    """Whether a damaged file still reads as a table, with other values (what a reader without
    the digest would have used)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.record.summary import to_columns

    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read()
        return _sorted(to_columns(table)) != good
    except Exception:
        return False


def test_every_bit_flip_of_the_summary_is_rebuilt_never_used(record, monkeypatch) -> None:
    from harness.record.summary import digest_path

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "0")
    full = _sorted(_ended(record))
    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "1")
    assert _sorted(_ended(record)) == full  # builds the file
    (path,) = sorted((record / "cache" / "summary").glob("*.parquet"))
    good = path.read_bytes()
    assert digest_path(path).exists()
    stat = path.stat()
    positions = sorted({*range(0, len(good), max(len(good) // 120, 1)), *range(max(len(good) - 40, 0), len(good))})
    would_have_used = 0
    for n, position in enumerate(positions):
        damaged = _flip(good, position, n % 8)
        would_have_used += _parses_with_other_values(damaged, full)
        path.write_bytes(damaged)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the mtime kept: nothing but the bytes says so
        assert _sorted(_ended(record)) == full, f"bit {n % 8} of byte {position} changed what was read"
        assert path.read_bytes() != damaged, f"byte {position}: the damaged file was kept"
    assert len(positions) > 150
    assert would_have_used > 0, "no flip read as other numbers: the test no longer shows the danger"
    print(
        f"\n{len(positions)} flips over {len(good)} bytes: all rebuilt; {would_have_used} would have been read with other values without the digest"
    )


# -- a read-only record -------------------------------------------------------------------------


def _read_only_copy(record: Path, where: Path):
    """The record, copied and bind-mounted read-only at `where` (as root: permission bits do not
    stop root, a read-only mount does). None where mounting is not allowed."""
    src = where.with_name(where.name + "-src")
    shutil.copytree(record, src)
    where.mkdir()
    ok = subprocess.run(["mount", "--bind", str(src), str(where)], capture_output=True).returncode == 0
    if ok and subprocess.run(["mount", "-o", "remount,ro,bind", str(where)], capture_output=True).returncode == 0:
        return where
    if ok:
        subprocess.run(["umount", str(where)], capture_output=True)
    if os.geteuid() != 0:  # an ordinary user: permission bits are enough
        shutil.rmtree(where)
        src.rename(where)
        subprocess.run(["chmod", "-R", "a-w", str(where)], check=True)
        return where
    return None


def _tree(root: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def _commands(root: Path, out: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", STUDY, "--root", str(root), "--out", str(out), "--no-figures"],
        "study show": ["study", "show", str(root / "studies" / "ro.toml"), "--root", str(root), "--json"],
        "compare": ["compare", STUDY, STUDY, "--root", str(root)],
    }


def _run(argv: list[str], capsys) -> tuple[str, str]:
    from harness.cli import main
    from harness.record import cache_note

    cache_note._said.clear()  # once per process: each command here stands for one process
    capsys.readouterr()
    assert main(argv) == 0
    got = capsys.readouterr()
    return got.out, got.err


def test_readers_work_on_a_read_only_record(record, tmp_path, capsys) -> None:
    ro = _read_only_copy(record, tmp_path / "ro")
    if ro is None:
        pytest.skip("cannot mount read-only here (needs root with mount rights)")
    try:
        with pytest.raises(OSError):
            (ro / "probe").write_text("x")
        before = _tree(ro)
        writable = tmp_path / "rw"
        shutil.copytree(tmp_path / "ro-src", writable)
        for name, argv in _commands(ro, tmp_path / "out-ro").items():
            out, err = _run(argv, capsys)
            rw_out, rw_err = _run(_commands(writable, tmp_path / "out-rw")[name], capsys)
            assert err.count("the cache could not be saved") == 1, (name, err)
            assert "Traceback" not in err and not rw_err, (name, err, rw_err)
            assert out.replace("out-ro", "out-rw").replace(str(ro), "ROOT") == rw_out.replace(str(writable), "ROOT"), name
        assert _tree(ro) == before  # nothing written: no temporary file, lock or cache
        for name in ("table.md", "table.csv", "search.csv"):  # the same bytes but for the paths in the command line
            got = (tmp_path / "out-ro" / name).read_text().replace(str(ro), str(writable)).replace("out-ro", "out-rw")
            assert got == (tmp_path / "out-rw" / name).read_text(), name
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)  # lazily: this process still holds the store open
