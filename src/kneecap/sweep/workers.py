"""`--workers N`: one level's streams spread over N spawned processes, records merged exactly.

Each worker runs its own event loop and driver on its share (concurrency split as evenly as
whole streams allow, rate split evenly, requests dealt round-robin) and sends every finished
record back as one serialised line; the parent writes them to requests.jsonl as they arrive, so
statistics are computed from the merged raw records and are exact. A refused API key (HTTP 401/403)
in any worker cuts the level in all of them: the workers share one status the first refusal writes
(kneecap.client.driver.AuthCut.shared), reset before each level. Workers ignore SIGINT: the
parent decides when to stop them. Owns the processes; knows nothing of statistics.
"""

from __future__ import annotations

import dataclasses
import queue
from typing import Callable, Sequence

from kneecap.sweep.level import DriverSetup, LevelOutcome, LevelTask, run_task
from kneecap.errors import KneecapError
from kneecap.records import RequestRecord

POLL_S = 0.25  # how often the parent checks that its workers are still alive while waiting
STOP_TIMEOUT_S = 5.0  # grace given to a worker to exit before it is terminated
ORPHAN_CHECK_S = 1.0  # an idle worker checks this often that its parent is still alive
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def split_concurrency(concurrency: int, num_workers: int) -> list[int]:
    """Whole streams per worker, as even as possible; workers left with 0 streams are dropped."""
    base, extra = divmod(int(concurrency), num_workers)
    shares = [base + (1 if i < extra else 0) for i in range(num_workers)]
    return [s for s in shares if s > 0]


def split_rate(rate: float, num_workers: int) -> list[float]:
    """Even split: N independent Poisson(rate/N) streams superpose to Poisson(rate).

    With burstiness != 1 the superposition of N gamma processes is only approximately gamma
    with the same shape: per-worker burstiness is kept, aggregate burstiness regresses toward 1.
    """
    return [rate / num_workers] * num_workers


def deal(specs: Sequence, num_shares: int) -> list[tuple]:
    """Round-robin: share k gets specs k, k+n, k+2n... so each share sees the same length mix."""
    return [tuple(specs[k::num_shares]) for k in range(num_shares)]


def split_task(task: LevelTask, num_workers: int) -> list[LevelTask]:
    """One level task -> up to num_workers tasks whose loads and requests add up to the original."""
    if task.users is not None:  # a concurrency ramp's streams follow one clock: one process runs them
        return [task]
    if task.conversations:  # users split as streams are; conversations dealt round-robin, their turns with them
        values = split_concurrency(int(task.value), min(num_workers, len(task.conversations)))
        convs = deal(task.conversations, len(values))
        turns = len(task.specs) // max(1, len(task.conversations))
        by_conv = [tuple(task.specs[i * turns : (i + 1) * turns]) for i in range(len(task.conversations))]
        shares = [tuple(s for i in range(k, len(by_conv), len(values)) for s in by_conv[i]) for k in range(len(values))]
        return [
            dataclasses.replace(task, value=v, specs=sp, conversations=cs, seed=task.seed * 1000 + k)
            for k, (v, sp, cs) in enumerate(zip(values, shares, convs))
            if cs
        ]
    if task.offsets is not None:  # a trace's or a ramp's send times: each share keeps its requests' own times
        n = min(num_workers, max(1, len(task.specs)))
        pairs = deal(list(zip(task.specs, task.offsets)), n)
        return [
            dataclasses.replace(
                task,
                value=task.value / n,
                specs=tuple(s for s, _ in share),
                offsets=tuple(t for _, t in share),
                seed=task.seed * 1000 + k,
            )
            for k, share in enumerate(pairs)
            if share
        ]
    if task.kind == "concurrency":
        values = split_concurrency(int(task.value), num_workers)
    else:
        values = split_rate(task.value, min(num_workers, max(1, len(task.specs))))
    return [
        dataclasses.replace(task, value=value, specs=specs, seed=task.seed * 1000 + k)
        for k, (value, specs) in enumerate(zip(values, deal(task.specs, len(values))))
        if specs
    ]


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this worker when its parent dies (even by SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, 9)  # 9 = SIGKILL
    except (OSError, AttributeError):  # not Linux: the getppid() check below still ends orphans
        pass


def _worker_main(worker_id: int, setup: DriverSetup, commands, results, parent_pid: int, refused=None) -> None:
    """Worker process body: run tasks until told to stop (None), streaming records to the parent.
    `refused`: the workers' shared refusal status (a multiprocessing.Value("i"); 0 = none this level)."""
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        return
    from kneecap.client.driver import AuthCut
    from kneecap.records import dumps_record

    AuthCut.shared = refused  # this process's levels cut, and are cut, with the other workers'

    while True:
        try:
            task = commands.get(timeout=ORPHAN_CHECK_S)
        except queue.Empty:
            if os.getppid() != parent_pid:
                return
            continue
        if task is None:
            return
        try:
            outcome = run_task(setup, task, lambda r: results.put(("record", worker_id, dumps_record(r))))
            results.put(("done", worker_id, dataclasses.asdict(outcome)))
        except KneecapError as exc:
            results.put(("error", worker_id, exc.one_line()))
        except Exception as exc:  # report, never die silently: the parent turns it into one line
            results.put(("error", worker_id, f"error: client worker {worker_id} failed: {type(exc).__name__}: {exc}"))


