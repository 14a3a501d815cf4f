"""Checkpoint files: written atomically, read with `weights_only=True`, and told apart when unreadable.

Two kinds of unreadable file, treated differently:

- **refused** (`CheckpointRefused`): a well-formed pickle that weights-only loading rejects — it
  names a global or a call that would run code when loaded. Nothing in it runs; the run stops
  with one line (the user decides what to do with a file that may be hostile).
- **corrupt** (`CheckpointCorrupt`): truncated, empty or garbled (a disk filled up, a node died
  mid-copy). The trainer moves it aside (`checkpoint.pt.corrupt-<time>`) and restarts the run,
  saying so in one line: losing some epochs is better than a study stuck on a bad file.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import time
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import DataError


class CheckpointMismatch(DataError):
    """A checkpoint in the run directory belongs to a different configuration (unit, dims, ...)."""


class CheckpointRefused(DataError):
    """A checkpoint file that is not plain tensors and containers (it would need code to load)."""


class CheckpointCorrupt(DataError):
    """A checkpoint file that cannot be read at all (truncated, empty, garbled)."""


def _load_reason(exc: BaseException) -> str:
    """The informative line of torch's weights-only error (its first line only suggests weights_only=False)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    boiler = ("Weights only load failed", "Please file an issue", "Check the documentation", "WeightsUnpickler error")
    useful = [ln for ln in lines if not ln.startswith(boiler)]
    return (useful or lines or [type(exc).__name__])[0].rstrip(".")


def _pickle_bytes(path: Path) -> bytes:
    """The pickle stream of a checkpoint: `data.pkl` inside torch's zip format, else the whole file."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
            return archive.read(name)
    return path.read_bytes()


def _well_formed_pickle(path: Path) -> bool:
    """True when the file holds a complete pickle stream (opcodes are parsed, nothing is executed)."""
    try:
        for _ in pickletools.genops(_pickle_bytes(path)):
            pass
    except Exception:  # any parse failure means the bytes are damaged, whatever the exception type
        return False
    return True


def load_checkpoint(path: str | Path, map_location: Any = None) -> Any:
    """`torch.load(path, weights_only=True)`. A file that would run code when loaded (a pickled
    object with `__reduce__`) raises CheckpointRefused; an unreadable one CheckpointCorrupt.
    Nothing in either runs."""
    path = Path(path)
    try:
        return torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" in str(exc) or _well_formed_pickle(path):
            raise CheckpointRefused(
                f"{path}: refused to load: not a plain weights checkpoint ({_load_reason(exc)}); tprbench loads "
                "checkpoints with weights_only=True and never runs code from them: delete the file or use a fresh "
                "run directory"
            ) from None
        raise CheckpointCorrupt(f"{path}: cannot read the checkpoint ({_load_reason(exc)})") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError) as exc:
        raise CheckpointCorrupt(f"{path}: cannot read the checkpoint ({_load_reason(exc)})") from None


def set_aside(path: Path) -> Path:
    """Rename an unreadable file to `<name>.corrupt-<UTC time>` (kept for inspection, never read again)."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    n = 1
    while target.exists():
        target = target.with_name(f"{target.name}.{n}")
        n += 1
    os.replace(path, target)
    return target


def weights_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A model's weights as best.pt holds them: each tensor detached and cloned into a plain dict, so
    later updates of the model do not change the kept copy (the trainer at a better epoch, and
    `tprbench record load` when it rebuilds best.pt from a checkpoint, both write this)."""
    return {k: v.detach().clone() for k, v in state.items()}


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to a temporary file, then rename: a reader never sees a half-written file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
