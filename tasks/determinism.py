"""Bitwise-reproducible training when asked (the default), and an honest record when not.

`deterministic=True` sets CUBLAS_WORKSPACE_CONFIG (cuBLAS needs it before its first use),
turns off cuDNN autotuning and calls `torch.use_deterministic_algorithms(True)`: an op without
a deterministic implementation then raises. The trainer catches that one error, switches to
warn-only mode for the rest of the run and marks the run as not bitwise reproducible, instead
of failing a run for it. The previous global settings are restored when the run ends.
"""

from __future__ import annotations

import os
from typing import Any

import torch

CUBLAS = "CUBLAS_WORKSPACE_CONFIG"


def is_nondeterminism_error(exc: BaseException) -> bool:
    """torch's error for an op that has no deterministic implementation."""
    return isinstance(exc, RuntimeError) and "deterministic" in str(exc) and "use_deterministic_algorithms" in str(exc)


class Determinism:
    """Context manager around one training run; `reproducible` says what the run can claim."""

    def __init__(self, deterministic: bool) -> None:
        self.deterministic = deterministic
        self.reproducible = deterministic
        self.reason = "" if deterministic else "deterministic = false"
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> Determinism:
        self._saved = {
            "algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
        if self.deterministic:
            os.environ.setdefault(CUBLAS, ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=False)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        return self

    def relax(self, exc: BaseException) -> None:
        """An op without a deterministic implementation ran: go on in warn-only mode, not reproducible."""
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.reproducible = False
        self.reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]

    def __exit__(self, *exc: object) -> None:
        torch.use_deterministic_algorithms(self._saved["algorithms"], warn_only=self._saved["warn_only"])
        torch.backends.cudnn.deterministic = self._saved["cudnn_deterministic"]
        torch.backends.cudnn.benchmark = self._saved["cudnn_benchmark"]


def rng_state() -> dict[str, Any]:
    """torch's CPU RNG state, and every CUDA device's when CUDA is in use."""
    state: dict[str, Any] = {"rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["rng"].cpu())
    cuda = state.get("cuda_rng")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
