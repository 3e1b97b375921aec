"""A sweep level as the level runner (kneecap.sweep.runner) and its drivers speak of it: the plan of a
level before it runs, what a driver hands back after it, and the driver's interface.

Values only; the runner owns the order of levels, each driver how a level's requests are sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from kneecap.records import RequestRecord


@dataclass(frozen=True)
class SweepLevel:
    """One level of the sweep, before it runs."""

    index: int
    value: float | str  # a concurrency, a rate in req/s, or "max" (the simulator: every request at once)
    num_requests: int | None  # measured requests (None: as many as a --duration level sends)
    num_warmup: int
    first_index: int  # RequestSpec.index of its first request (unique over the sweep)
    verdict: dict | None = None  # the preflight row for this level, if one was computed


# Request indices (which seed each random prompt, so they must never repeat in a sweep): level i
# uses [i x LEVEL_INDEX_STRIDE, (i + 1) x LEVEL_INDEX_STRIDE), warmup first, then round after round.
LEVEL_INDEX_STRIDE = 10**9


class LevelOptions(Protocol):
    """What the runner reads of a command's options (BenchOptions and SimulateOptions have it)."""

    kind: str
    levels: tuple
    warmup: int
    force: bool

    def requests_for(self, value) -> int | None: ...
    def level_label(self, value) -> str: ...


def sweep_levels(opts: LevelOptions, verdicts: dict | None = None) -> list[SweepLevel]:
    """Every level in the order given, with request budgets and sweep-unique request indices."""
    return [
        SweepLevel(
            index=i,
            value=value,
            num_requests=opts.requests_for(value),
            num_warmup=opts.warmup,
            first_index=i * LEVEL_INDEX_STRIDE,
            verdict=(verdicts or {}).get(value),
        )
        for i, value in enumerate(opts.levels)
    ]


@dataclass
class LevelRun:
    """What a driver hands back for one level: the records to summarize (None: read them back from
    requests.jsonl), the server's metrics in the one server_metrics shape, level fields only this driver
    knows (wall time, the client's own lag), and a note for the end-of-level line."""

    server_metrics: dict
    records: Iterable[RequestRecord] | None = None
    fields: dict = field(default_factory=dict)
    note: str = ""
    trace: list = field(default_factory=list)  # the simulated engine's rows per step, when asked for


class LevelDriver(Protocol):
    def run_level(self, level: SweepLevel, keep: Callable[[RequestRecord], None]) -> LevelRun: ...

    def server_gone(self, summary: dict) -> str | None:
        """After a level: a sentence saying the server stopped answering, or None."""


SOURCES = ("simulator", "prometheus", "usage", "none")  # usage: only what the responses' usage said (cached tokens)


def server_metrics(
    source: str,
    *,
    preemptions=None,
    kv_usage_max=None,
    kv_usage_mean=None,
    running_max=None,
    waiting_max=None,
    prefix_cache_hit_rate=None,
    **detail,
) -> dict:
    """The one per-level server_metrics shape, whatever measured it: counts as ints, usage and hit rate as
    fractions 0..1, None where the source cannot tell; `source` "simulator" | "prometheus" | "usage" | "none".
    `detail`: further keys a source knows (kept beside the contract's, never instead of them)."""
    if source not in SOURCES:
        raise ValueError(f"server_metrics source {source!r} is not one of {SOURCES}")

    def count(v):
        return None if v is None else int(round(v))

    def fraction(v):
        return None if v is None else round(min(1.0, max(0.0, float(v))), 6)

    return {
        **detail,
        "preemptions": count(preemptions),
        "kv_usage_max": fraction(kv_usage_max),
        "kv_usage_mean": fraction(kv_usage_mean),
        "running_max": count(running_max),
        "waiting_max": count(waiting_max),
        "prefix_cache_hit_rate": fraction(prefix_cache_hit_rate),
        "source": source,
    }
