"""The watchdog of a driver's local Ray, on a tree of plain processes shaped like Ray's.

Ray's raylet carries the driver's token; its two agents do not (Ray starts them with an
environment of its own) and outlive it. Here a "raylet" (token in its environment) starts an
"agent" (clean environment) and is SIGKILLed before the "driver": the agent is then an orphan
that no environment ties to the driver, and the watchdog must still end it, from what it
remembered while the driver lived. A bystander process is never touched. No Ray needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from harness.driver import ray_watchdog

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
# A "raylet": marked by the token, starts an unmarked child and prints its pid, then sleeps.
RAYLET = (
    "import os, subprocess, sys, time\n"
    "env = {k: v for k, v in os.environ.items() if k != 'TPRBENCH_RAY_OWNER'}\n"
    "agent = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], env=env)\n"
    "print(agent.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _gone_within(pid: int, seconds: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not ray_watchdog._alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_unmarked_children_of_a_dead_token_holder_end_with_the_driver() -> None:
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    driver = subprocess.Popen(SLEEPER)
    bystander = subprocess.Popen(SLEEPER)
    raylet = subprocess.Popen(
        [sys.executable, "-c", RAYLET],
        env={**os.environ, ray_watchdog.ENV: token},
        stdout=subprocess.PIPE,
        text=True,
    )
    agent = int(raylet.stdout.readline())
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "harness.driver.ray_watchdog", str(driver.pid), token],
        env={**os.environ, ray_watchdog.ENV: ""},
    )
    try:
        assert ray_watchdog.holders(token) == [raylet.pid]
        time.sleep(ray_watchdog.SCAN + 1.0)  # at least one scan while the driver lives
        raylet.kill()  # as Ray's fate-sharing ends the raylet first, leaving its agents
        raylet.wait()
        assert ray_watchdog._alive(agent), "the agent should outlive its parent until the driver dies"
        driver.kill()
        driver.wait()
        assert _gone_within(agent, 5.0), "the orphaned agent outlived the driver's watchdog"
        assert watchdog.wait(timeout=ray_watchdog.GRACE + 5.0) == 0
        assert ray_watchdog._alive(bystander.pid)
    finally:
        for proc in (driver, bystander, raylet, watchdog):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        try:
            os.kill(agent, signal.SIGKILL)
        except OSError:
            pass


def test_descendants_follow_parentage_and_skip_what_they_are_told() -> None:
    me = os.getpid()
    child = subprocess.Popen(SLEEPER)
    try:
        tree = ray_watchdog.descendants([me], skip=set())
        assert me in tree and child.pid in tree
        assert child.pid not in ray_watchdog.descendants([me], skip={me})
        start = tree[child.pid]
        assert ray_watchdog._same(child.pid, start)
        assert not ray_watchdog._same(child.pid, start + 1)  # a reused pid has another start time
    finally:
        child.kill()
        child.wait()
    assert not ray_watchdog._same(child.pid, start)
