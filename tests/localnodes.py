"""A real multi-node Ray cluster on this machine's loopback, for tests and benchmarks of `--ray` (tests/ and
bench/ray_clients.py; not installed with the package).

Starts a head and further nodes with `ray start --block`, each in its own process group with its own
ports (dashboard off) and one --temp-dir for the session's logs, and stops them by process group:
SIGTERM, then SIGKILL after a grace period (`ray start --block` may ignore SIGTERM). Not used by the
commands themselves: a user points kneecap at a cluster they run (`--ray HOST:PORT`).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 3.0
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # small: the load generator moves only records
WORKER_PORTS = 24  # per node: Ray's worker processes bind in [min, max]
READY_LINE = "Ray runtime started"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int, taken: set[int]) -> list[int]:
    """n ports free on loopback now, none in `taken` (added to it)."""
    out = []
    while len(out) < n:
        port = random.randint(20000, 59000)
        if port not in taken and _port_free(port):
            taken.add(port)
            out.append(port)
    return out


def free_range(n: int, taken: set[int]) -> tuple[int, int]:
    """A run of n consecutive free ports."""
    for _ in range(200):
        base = random.randint(20000, 59000 - n)
        ports = range(base, base + n)
        if not taken.intersection(ports) and all(_port_free(p) for p in ports):
            taken.update(ports)
            return base, base + n - 1
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


@dataclass
class Node:
    proc: subprocess.Popen
    log: Path
    head: bool

    @property
    def pgid(self) -> int:
        return self.proc.pid  # started with start_new_session: its own process group


@dataclass
class LocalNodes:
    """`num_nodes` Ray nodes of `cpus_per_node` CPUs each on 127.0.0.1; `address` is the head's HOST:PORT."""

    num_nodes: int = 2
    cpus_per_node: int = 1
    temp_dir: Path | None = None
    cpu_list: str | None = None  # e.g. "1": pin every node (and the actors it starts) to these cores (taskset)
    nodes: list[Node] = field(default_factory=list)
    address: str | None = None
    _own_temp: bool = False

    def ray_bin(self) -> str:
        found = Path(sys.executable).with_name("ray")
        return str(found) if found.exists() else (shutil.which("ray") or "ray")

    def _node_args(self, taken: set[int]) -> list[str]:
        om, nm, agent, agent_grpc, rt_env, metrics = free_ports(6, taken)
        low, high = free_range(WORKER_PORTS, taken)
        return [
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            str(self.cpus_per_node),
            "--block",
            "--object-manager-port",
            str(om),
            "--node-manager-port",
            str(nm),
            "--min-worker-port",
            str(low),
            "--max-worker-port",
            str(high),
            "--dashboard-agent-listen-port",
            str(agent),
            "--dashboard-agent-grpc-port",
            str(agent_grpc),
            "--runtime-env-agent-port",
            str(rt_env),
            "--metrics-export-port",
            str(metrics),
            "--object-store-memory",
            str(OBJECT_STORE_BYTES),
            "--disable-usage-stats",
        ]

    def _spawn(self, args: list[str], name: str, head: bool) -> Node:
        log = self.temp_dir / f"{name}.log"
        # token authentication off explicitly: Ray 2.60 turns it on for a head when ~/.ray/auth_token exists
        # (`ray.init()` of a local cluster writes one), and nodes started without the token could not join
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        env.pop("RAY_ADDRESS", None)
        with open(log, "wb") as fh:
            pin = ["taskset", "-c", self.cpu_list] if self.cpu_list else []
            proc = subprocess.Popen(
                [*pin, self.ray_bin(), "start", *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        node = Node(proc, log, head)
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-600:]
                self.stop()
                raise RuntimeError(f"ray node {name} did not start: {tail}")
            time.sleep(0.2)
        return node

    def start(self) -> "LocalNodes":
        if self.temp_dir is None:  # short: Ray's unix sockets live under it (108-byte path limit)
            self.temp_dir = Path(tempfile.mkdtemp(prefix="knr-", dir="/tmp"))
            self._own_temp = True
        taken: set[int] = set()
        (port,) = free_ports(1, taken)
        self._spawn(
            [
                "--head",
                "--port",
                str(port),
                "--include-dashboard=false",
                "--temp-dir",
                str(self.temp_dir),
                *self._node_args(taken),
            ],
            "head",
            True,
        )
        self.address = f"127.0.0.1:{port}"
        for i in range(1, self.num_nodes):
            self._spawn(["--address", self.address, *self._node_args(taken)], f"node{i}", False)
        return self

    def kill_node(self, index: int) -> None:
        """SIGKILL node `index` (not the head: 0) and every process it started (its actors included)."""
        node = self.nodes[index]
        _signal_group(node.pgid, signal.SIGKILL)
        node.proc.wait(timeout=10)

    def stop(self) -> None:
        """Every node: SIGTERM its process group, SIGKILL what is left after STOP_GRACE_S; head last."""
        for node in reversed(self.nodes):
            _signal_group(node.pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for node in reversed(self.nodes):
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(node.pgid, signal.SIGKILL)  # ray start --block may ignore SIGTERM; its children too
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.nodes.clear()

    def session_logs(self) -> Path:
        """The folder of every node's logs (all nodes on this machine log under the head's --temp-dir)."""
        return self.temp_dir

    def cleanup(self) -> None:
        self.stop()
        if self._own_temp and self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalNodes":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
