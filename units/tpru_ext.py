"""The C++ TPRU recurrence (units/csrc/tpru_recurrence.cpp), with the C++ loops of `tpr3`
(tpr3_recurrence.cpp) and the ungated TPRN (tprn_recurrence.cpp) in the same library: built once per
machine, loaded lazily.

Why a C++ loop: at small d a TPRU step is ~10 small tensor ops, and from Python each costs
microseconds of interpreter and dispatch time — most of the step (docs/benchmarks.md, profile).
The same loop in C++ with the elementwise work fused into two passes per step removes that.

Build: `torch.utils.cpp_extension.load` (ninja + the machine's g++) against the torch that is
installed, into a cache directory keyed by everything that changes the binary — the source, the
torch and Python versions, the flags, and the CPU's instruction-set flags (the build uses
-march=native unless $TPRBENCH_MARCH names a target, so machines sharing a home directory on a cluster
each get their own build).
`scripts/install.sh` builds it (`python -m units.tpru_ext`); otherwise the first TPRU forward
on CPU in a process does (about a minute, once; concurrent processes — Ray workers — wait on
torch's file lock for a single build). Where: $TPRBENCH_EXT_DIR, else
$XDG_CACHE_HOME/tprbench/ext (~/.cache/tprbench/ext).

Fallback: if the build or load fails (no compiler, no ninja), one line on stderr says why and the
Python loop in units/tpru_fused.py runs instead — the same results to float rounding, not bit for bit
(the summation order differs: tests/test_tpru_backends.py; one quickstart epoch of tpru-mod1, train loss
0.69481795 with the extension, 0.69481845 without), slower. TPRBENCH_CPP=0 turns the
extension off (no build attempted); `set_enabled(False)` does the same inside a process (tests).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

SOURCE = Path(__file__).resolve().parent / "csrc" / "tpru_recurrence.cpp"
# Every source of the extension (one library, torch.ops.tprbench): the TPRU recurrence (plain and the
# fused slice step), the TPR-RNN (`tpr3`) update loop and the ungated TPRN loop.
SOURCES = (SOURCE, SOURCE.parent / "tpr3_recurrence.cpp", SOURCE.parent / "tprn_recurrence.cpp")
NAME = "tprbench_tpru"
#: The instruction set the loops are compiled for: the machine's own (`native`, the default) unless
#: $TPRBENCH_MARCH names a GCC -march target. Why a pin exists: GCC's vectoriser compiles the loops'
#: reductions differently for different targets, so -march=native rounds differently on two CPU
#: generations of one vendor — the pinned quickstart on a 2-core Xeon of family 6 model 207 (GCC 12:
#: `cooperlake`, AVX-512) printed TPRU rows up to 3.4 points off the Intel table of 2026-12-01, and built
#: with TPRBENCH_MARCH=x86-64-v3 it printed that table digit for digit. README's first command sets
#: x86-64-v3 (AVX2 + FMA) tuned for znver3 — the AVX2 EPYC's native build, assembly for assembly, where
#: README's table was made — with the other numerics pins (tests/test_quickstart.py).
MARCH = os.environ.get("TPRBENCH_MARCH", "").strip() or "native"
#: The target GCC tunes for ($TPRBENCH_MTUNE; unset: what -march implies).
MTUNE = os.environ.get("TPRBENCH_MTUNE", "").strip()
CFLAGS = ["-O3", f"-march={MARCH}", *([f"-mtune={MTUNE}"] if MTUNE else []), "-fopenmp"]
LDFLAGS = ["-fopenmp"]

_lock = threading.Lock()
_state = SimpleNamespace(ops=None, tried=False, error=None, enabled=os.environ.get("TPRBENCH_CPP", "1") != "0")


def _cpu_flags() -> str:
    """The CPU model and instruction-set flags (-march=native compiles for exactly these)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    picked = [line for line in text.splitlines() if line.startswith(("flags", "model name", "Features"))]
    return "\n".join(sorted(set(picked)))


def build_key() -> str:
    import torch

    parts = [*(source.read_bytes().decode() for source in SOURCES), torch.__version__, sys.version, " ".join(CFLAGS + LDFLAGS), _cpu_flags()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def build_dir() -> Path:
    root = os.environ.get("TPRBENCH_EXT_DIR")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tprbench" / "ext"
    return base / f"{NAME}-{build_key()}"


def _ninja_on_path() -> None:
    """torch looks for `ninja` on PATH; the pip package's binary is not there when the venv is
    used without activation (e.g. `.venv/bin/python`, Ray workers)."""
    try:
        import ninja  # the PyPI package

        bin_dir = getattr(ninja, "BIN_DIR", None)
    except ImportError:
        bin_dir = None
    if bin_dir and bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def _load(verbose: bool) -> object:
    import torch
    from torch.utils import cpp_extension

    target = build_dir()
    library, done = target / f"{NAME}.so", target / "built"
    if done.exists():  # built and loaded before (the marker is written after a good load): no ninja needed
        torch.ops.load_library(str(library))
        return torch.ops.tprbench
    _ninja_on_path()
    target.mkdir(parents=True, exist_ok=True)
    print(f"tprbench: building the C++ TPRU recurrence in {target} (once per machine, about a minute)", file=sys.stderr)
    # copies of the flag lists: torch appends to them in place, which would change build_key()
    cpp_extension.load(
        NAME,
        [str(source) for source in SOURCES],
        extra_cflags=list(CFLAGS),
        extra_ldflags=list(LDFLAGS),
        build_directory=str(target),
        is_python_module=False,
        verbose=verbose,
    )
    done.write_text(f"{NAME} for torch {torch.__version__}\n")
    return torch.ops.tprbench


def ops(verbose: bool = False):
    """torch.ops.tprbench with tpru_forward / tpru_backward, or None (disabled, or the build failed:
    said once on stderr)."""
    if not _state.enabled:
        return None
    if _state.tried:
        return _state.ops
    with _lock:
        if not _state.tried:
            try:
                _state.ops = _load(verbose)
            except Exception as exc:  # any failure: fall back to the Python loop, say why once
                reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                _state.error = f"{type(exc).__name__}: {reason}"
                print(
                    f"tprbench: C++ TPRU recurrence unavailable ({_state.error}); using the Python loop "
                    "(the same results to float rounding, slower; TPRBENCH_CPP=0 silences this)",
                    file=sys.stderr,
                )
            _state.tried = True
    return _state.ops


def set_enabled(flag: bool) -> bool:
    """Use the C++ loop (True) or the Python loop (False) in this process; returns the previous setting."""
    previous, _state.enabled = _state.enabled, flag
    return previous


def backend() -> str:
    """'cpp' or 'python': which loop a CPU forward would use now (builds/loads if needed)."""
    return "cpp" if ops() is not None else "python"


def main() -> int:
    """`python -m units.tpru_ext`: build (or find) the extension and say where; exit 1 if it failed."""
    found = ops(verbose="-v" in sys.argv)
    if found is None:
        print(f"tprbench: no C++ TPRU recurrence ({_state.error or 'disabled by TPRBENCH_CPP=0'})")
        return 1
    print(f"tprbench: C++ TPRU recurrence ready in {build_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
