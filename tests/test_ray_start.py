"""A local Ray that does not come up in time (an overloaded machine) is retried, then a clear error."""

from __future__ import annotations

import pytest

from harness.driver.errors import RunnerError
from harness.driver.ray_start import start_local_ray

TIMEOUT = Exception("The current node timed out during startup. This could happen because ...")


def test_retried_until_it_starts():
    calls, shutdowns = [], []

    def init():
        calls.append(1)
        if len(calls) < 3:
            raise TIMEOUT

    start_local_ray(init, lambda: shutdowns.append(1), attempts=3, pause_s=0)
    assert len(calls) == 3 and len(shutdowns) == 2


def test_gives_up_with_one_line():
    def init():
        raise TIMEOUT

    with pytest.raises(RunnerError, match="local Ray did not start \\(2 attempts"):
        start_local_ray(init, lambda: None, attempts=2, pause_s=0)


def test_other_errors_are_not_retried():
    calls = []

    def init():
        calls.append(1)
        raise ValueError("bad num_cpus")

    with pytest.raises(ValueError, match="bad num_cpus"):
        start_local_ray(init, lambda: None, attempts=3, pause_s=0)
    assert calls == [1]
