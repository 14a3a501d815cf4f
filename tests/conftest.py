"""Shared fixtures. Real-data tests use $TPRBENCH_DATA (CI: ../shared/data) and skip without it."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", message=".*noload.*")


def pytest_configure(config):
    # One intra-op thread: the test models are tiny, and on a busy 2-core machine OpenMP's
    # spinning threads slow small matmuls down by orders of magnitude (measured: 10 training
    # steps took 46 s with 2 threads under load, 0.3 s with 1).
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real datasets folder; skips the test with the reason when it is not configured."""
    value = os.environ.get("TPRBENCH_DATA")
    if not value:
        pytest.skip("TPRBENCH_DATA is not set (point it at ../shared/data to run real-data tests)")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"TPRBENCH_DATA={value} is not a directory")
    return path


def pytest_addoption(parser):
    parser.addoption(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each selected test N times in a row (a flakiness check: `pytest tests/test_faults.py --repeat 10`; module fixtures are shared)",
    )


def pytest_generate_tests(metafunc):
    """`--repeat N`: each test N times, as parameters `repeat0..N-1`, so a flaky test shows up
    in one session without a plug-in."""
    n = metafunc.config.getoption("repeat")
    if n > 1:
        metafunc.fixturenames.append("_repeat")
        metafunc.parametrize("_repeat", range(n), ids=[f"repeat{i}" for i in range(n)])