class WorkerPool:
    """N long-lived spawned processes (imports paid once per run, not once per level)."""

    def __init__(self, num_workers: int, setup: DriverSetup):
        import multiprocessing
        import os

        ctx = multiprocessing.get_context("spawn")
        self._results = ctx.Queue()
        self._commands = [ctx.Queue() for _ in range(num_workers)]
        self._refused = ctx.Value("i", 0)  # the first refused key's HTTP status in any worker, this level
        self._procs = [
            ctx.Process(
                target=_worker_main,
                args=(i, setup, self._commands[i], self._results, os.getpid(), self._refused),
                name=f"kneecap-bench-worker-{i}",
                daemon=True,
            )
            for i in range(num_workers)
        ]
        for proc in self._procs:
            proc.start()

    @property
    def size(self) -> int:
        return len(self._procs)

    def run(self, task: LevelTask, on_record: Callable[[RequestRecord], None]) -> list[LevelOutcome]:
        """Run one level split over the workers; returns each worker's outcome once all are done."""
        import orjson

        tasks = split_task(task, self.size)
        self._refused.value = 0  # the workers are idle between levels: a new level starts uncut
        for worker_id, sub in enumerate(tasks):
            self._commands[worker_id].put(sub)
        outcomes: dict[int, LevelOutcome] = {}
        pending = set(range(len(tasks)))
        while pending:
            try:
                kind, worker_id, payload = self._results.get(timeout=POLL_S)
            except queue.Empty:
                dead = [i for i in pending if not self._procs[i].is_alive()]
                if dead:
                    raise KneecapError(
                        f"client worker {dead[0]} exited (code {self._procs[dead[0]].exitcode}) during level {task.level}",
                        "check memory and file-descriptor limits, or run with fewer --workers",
                    ) from None
                continue
            if kind == "record":
                on_record(RequestRecord.from_dict(orjson.loads(payload)))
            elif kind == "done":
                outcomes[worker_id] = LevelOutcome(**payload)
                pending.discard(worker_id)
            else:
                raise KneecapError(str(payload).removeprefix("error: "), None)
        return [outcomes[i] for i in sorted(outcomes)]

    def close(self) -> None:
        """Ask every worker to exit, then terminate any that do not within STOP_TIMEOUT_S."""
        for commands, proc in zip(self._commands, self._procs):
            if proc.is_alive():
                try:
                    commands.put(None)
                except (OSError, ValueError):
                    pass
        for proc in self._procs:
            proc.join(timeout=STOP_TIMEOUT_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=STOP_TIMEOUT_S)
        self._close_queues()

    def terminate(self) -> None:
        """Stop now (Ctrl-C or a fatal error): kill the workers' in-flight requests."""
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(timeout=STOP_TIMEOUT_S)
        self._close_queues()

    def _close_queues(self) -> None:
        for q in (self._results, *self._commands):
            q.close()
            q.cancel_join_thread()


def merge_outcomes(outcomes: Sequence[LevelOutcome], workers: int) -> dict:
    """Per-level client facts over all workers: suspect if any was; each worker's own report kept.

    A `--duration` closed-loop level runs in rounds, each over all `workers` processes, so
    `per_worker` holds one report per worker per round (round by round) and `rounds` says how many.
    Workers that were Ray actors (`--ray`, kneecap.cluster) each say where they ran; `ray` sums that up.
    `read_path` is how the workers read streamed bodies (kneecap.client.read_path), "mixed" when they
    did not all read them the same way (per_worker says which did what)."""
    merged = {
        "workers": workers,
        "rounds": -(-len(outcomes) // workers),
        "suspect": any(o.suspect for o in outcomes),
        "per_worker": [o.client for o in outcomes],
    }
    # how the workers read streamed bodies (kneecap.client.read_path): one name when they all agree
    paths = {o.client.get("read_path") for o in outcomes if o.client.get("read_path")}
    if paths:
        merged["read_path"] = paths.pop() if len(paths) == 1 else "mixed"
        streams: dict = {}
        for o in outcomes:
            for path, n in (o.client.get("streams_by_read_path") or {}).items():
                streams[path] = streams.get(path, 0) + n
        merged["streams_by_read_path"] = streams
    placed = [o.client["ray"] for o in outcomes if isinstance(o.client.get("ray"), dict)]
    if placed:
        merged["ray"] = {
            "address": placed[0].get("address"),
            "nodes": len({p.get("node_id") for p in placed}),
            "actors": len({p.get("actor") for p in placed}),
            "lost_actors": sum(1 for o in outcomes if o.client.get("lost")),
        }
    return merged
