"""Real server processes for the cluster tests (tests/test_servers.py): a Ray cluster of `ray
start` nodes, an `mlflow server`, a PostgreSQL server. Each listens on 127.0.0.1 on a free port,
runs in its own session (so every process it starts can be found), logs to a file under its
directory, and is stopped by its own PIDs — SIGTERM to the process it started, then SIGKILL to
whatever of its session is left — also when the test fails. Nothing is ever stopped by name
(`ray stop`, `pkill`): other Ray instances on the machine are not ours.

PostgreSQL comes from the machine's packages, installed by scripts/install_servers.sh (which
scripts/test.sh runs: Debian's `postgresql` via apt-get when running as root). Tests skip with
the reason only when no server binary can be found after that.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.ray_helpers import FAST_HEALTH_CHECKS, _alive, kill_session, ray_environ, session_pids


def venv_bin(name: str) -> str:
    """A console script of the interpreter running the tests (the project's .venv)."""
    import sys

    return str(Path(sys.executable).with_name(name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(ready: Callable[[], bool], what: str, proc: subprocess.Popen | None, log: Path, timeout: float = 180) -> None:
    t0 = time.time()
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{tail(log)}")
        if time.time() - t0 > timeout:
            raise RuntimeError(f"{what} not ready after {timeout:.0f} s:\n{tail(log)}")
        time.sleep(0.2)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Process:
    """A server process started in its own session, stopped by its PIDs."""

    name: str
    proc: subprocess.Popen
    log: Path
    info: dict = field(default_factory=dict)
    stop_signal: int = signal.SIGTERM  # PostgreSQL: SIGINT (fast shutdown; SIGTERM waits for clients)

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid] + [p for p in session_pids(self.proc.pid) if _alive(p)]

    def stop(self, sig: int | None = None, grace: float = 10.0) -> None:
        """`sig` to the process we started, then SIGKILL to anything of its session still alive."""
        sig = self.stop_signal if sig is None else sig
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        kill_session(self.proc.pid, grace=0.5 if sig == signal.SIGKILL else 3.0)


def wait_ready(server: Process, ready: Callable[[], bool], timeout: float = 180) -> None:
    """`wait_for` a started server; if it never gets ready, stop it (by its PIDs) before raising."""
    try:
        wait_for(ready, server.name, server.proc, server.log, timeout=timeout)
    except BaseException:
        server.stop(signal.SIGKILL)
        raise


def start(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None, user: str | None = None, cwd: str | None = None) -> Process:
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")
    proc = subprocess.Popen(
        argv,
        stdout=fh,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        user=user,
        cwd=cwd,
    )
    fh.close()
    return Process(name, proc, log)


# --------------------------------------------------------------------------------------------
# Ray: `ray start` nodes


def ray_ports() -> list[str]:
    """Every port a node opens, chosen free: two Ray instances on one machine must not collide on defaults."""
    return [
        "--node-manager-port",
        str(free_port()),
        "--object-manager-port",
        str(free_port()),
        "--metrics-export-port",
        str(free_port()),
        "--dashboard-agent-listen-port",
        str(free_port()),
        "--dashboard-agent-grpc-port",
        str(free_port()),
        "--runtime-env-agent-port",
        str(free_port()),
    ]


def ray_head(directory: Path, cpus: int, resources: dict[str, float]) -> Process:
    """`ray start --head --block` on 127.0.0.1 (no dashboard, its own temp dir, fast health checks)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="tprh", dir="/tmp")  # Unix socket paths must stay short
    argv = [
        venv_bin("ray"),
        "start",
        "--head",
        "--block",
        "--port",
        str(port),
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        str(cpus),
        "--num-gpus",
        "0",
        "--resources",
        json.dumps(resources),
        "--include-dashboard=false",
        "--dashboard-port",
        str(free_port()),
        "--disable-usage-stats",
        "--temp-dir",
        temp,
        "--min-worker-port",
        "0",
        "--max-worker-port",
        "0",
        "--object-store-memory",
        str(100 * 2**20),
        *ray_ports(),
    ]
    node = start("ray head", argv, directory / "ray-head.log", env=ray_environ(**FAST_HEALTH_CHECKS))
    node.info.update(address=f"127.0.0.1:{port}", port=port, temp=temp)
    wait_ready(node, lambda: _listening(port) and _raylet_up(node))
    return node


def ray_worker(directory: Path, address: str, cpus: int, resources: dict[str, float], name: str = "ray worker") -> Process:
    argv = [
        venv_bin("ray"),
        "start",
        "--block",
        "--address",
        address,
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        str(cpus),
        "--num-gpus",
        "0",
        "--resources",
        json.dumps(resources),
        "--disable-usage-stats",
        "--min-worker-port",
        "0",
        "--max-worker-port",
        "0",
        "--object-store-memory",
        str(100 * 2**20),
        *ray_ports(),
    ]
    node = start(name, argv, directory / f"{name.replace(' ', '-')}.log", env=ray_environ(**FAST_HEALTH_CHECKS))
    # `ray start --block` logs this once the node has joined (its raylet registered with the GCS).
    wait_ready(node, lambda: _raylet_up(node) and "block forever" in tail(node.log, 200))
    return node


def _raylet_up(node: Process) -> bool:
    return any(_cmd(p).endswith("/raylet") or "/raylet " in _cmd(p) for p in session_pids(node.proc.pid))


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def wait_for_nodes(address: str, count: int, timeout: float = 180) -> None:
    """Until the cluster lists `count` alive nodes (asked through GCS by a short-lived subprocess)."""
    code = (
        f"import ray, logging; ray.init(address={address!r}, logging_level=logging.ERROR, log_to_driver=False); "
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = subprocess.run([venv_bin("python"), "-c", code], capture_output=True, text=True, env={**os.environ, **ray_environ()}, timeout=60)
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(1)
    raise RuntimeError(f"the cluster at {address} never had {count} nodes")


def listening_sockets(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of `pids` holds, read from
    /proc (`/proc/net/tcp{,6}` for the sockets, `/proc/<pid>/fd` for who holds them)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                hexaddr, hexport = fields[1].split(":")
                found.add((_address(hexaddr, width), int(hexport, 16)))
    return found


def _address(hexaddr: str, width: int) -> str:
    if width == 8:  # IPv4, little-endian
        return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hexaddr)[::-1])
    raw = b"".join(bytes.fromhex(hexaddr[i : i + 8])[::-1] for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, raw)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --------------------------------------------------------------------------------------------
# MLflow: `mlflow server`


def mlflow_server(directory: Path) -> Process:
    """`mlflow server` on 127.0.0.1: SQLite backend and an artifact store of its own (served: clients
    upload and download through the server, as other machines would)."""
    from tests.ray_helpers import seed_root

    port = free_port()
    seed_root(directory)  # an already-migrated SQLite store (MLflow's migrations take long on a loaded machine)
    (directory / "mlflow.db").rename(directory / "server.db")
    argv = [
        venv_bin("mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{directory / 'server.db'}",
        "--artifacts-destination",
        str(directory / "server-artifacts"),
    ]
    # No job runner and its huey consumers (~10 processes, for MLflow's GenAI jobs): not used here.
    env = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = start("mlflow server", argv, directory / "mlflow-server.log", env=env)
    server.info.update(uri=f"http://127.0.0.1:{port}", port=port, artifacts=directory / "server-artifacts")
    wait_ready(server, lambda: _http_ok(f"http://127.0.0.1:{port}/health"), timeout=300)
    return server


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# PostgreSQL


def postgres_bindir() -> Path | None:
    """The PostgreSQL server binaries: Debian's /usr/lib/postgresql/<version>/bin (newest), else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("postgres")
    return Path(exe).parent if exe else None


def why_no_postgres() -> str | None:
    """None when a server can be started here, else the reason (what the test's skip says)."""
    if postgres_bindir() is None:
        return (
            "no PostgreSQL server binaries (postgres, initdb): scripts/install_servers.sh installs Debian's "
            "`postgresql` as root; install it (apt-get install postgresql) or run the tests as root"
        )
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no `postgres` user to run the server as (PostgreSQL refuses to run as root)"
    return None


def postgres_server(directory: Path) -> Process:
    """initdb + postgres on 127.0.0.1 (trust authentication for loopback only, fsync off: a test
    database), one database `optuna`. As root, the server runs as the `postgres` user."""
    bindir = postgres_bindir()
    assert bindir is not None
    user = "postgres" if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="tprpg", dir="/tmp"))  # outside pytest's 0700 tmp: the postgres user reads it
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    if user:
        shutil.chown(base, user)
        shutil.chown(sockets, user)
    port = free_port()
    log = directory / "postgres.log"
    directory.mkdir(parents=True, exist_ok=True)
    init = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "tprbench", "--auth=trust", "-E", "UTF8", "--no-instructions"],
        capture_output=True,
        text=True,
        user=user,
        cwd=str(base),
    )
    if init.returncode:
        raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
    argv = [
        str(bindir / "postgres"),
        "-D",
        str(data),
        "-p",
        str(port),
        "-k",
        str(sockets),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "max_connections=200",
    ]
    server = start("postgres", argv, log, user=user, cwd=str(base))
    server.stop_signal = signal.SIGINT
    server.info.update(port=port, base=base)
    wait_ready(server, lambda: _listening(port))
    created = subprocess.run(
        [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "tprbench", "-d", "postgres", "-c", "CREATE DATABASE optuna"],
        capture_output=True,
        text=True,
    )
    if created.returncode:
        raise RuntimeError(f"createdb failed: {created.stderr}")
    server.info["url"] = f"postgresql://tprbench@127.0.0.1:{port}/optuna"
    return server


@contextlib.contextmanager
def running(make: Callable[[], Process], cleanup: Callable[[Process], None] | None = None) -> Iterator[Process]:
    server = make()
    try:
        yield server
    finally:
        server.stop()
        if cleanup is not None:
            cleanup(server)
