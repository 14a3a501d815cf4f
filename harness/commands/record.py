"""`tprbench record check|snapshot|snapshots|restore|save|load`: keep a SQLite record safe
(docs/reliability.md), and carry a long study to another machine (harness/record/carry.py)."""

from __future__ import annotations

import argparse

HELP = (
    "the SQLite record of a run directory: check it (SQLite quick_check), snapshot it, list its snapshots, restore it from the newest good snapshot; "
    "save it with its unfinished runs' checkpoints (to commit), load that into a fresh run directory"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=["check", "snapshot", "snapshots", "restore", "save", "load"],
        help="check: is mlflow.db sound; snapshot: take one now; snapshots: list them; restore: replace a "
        "damaged mlflow.db by the newest good snapshot (then rerun each study: nothing is trained again; it refuses a "
        "record that passes its check unless --force, and a record a driver is working on); "
        "save: copy the record and the checkpoints of its paused or interrupted runs --to a folder (records/<study>); "
        "load: put such a folder (--from) into a fresh --root, whose next `run` continues every run where it stopped",
    )
    p.add_argument("--to", default=None, metavar="DIR", help="save: the folder to write (e.g. records/<study>)")
    p.add_argument("--from", dest="source", default=None, metavar="DIR", help="load: a folder written by `record save`")
    p.add_argument("--root", default="runs", help="run directory holding mlflow.db and snapshots/ (default ./runs)")
    p.add_argument("--tracking-uri", default=None, help="a sqlite:/// MLflow URI (default: mlflow.db under --root)")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore: replace mlflow.db even though it passes its check (it is set aside, not deleted); without it a "
        "sound record is never replaced. Never overrides the refusal while a driver works on the record",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.driver.errors import RunnerError
    from harness.record import guard
    from harness.record.compressed import reading_root, refuse_writing
    from harness.record.layout import RunRoot, sqlite_uri
    from harness.record.sources import sqlite_path

    root = Path(args.root).expanduser().resolve()
    if args.action in ("save", "load"):
        return _carry(args, root)
    if args.action in ("snapshot", "restore"):
        refuse_writing(root, f"record {args.action}")
    read = reading_root(root) if args.action == "check" else root  # a committed mlflow.db.gz: its decompressed copy
    uri = args.tracking_uri or sqlite_uri(RunRoot(read).db)
    db = sqlite_path(uri)
    if db is None:
        raise RunnerError(
            f"record {args.action}: {uri} is not a SQLite file; a PostgreSQL store or a tracking server "
            "is checked and backed up by its database (docs/reliability.md)"
        )
    from harness.commands.support.output_path import check_output_path

    if args.action in ("snapshot", "restore"):  # they write snapshots/ under --root, and mlflow.db in its folder
        check_output_path(root, "--root")
        check_output_path(db.parent, "--tracking-uri" if args.tracking_uri else "--root")
    if args.action == "restore":
        print(guard.restore(db, root, force=args.force))
        return 0
    if args.action == "snapshots":
        print(guard.describe(root))
        return 0
    if not db.exists():
        raise RunnerError(f"record {args.action}: {db} does not exist (check --root)")
    if args.action == "check":
        print(_check(db, root, compressed=read != root))
        return 0
    path = guard.take_snapshot(db, root)
    print(f"snapshot: {path}")
    return 0


def _check(db, root, compressed: bool) -> str:
    """`record check`: SQLite's quick_check of the record (of a committed mlflow.db.gz's decompressed copy)."""
    from harness.record import guard
    from harness.record.compressed import GZ

    problem = guard.quick_check(db)
    if problem is not None and compressed:
        raise guard.RecordCorrupt(f"{root / GZ}: the compressed MLflow record is damaged ({problem}); take it again from git or save it again")
    if problem is not None:
        raise guard.RecordCorrupt(
            f"{db}: the MLflow record is damaged ({problem}); restore it: tprbench record restore --root {root} (docs/reliability.md)"
        )
    return f"{root / GZ}: ok (SQLite quick_check of its decompressed copy {db})" if compressed else f"{db}: ok (SQLite quick_check)"


def _carry(args: argparse.Namespace, root) -> int:
    """`record save` / `record load` (harness/record/carry.py)."""
    from pathlib import Path

    from harness.record import carry

    folder = args.to if args.action == "save" else args.source
    if folder is None:
        raise carry.CarryError(f"record {args.action}: give {'--to DIR' if args.action == 'save' else '--from DIR'}")
    folder = Path(folder).expanduser().resolve()
    from harness.commands.support.output_path import check_output_path

    if args.action == "save":  # where each writes
        check_output_path(folder, "--to")
    else:
        check_output_path(root, "--root")
    lines = carry.save(root, folder) if args.action == "save" else carry.load(folder, root)
    print("\n".join(lines))
    return 0
