"""`kneecap bench --ray`: one level's streams spread over Ray actors placed across the cluster's nodes.

The driver makes the level's schedule once (the task: specs, lengths, prompt and arrival seeds) and
splits it (`split_fn`, bench's own split); each actor runs its share with bench's own per-process
runner (`run_fn`) and keeps finished records until the driver polls for them, so records reach the
one writer as they finish and statistics stay exact. Before a level: every actor answers (the start
barrier), its clock offset to the driver is measured by round trips (kneecap.cluster.clock), and
every actor starts at one common time; each share's epoch is moved into its actor's clock, so record
stamps arrive in the driver's clock. An actor that dies or stops answering is dropped: requests whose
records never arrived count as failed ("client_lost"), the level keeps everything else, and every
wait is bounded. A refused API key (HTTP 401/403) in any actor cuts the level in all of them (StreamActor.cut).
The API key reaches actors through Ray's runtime environment (env_vars) as one of two
random shares (kneecap.cluster.streams.split_secret): Ray 2.60's runtime-env agent writes a runtime_env,
env_vars included, to its log (runtime_env_agent.log), so the key itself is never in it.
Owns the actors; knows nothing of statistics or the order of levels.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Callable, Sequence

from kneecap.cluster.clock import ClockOffset, estimate_offset
from kneecap.cluster.connect import RayConnection, RayTarget
from kneecap.errors import KneecapError
from kneecap.records import ERROR, RequestRecord

CLIENT_LOST = "client_lost"  # error_kind of a request whose actor (or node) was lost mid-level
API_KEY_ENV = "KNEECAP_RAY_API_KEY"  # set in the actors' runtime environment, never passed as an argument
ACTOR_CONCURRENCY = 4  # threads of an actor: the level runs on one, polls and clock reads on the others
PLACEMENT_TIMEOUT_S = 60.0  # the cluster must place every actor within this long
READY_TIMEOUT_S = 60.0  # a new actor must answer within this long (imports, process start)
BARRIER_TIMEOUT_S = 30.0  # every actor must answer the start barrier within this long
CLOCK_ROUND_TRIPS = 8  # per actor per level; the one with the least delay sets the offset
START_LEAD_S = 0.2  # the common start is this long after the barrier (plus the slowest round trip)
POLL_S = 0.05  # how often the driver asks every actor for finished records
SILENT_S = 20.0  # an actor that answers no poll for this long is treated as lost


def split_secret(secret: str) -> tuple[str, str]:
    """Two hex shares, each alone uniformly random: secret = share_a XOR share_b (UTF-8 bytes)."""
    import secrets

    data = secret.encode()
    mask = secrets.token_bytes(len(data))
    return bytes(a ^ b for a, b in zip(data, mask)).hex(), mask.hex()


def join_secret(share_a: str, share_b: str) -> str:
    return bytes(a ^ b for a, b in zip(bytes.fromhex(share_a), bytes.fromhex(share_b))).decode()


class RefusedStatus:
    """An actor's refused-key status for its current share, in the shape AuthCut.shared reads and writes:
    `value` is the first refusal's HTTP status (401/403), 0 while none (an int: read and written whole)."""

    def __init__(self) -> None:
        self.value = 0


