"""Reaching a Ray cluster: what `--ray ADDRESS` means, the one-line error when Ray is not installed,
and the connection (ray.init) with Ray's own logging kept off kneecap's stdout and stderr.

`auto` is the cluster named by RAY_ADDRESS (or the one `ray start` left on this machine), `local`
starts an in-process cluster for this run only, anything else is a head address (HOST:PORT).
Owns the connection only: no actors, no load.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kneecap.errors import KneecapError

EXTRA_HINT = "install it with: pip install 'kneecap[ray]'"
DEFAULT_STREAMS_PER_ACTOR = 256
MAX_ACTORS = 256  # as --workers: one bench level spreads over at most this many client processes


@dataclass(frozen=True)
class RayTarget:
    """`--ray ADDRESS` and the actor sizing: at most streams_per_actor concurrent streams per actor,
    and at least one actor per CPU of the cluster (actors=None) or exactly `actors`."""

    address: str
    streams_per_actor: int = DEFAULT_STREAMS_PER_ACTOR
    actors: int | None = None

    def __post_init__(self) -> None:
        if not (self.address or "").strip():
            raise KneecapError(
                "--ray needs an address", "pass --ray auto (RAY_ADDRESS), --ray local, or --ray HOST:PORT"
            )
        if self.streams_per_actor < 1:
            raise KneecapError(
                f"--ray-streams-per-actor must be >= 1, got {self.streams_per_actor}",
                f"pass e.g. --ray-streams-per-actor {DEFAULT_STREAMS_PER_ACTOR}",
            )
        if self.actors is not None and not (1 <= self.actors <= MAX_ACTORS):
            raise KneecapError(
                f"the number of Ray actors must be between 1 and {MAX_ACTORS}, got {self.actors}", "pass fewer actors"
            )


def require_ray():
    """The ray module, or a one-line error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise KneecapError("--ray needs Ray, which is not installed", EXTRA_HINT) from None
    return ray


def actors_for(cluster_cpus: float, max_streams: int | None, target: RayTarget) -> int:
    """How many actors: `target.actors` if given, else one per whole CPU of the cluster, raised so that no
    actor holds more than streams_per_actor of the largest level's streams; within [1, MAX_ACTORS]."""
    if target.actors is not None:
        return target.actors
    per_cpu = max(1, int(cluster_cpus))
    by_streams = -(-int(max_streams) // target.streams_per_actor) if max_streams else 1
    return max(1, min(MAX_ACTORS, max(per_cpu, by_streams)))


REACH_TIMEOUT_S = 5.0  # the head's port must accept a TCP connection within this long (ray.init retries for minutes)


def check_reachable(address: str) -> None:
    """A one-line error now, before any results folder exists, when the head's port does not answer:
    ray.init would otherwise retry for minutes. `local` and an `auto` without RAY_ADDRESS are not probed."""
    import socket

    given = address.strip()
    target = os.environ.get("RAY_ADDRESS", "") if given == "auto" else given
    if given == "local" or not target or target in ("auto", "local"):
        return
    hostport = target.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise KneecapError(
            f"Ray address {target!r} is not HOST:PORT", "pass --ray HOST:PORT of the cluster's head, auto or local"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        raise KneecapError(
            f"the Ray head at {hostport} does not answer ({exc.strerror or type(exc).__name__})",
            "check the address and port (ray status on the head prints them), "
            "or pass --ray local for a cluster in this process",
        ) from None


@dataclass
class RayConnection:
    """This process's connection to a cluster; `close()` disconnects (and stops an in-process `local` one)."""

    address: str  # as the user named it (auto, local, HOST:PORT)
    ray: object

    def alive_nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def cpus(self) -> float:
        return float(self.ray.cluster_resources().get("CPU", 0.0))

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()


def connect(address: str) -> RayConnection:
    """ray.init for `--ray ADDRESS`. Ray replaces the process's SIGTERM handler in ray.init: the caller's
    handler is put back, so SIGTERM still stops a bench run the way it does without Ray."""
    import logging
    import signal

    ray = require_ray()
    given = address.strip()
    if given == "auto" and not os.environ.get("RAY_ADDRESS"):
        hint = "set RAY_ADDRESS=HOST:PORT of the cluster's head (or pass --ray HOST:PORT, or --ray local)"
    else:
        hint = "check the head's address and port (ray status --address HOST:PORT), or pass --ray local"
    kwargs: dict = dict(address=given, logging_level=logging.WARNING, log_to_driver=False)
    if given == "local":
        kwargs["include_dashboard"] = False
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise KneecapError(
            f"cannot connect to the Ray cluster at {given!r} ({' '.join(str(exc).split())[:200]})", hint
        ) from None
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    return RayConnection(address=given, ray=ray)
