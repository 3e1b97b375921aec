"""One level's share of load, run on this process's event loop by the client driver.

`LevelTask` is what the sweep hands to a process (itself, or a spawned worker): which level,
which load (a concurrency or a rate share), which requests. `run_task` runs it with
kneecap.client.driver and returns a `LevelOutcome`: the client's own timing and lag, without
the records, which went to `on_record` one by one as they finished. Times are seconds since
the run's epoch, a time.perf_counter() value (CLOCK_MONOTONIC on Linux, shared by processes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kneecap.records import RequestRecord
from kneecap.workload import RequestSpec


@dataclass(frozen=True)
class LevelTask:
    """A process's share of one level. `value` is its concurrency (closed) or its rate in req/s (open)."""

    level: int
    kind: str  # "concurrency" | "rate"
    value: float
    specs: tuple[RequestSpec, ...]
    epoch: float  # the run's monotonic epoch: record times are seconds since it
    burstiness: float = 1.0
    seed: int = 0
    warmup: bool = False
    duration_s: float | None = None
    on_s: float | None = None  # open loop in on/off bursts (kneecap.workload.arrival_offsets)
    off_s: float = 0.0
    offsets: tuple[float, ...] | None = (
        None  # open loop at these send times (s from the level's start): a trace, a ramp
    )
    users: tuple[tuple[float, int], ...] | None = None  # closed loop whose streams follow [(t_s, streams)] (a ramp)
    conversations: tuple = ()  # --turns: kneecap.workload.multiturn.Conversation, value users hold them
    think_time_s: float = 0.0


@dataclass
class LevelOutcome:
    """What a driver reported about its share of a level (records excluded; they are streamed)."""

    num_records: int = 0
    suspect: bool = False
    client: dict = field(default_factory=dict)  # the driver's LevelRun fields: lag, timing, CPU


@dataclass(frozen=True)
class DriverSetup:
    """What every process needs to drive the server: the client config and the prompt source (picklable)."""

    cfg: object  # kneecap.client.driver.ClientConfig
    prompts: object | None = None  # a kneecap.client.prompts PromptSource; None = the driver's default
    warm_connections: int = 0  # open loop: connections opened before the level's clock starts
    answer_tokenizer: object | None = None  # --turns with token-id prompts: the answer text's ids (.token_ids(text))


def run_task(
    setup: DriverSetup, task: LevelTask, on_record: Callable[[RequestRecord], None], *, refused=None
) -> LevelOutcome:
    """Run one task to completion on a fresh event loop (uvloop) in this process.

    `refused`: the level's refused-key status shared with its other shares' processes (an object whose
    `.value` is the first refusal's HTTP status, 0 = none; kneecap.client.driver.AuthCut.shared), which this
    process's levels then write and watch; a Ray actor passes its own (kneecap.cluster.streams). None: the
    process's setting stays (a --workers process sets it once)."""
    from kneecap.client import driver

    if refused is not None:
        driver.AuthCut.shared = refused

    count = 0

    def record_sink(record: RequestRecord) -> None:
        nonlocal count
        count += 1
        on_record(record)

    specs = list(task.specs)
    # records are streamed to on_record (and on to disk); the driver keeps none, so memory stays flat
    common = dict(
        level=task.level,
        epoch=task.epoch,
        on_record=record_sink,
        prompts=setup.prompts,
        warmup=task.warmup,
        duration_s=task.duration_s,
        keep_records=False,
    )
    if task.conversations:
        common.pop("duration_s")
        coro = driver.run_conversations(
            setup.cfg,
            task.conversations,
            int(task.value),
            specs=specs,
            think_time_s=task.think_time_s,
            answer_tokenizer=setup.answer_tokenizer,
            **common,
        )
    elif task.kind == "concurrency":
        coro = driver.run_closed_loop(setup.cfg, specs, int(task.value), users=task.users, **common)
    else:
        coro = driver.run_open_loop(
            setup.cfg,
            specs,
            task.value,
            burstiness=task.burstiness,
            seed=task.seed,
            warm_connections=min(setup.warm_connections, len(specs)),
            on_s=task.on_s,
            off_s=task.off_s,
            offsets=task.offsets,
            **common,
        )
    run = driver.run_sync(coro)
    # the driver's self-measurement of the level (JSON-ready: lags in ms, CPU, suspect and why), records excluded
    data = run.client_stats() | dict(started_at=run.started_at, ended_at=run.ended_at, duration_s=run.duration_s)
    return LevelOutcome(num_records=count, suspect=bool(run.suspect), client=data)