class StreamActor:
    """Actor body (wrapped by ray.remote in ActorPool). Runs one share at a time on a thread of its own."""

    def __init__(self, setup, run_fn: Callable, key_share: str | None = None):
        share = os.environ.get(API_KEY_ENV)
        if share and key_share:  # the key's two shares: the runtime environment's and the constructor's
            key = join_secret(share, key_share)
            setup = dataclasses.replace(setup, cfg=dataclasses.replace(setup.cfg, api_key=key))
        self._setup = setup
        self._run_fn = run_fn
        self._lock = threading.Lock()
        self._lines: list[bytes] = []
        self._result: tuple | None = None
        self._run_id = -1  # which share the lines and result belong to
        self._refused = RefusedStatus()  # this share's, or another actor's, refused key: the level is cut
        self._thread: threading.Thread | None = None

    def hello(self) -> dict:
        import socket

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "host": socket.gethostname()}

    def clock(self) -> float:
        return time.perf_counter()

    def start(self, run_id: int, task, start_at: float) -> float:
        """Begin `task` when this actor's perf_counter reaches start_at; returns at once (its clock now).
        A threaded actor may run calls out of order: polls name the run they ask about."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError("a share is already running on this actor")
            self._lines, self._result, self._run_id = [], None, run_id
            self._refused.value = 0  # a new level starts uncut
        self._thread = threading.Thread(target=self._run, args=(task, start_at), name="kneecap-share", daemon=True)
        self._thread.start()
        return time.perf_counter()

    def _push(self, record) -> None:
        from kneecap.records import dumps_record

        line = dumps_record(record)
        with self._lock:
            self._lines.append(line)

    def _run(self, task, start_at: float) -> None:
        late_s = time.perf_counter() - start_at
        if late_s < 0:
            time.sleep(-late_s)
        try:
            outcome = self._run_fn(self._setup, task, self._push, refused=self._refused)
            result = ("done", dataclasses.asdict(outcome), max(0.0, late_s))
        except KneecapError as exc:
            result = ("error", exc.one_line(), None)
        except Exception as exc:  # reported to the driver as one line, never lost
            result = ("error", f"error: {type(exc).__name__}: {exc}", None)
        with self._lock:
            self._result = result

    def poll(self, run_id: int) -> tuple[bytes, int, tuple | None, int]:
        """(finished records of run `run_id` as JSON lines, how many, its result once it is over, its
        refused-key status: the HTTP status of the refusal that cut it, 0 while none)."""
        with self._lock:
            if run_id != self._run_id:
                return b"", 0, None, 0
            lines, self._lines = self._lines, []
            result = self._result
            refused = self._refused.value
        return b"".join(lines), len(lines), result, refused

    def cut(self, run_id: int, status: int) -> None:
        """Another actor's share of run `run_id` met a refused key (HTTP `status`): cut this one too. Its
        level watches the status (every AuthCut.SHARED_CUT_POLL_S) and checks it before each request;
        a share not yet begun sends nothing. A cut of an earlier run is ignored."""
        with self._lock:
            if run_id == self._run_id and not self._refused.value:
                self._refused.value = int(status)


@dataclasses.dataclass
class _Actor:
    index: int
    handle: object
    node_id: str
    pid: int
    alive: bool = True


class ActorPool:
    """`num_actors` StreamActors in a SPREAD placement group; `run(task, on_record)` is bench's run_share.

    run_fn(setup, task, on_record) -> outcome and split_fn(task, n) -> [task] are bench's own
    (kneecap.sweep.level.run_task, kneecap.sweep.workers.split_task); outcome_fn(dict) rebuilds an
    outcome from its fields (num_records, suspect, client)."""

    def __init__(
        self,
        conn: RayConnection,
        setup,
        *,
        num_actors: int,
        run_fn: Callable,
        split_fn: Callable,
        outcome_fn: Callable[[dict], object],
        api_key: str | None,
    ):
        ray = conn.ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._conn = conn
        self._ray = ray
        self._split = split_fn
        self._outcome = outcome_fn
        self._remove_pg = remove_placement_group
        cpus = conn.cpus()
        if cpus <= 0:
            raise KneecapError(
                f"the Ray cluster at {conn.address} has no CPUs to place client actors on",
                "start its nodes with --num-cpus >= 1",
            )
        # one bundle per actor; more actors than CPUs share them (fractional CPUs), so placement never waits
        cpu_each = min(1.0, cpus / num_actors)
        self._pg = placement_group([{"CPU": cpu_each}] * num_actors, strategy="SPREAD")
        try:
            ray.get(self._pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except Exception:
            self._remove_pg(self._pg)
            raise KneecapError(
                f"the Ray cluster at {conn.address} could not place {num_actors} client actors "
                f"({cpu_each:g} CPU each) within {PLACEMENT_TIMEOUT_S:g} s",
                "add nodes, or pass fewer actors with a larger --ray-streams-per-actor",
            ) from None
        env_share, arg_share = split_secret(api_key) if api_key else (None, None)
        env = {"env_vars": {API_KEY_ENV: env_share}} if api_key else None
        bare = dataclasses.replace(setup, cfg=dataclasses.replace(setup.cfg, api_key=None))  # no key in arguments
        remote_cls = ray.remote(max_concurrency=ACTOR_CONCURRENCY)(StreamActor)
        handles = []
        for i in range(num_actors):
            options = dict(
                num_cpus=cpu_each,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i),
            )
            if env:
                options["runtime_env"] = env
            handles.append(remote_cls.options(**options).remote(bare, run_fn, arg_share))
        try:
            hellos = ray.get([h.hello.remote() for h in handles], timeout=READY_TIMEOUT_S)
        except Exception as exc:
            self._kill(handles)
            raise KneecapError(
                f"the client actors on the Ray cluster at {conn.address} did not start ({type(exc).__name__})",
                "check that kneecap is installed on every node (pip install 'kneecap[ray]'), and the nodes' logs",
            ) from None
        self._actors = [_Actor(i, h, info["node_id"], info["pid"]) for i, (h, info) in enumerate(zip(handles, hellos))]
        self._runs = 0

    # -- facts ------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return sum(1 for a in self._actors if a.alive)

    # -- one level -------------------------------------------------------------------------
    def _offsets(self, actors: Sequence[_Actor]) -> dict[int, ClockOffset]:
        """Each actor's clock minus the driver's, by CLOCK_ROUND_TRIPS timed calls (bounded)."""
        ray = self._ray
        samples: dict[int, list] = {a.index: [] for a in actors}
        for _ in range(CLOCK_ROUND_TRIPS):
            for a in actors:
                sent = time.perf_counter()
                remote = ray.get(a.handle.clock.remote(), timeout=BARRIER_TIMEOUT_S)
                samples[a.index].append((sent, remote, time.perf_counter()))
        return {i: estimate_offset(rows) for i, rows in samples.items()}

    def _failed(self, refs) -> set:
        """Those of `refs` that gave no answer within BARRIER_TIMEOUT_S, or raised."""
        ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=BARRIER_TIMEOUT_S)
        failed = set(refs) - set(ready)
        for ref in ready:
            try:
                self._ray.get(ref)
            except Exception:
                failed.add(ref)
        return failed

    def _barrier(self, actors: list[_Actor]) -> dict[int, ClockOffset]:
        """Every actor answers (else it is lost and dropped), then the clock offsets of those that did."""
        refs = {a.handle.hello.remote(): a for a in actors}
        for ref in self._failed(refs):
            self._drop(refs[ref])
        live = [a for a in actors if a.alive]
        if not live:
            raise KneecapError(
                f"every client actor on the Ray cluster at {self._conn.address} is gone",
                "check the cluster (ray status), then continue with --resume DIR --ray ADDRESS",
            )
        try:
            return self._offsets(live)
        except Exception as exc:
            raise KneecapError(
                f"could not read the client actors' clocks on the Ray cluster at {self._conn.address} "
                f"({type(exc).__name__})",
                "check the cluster (ray status), then continue with --resume DIR --ray ADDRESS",
            ) from None

    def run(self, task, on_record: Callable[[RequestRecord], None]) -> list:
        """Run one level split over the live actors; outcomes in actor order once every share is over."""
        import orjson

        ray = self._ray
        actors = [a for a in self._actors if a.alive]
        offsets = self._barrier(actors)
        actors = [a for a in actors if a.alive]
        shares = self._split(task, len(actors))
        actors = actors[: len(shares)]
        start_at = time.perf_counter() + START_LEAD_S + max(o.rtt_s for o in offsets.values())
        received: dict[int, set] = {a.index: set() for a in actors}
        self._runs += 1
        run_id = self._runs
        started = {
            a.handle.start.remote(
                run_id,
                dataclasses.replace(share, epoch=offsets[a.index].to_remote(share.epoch)),
                offsets[a.index].to_remote(start_at),
            ): a
            for a, share in zip(actors, shares)
        }
        failed_start = self._failed(started)

        results: dict[int, tuple] = {}
        outstanding: dict[int, object] = {}  # actor index -> its poll in flight
        last_heard = {a.index: time.monotonic() for a in actors}
        by_index = {a.index: a for a in actors}
        pending = {a.index for a in actors}
        cuts: list | None = None  # the cut sent to the other actors at the first refused key (held to the level's end)
        for ref in failed_start:  # it never started its share: every request of it is lost
            results[started[ref].index] = ("lost", "the actor did not start its share")
            pending.discard(started[ref].index)
        while pending:
            for i in pending:
                if i not in outstanding:
                    outstanding[i] = by_index[i].handle.poll.remote(run_id)
            refs = {outstanding[i]: i for i in pending}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_S * 4)
            now = time.monotonic()
            for ref in ready:
                i = refs[ref]
                del outstanding[i]
                try:
                    blob, _, result, refused = ray.get(ref)
                except Exception as exc:  # the actor (or its node) died
                    results[i] = ("lost", f"{type(exc).__name__}")
                    pending.discard(i)
                    continue
                last_heard[i] = now
                if refused and cuts is None:  # the first refused key in any actor cuts the level in all of them
                    cuts = [a.handle.cut.remote(run_id, refused) for a in actors if a.index != i and a.alive]
                for line in blob.splitlines():
                    record = RequestRecord.from_dict(orjson.loads(line))
                    received[i].add(record.request_id)
                    on_record(record)
                if result is not None:
                    results[i] = result
                    pending.discard(i)
            for i in list(pending):
                if now - last_heard[i] > SILENT_S:
                    results[i] = ("lost", f"no answer for {SILENT_S:g} s")
                    pending.discard(i)
            if ready:
                time.sleep(POLL_S)

        outcomes = []
        error = None
        for a, share in zip(actors, shares):
            kind, payload, *rest = results[a.index]
            facts = {
                "address": self._conn.address,
                "actor": a.index,
                "node_id": a.node_id,
                "pid": a.pid,
                "clock_offset_s": offsets[a.index].offset_s,
                "clock_rtt_s": offsets[a.index].rtt_s,
            }
            if kind == "done":
                data = dict(payload)
                data["client"] = dict(data.get("client") or {}, ray=dict(facts, start_late_s=rest[0]))
                outcomes.append(self._outcome(data))
                continue
            if kind == "error":
                error = error or payload
                continue
            self._drop(a)
            lost = [spec for spec in share.specs if spec.request_id not in received[a.index]]
            end_at = time.perf_counter() - task.epoch
            for spec in lost:
                on_record(_lost_record(spec, share, end_at, payload))
            reason = (
                f"the Ray actor (node {a.node_id[:12]}) was lost mid-level ({payload}): "
                f"{len(lost)} request(s) counted as failed ({CLIENT_LOST})"
            )
            outcomes.append(
                self._outcome(
                    {
                        "num_records": len(received[a.index]) + len(lost),
                        "suspect": True,
                        "client": {"lost": True, "lost_requests": len(lost), "suspect_reasons": [reason], "ray": facts},
                    }
                )
            )
        if error is not None:
            raise KneecapError(str(error).removeprefix("error: "), None)
        return outcomes

    # -- the end ---------------------------------------------------------------------------
    def _drop(self, actor: _Actor) -> None:
        actor.alive = False
        self._kill([actor.handle])

    def _kill(self, handles) -> None:
        for h in handles:
            try:
                self._ray.kill(h, no_restart=True)
            except Exception:  # already gone
                pass

    def close(self) -> None:
        """Stop every actor, free the placement group, disconnect."""
        self._kill([a.handle for a in self._actors])
        try:
            self._remove_pg(self._pg)
        except Exception:
            pass
        self._conn.close()

    def terminate(self) -> None:
        """Ctrl-C or a fatal error: the same (actors are killed with their in-flight requests)."""
        self.close()


def _lost_record(spec, share, end_at: float, why: str) -> RequestRecord:
    """A request whose actor was lost before its record reached the driver: failed, kind client_lost."""
    concurrency = int(share.value) if share.kind == "concurrency" else None
    rate = float(share.value) if share.kind != "concurrency" else None
    return RequestRecord(
        request_id=spec.request_id,
        level=share.level,
        concurrency=concurrency,
        rate=rate,
        class_name=spec.class_name,
        warmup=share.warmup,
        end_at=end_at,
        expected_input_tokens=spec.input_tokens,
        expected_output_tokens=spec.output_tokens,
        status=ERROR,
        error_kind=CLIENT_LOST,
        error_message=f"the client actor running this request was lost ({why})",
    )


def open_pool(
    target: RayTarget,
    setup,
    *,
    max_streams: int | None,
    api_key: str | None,
    run_fn: Callable,
    split_fn: Callable,
    outcome_fn: Callable[[dict], object],
) -> ActorPool:
    """Connect to `target.address` and start the actors: one per CPU of the cluster, more when the largest
    level (max_streams concurrent streams) would put more than target.streams_per_actor on one."""
    from kneecap.cluster.connect import actors_for, connect

    conn = connect(target.address)
    try:
        return ActorPool(
            conn,
            setup,
            num_actors=actors_for(conn.cpus(), max_streams, target),
            run_fn=run_fn,
            split_fn=split_fn,
            outcome_fn=outcome_fn,
            api_key=api_key,
        )
    except BaseException:
        conn.close()
        raise
