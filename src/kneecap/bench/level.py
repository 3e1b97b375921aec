"""One level's share of load, run on this process's event loop by the client driver.

`LevelTask` is what the sweep hands to a process (itself, or a spawned worker): which level,
which load (a concurrency or a rate share), which requests. `run_task` runs it with
kneecap.client.driver and returns a `LevelOutcome`: the client's own timing and lag, without
the records, which went to `on_record` one by one as they finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
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


@dataclass
class LevelOutcome:
    """What a driver reported about its share of a level (records excluded; they are streamed)."""

    num_records: int = 0
    suspect: bool = False
    client: dict = field(default_factory=dict)  # the driver's LevelRun fields: lag, timing, CPU


def _plain(value):
    """A LevelRun field as plain JSON-able data (dataclasses -> dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def outcome_from_run(run, num_records: int) -> LevelOutcome:
    """Keep every LevelRun field except the records themselves."""
    if dataclasses.is_dataclass(run):
        data = {f.name: _plain(getattr(run, f.name)) for f in dataclasses.fields(run) if f.name != "records"}
    else:
        data = {k: _plain(v) for k, v in vars(run).items() if k != "records"}
    return LevelOutcome(num_records=num_records, suspect=bool(data.get("suspect")), client=data)


def new_event_loop():
    """uvloop when installed (faster socket reads), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_task(cfg, task: LevelTask, on_record: Callable[[RequestRecord], None]) -> LevelOutcome:
    """Run one task to completion on a fresh event loop in this process."""
    from kneecap.client import driver

    count = 0

    def record_sink(record: RequestRecord) -> None:
        nonlocal count
        count += 1
        if task.warmup:
            record.warmup = True
        on_record(record)

    specs = list(task.specs)
    if task.kind == "concurrency":
        call = driver.run_closed_loop(cfg, specs, int(task.value), level=task.level, epoch=task.epoch,
                                      on_record=record_sink, **_optional(driver.run_closed_loop, task))
    else:
        call = driver.run_open_loop(cfg, specs, task.value, burstiness=task.burstiness, seed=task.seed,
                                    level=task.level, epoch=task.epoch, on_record=record_sink,
                                    **_optional(driver.run_open_loop, task))
    if inspect.isawaitable(call):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            run = runner.run(call)
    else:
        run = call
    return outcome_from_run(run, count)


def _optional(fn, task: LevelTask) -> dict:
    """Keyword arguments the driver may accept beyond the agreed signature (duration)."""
    params = inspect.signature(fn).parameters
    extra = {}
    if task.duration_s is not None and "duration_s" in params:
        extra["duration_s"] = task.duration_s
    return extra
