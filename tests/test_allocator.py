"""A training process keeps freed memory for its next batch (tasks/allocator.py).

Measured as the kernel counts it: a 64 MB tensor made, filled and freed twice. With glibc's
defaults the second one is page-faulted in again (~16k minor faults of 4 KB); with freed memory
kept, it reuses the first one's pages. Each case runs in a fresh interpreter (the setting is
per process).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tasks import allocator

PROBE = """
import resource, sys, torch
from tasks.allocator import keep_freed_memory
on = keep_freed_memory()
def faults_of_one_batch():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.empty(16 * 1024 * 1024)  # 64 MB, above glibc's largest mmap threshold (32 MB)
    x.fill_(1.0)
    del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_one_batch()
print(int(on), faults_of_one_batch())
"""


def _probe(env_value: str | None) -> tuple[bool, int]:
    env = {k: v for k, v in os.environ.items() if k != allocator.ENV}
    if env_value is not None:
        env[allocator.ENV] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_the_second_batch_reuses_the_first_batchs_pages() -> None:
    on, kept = _probe(None)
    if not on:
        pytest.skip("not glibc: the setting does not apply here")
    off, default = _probe("0")
    assert not off
    assert default > 10_000, f"glibc's defaults should fault the 64 MB in again ({default} faults)"
    assert kept < 1_000, f"freed memory kept: the second batch should reuse the pages ({kept} faults)"
