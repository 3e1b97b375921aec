"""The client's measurement of itself during a level, and the rule that marks a level `suspect`.

Owns: the event-loop lag probe and process CPU time (SelfMonitor), LevelRun (a level's records plus
that self-measurement) and judge_suspect (the documented thresholds). A level is suspect when the
client, not the server, may have set the numbers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Sequence

from kneecap.client.tasks import cancel_and_wait
from kneecap.records import RequestRecord

# Self-certification thresholds (the `suspect` rule; see LevelRun):
LOOP_LAG_P99_LIMIT_S = (
    0.005  # work waits this long for the loop: sends go out late, loop-stamped reads are stamped late
)
CPU_FRACTION_LIMIT = 0.90  # the process used >= 90 % of one core: its single event loop is saturated
# A CPU share is judged only over a window at least this long: over a millisecond-long level the client's
# fixed per-level work (preparing bodies, opening connections) is most of the window, saturated or not.
MIN_CPU_WINDOW_S = 1.0
SCHEDULE_LAG_P99_LIMIT_S = 0.010  # open loop: sends left this late after their intended time
LOOP_TICK_S = 0.010  # the lag probe's period


@dataclass
class ReadStamps:
    """Which clock stamped a level's streamed response bodies, and how late the event loop was.

    kernel_streams: bodies read by KernelStampedReader (client/body_tap.py), whose reads carry the
    kernel's receive time (SO_TIMESTAMPNS); loop_streams: bodies stamped when the event loop read
    them (no kernel stamps on this platform or connection). kernel_reads: reads that carried a
    kernel stamp; loop_wait is how long each waited between arriving and being read: the error loop
    stamping would have added. read_path: the way the client chose to read bodies
    (kneecap.client.read_path; read_path_note says why, when it fell back); aiohttp_streams: bodies
    read by aiohttp's own reader (counted in loop_streams too: its reads are stamped by the loop).
    """

    kernel_streams: int = 0
    loop_streams: int = 0
    aiohttp_streams: int = 0
    read_path: str | None = None
    read_path_note: str | None = None
    kernel_reads: int = 0
    loop_wait_ns: int = 0  # summed over kernel_reads
    loop_wait_max_ns: int = 0

    def add_kernel(self, reads: int, wait_ns: int, wait_max_ns: int) -> None:
        self.kernel_streams += 1
        self.kernel_reads += reads
        self.loop_wait_ns += wait_ns
        self.loop_wait_max_ns = max(self.loop_wait_max_ns, wait_max_ns)

    def stats(self) -> dict:
        """JSON-ready (milliseconds)."""
        extra = {"read_path_note": self.read_path_note} if self.read_path_note else {}
        return {
            "read_path": self.read_path,
            **extra,
            "streams_by_read_path": {
                "body_tap+kernel_stamps": self.kernel_streams,
                "body_tap": self.loop_streams - self.aiohttp_streams,
                "aiohttp": self.aiohttp_streams,
            },
            "kernel_stamped_streams": self.kernel_streams,
            "loop_stamped_streams": self.loop_streams,
            "kernel_stamped_reads": self.kernel_reads,
            "read_loop_wait_mean_ms": self.loop_wait_ns / self.kernel_reads / 1e6 if self.kernel_reads else 0.0,
            "read_loop_wait_max_ms": self.loop_wait_max_ns / 1e6,
        }


@dataclass
class LevelRun:
    """One level's records plus the client's measurement of itself; `suspect` and `suspect_reasons` are
    judge_suspect's verdict (the thresholds above)."""

    level: int
    concurrency: int | None
    rate: float | None
    records: list[RequestRecord]
    started_at: float  # s since the run epoch
    ended_at: float
    cpu_s: float  # process CPU time (user + system) over the level
    loop_lag_s: list[float]  # lag samples of a LOOP_TICK_S ticker
    schedule_lag_s: list[float]  # sent_at - scheduled_at per request (open loop)
    suspect: bool = False
    suspect_reasons: list[str] = field(default_factory=list)
    read_stamps: ReadStamps = field(default_factory=ReadStamps)
    cut: str | None = None  # the level ended at its first refused-key answer ("http_401" / "http_403"): AuthCut

    @property
    def duration_s(self) -> float:
        return self.ended_at - self.started_at

    @property
    def cpu_fraction(self) -> float:
        """Process CPU seconds per wall second (1.0 = one core busy)."""
        return self.cpu_s / self.duration_s if self.duration_s > 0 else 0.0

    def client_stats(self) -> dict:
        """JSON-ready self-measurement (milliseconds for lags)."""
        return {
            "loop_lag_p50_ms": _pct(self.loop_lag_s, 50) * 1e3,
            "loop_lag_p99_ms": _pct(self.loop_lag_s, 99) * 1e3,
            "loop_lag_max_ms": max(self.loop_lag_s, default=0.0) * 1e3,
            "loop_lag_n": len(self.loop_lag_s),
            "schedule_lag_p50_ms": _pct(self.schedule_lag_s, 50) * 1e3,
            "schedule_lag_p99_ms": _pct(self.schedule_lag_s, 99) * 1e3,
            "schedule_lag_max_ms": max(self.schedule_lag_s, default=0.0) * 1e3,
            "cpu_s": self.cpu_s,
            "cpu_fraction": self.cpu_fraction,
            "suspect": self.suspect,
            "suspect_reasons": list(self.suspect_reasons),
            **self.read_stamps.stats(),
        }


def _pct(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0.0 for no samples: callers also report n)."""
    if not samples:
        return 0.0
    s = sorted(samples)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def judge_suspect(
    loop_lag_s: Sequence[float],
    cpu_fraction: float,
    schedule_lag_s: Sequence[float],
    *,
    duration_s: float | None = None,
) -> list[str]:
    """The reasons (possibly none) why a level's numbers may be the client's doing. duration_s: the level's
    window; a CPU share over less than MIN_CPU_WINDOW_S says nothing and is not judged."""
    reasons = []
    lag99 = _pct(loop_lag_s, 99)
    if lag99 > LOOP_LAG_P99_LIMIT_S:
        reasons.append(f"event-loop lag p99 {lag99 * 1e3:.1f} ms > {LOOP_LAG_P99_LIMIT_S * 1e3:.0f} ms")
    if cpu_fraction > CPU_FRACTION_LIMIT and (duration_s is None or duration_s >= MIN_CPU_WINDOW_S):
        reasons.append(f"client CPU {cpu_fraction:.0%} of a core > {CPU_FRACTION_LIMIT:.0%}")
    sched99 = _pct(schedule_lag_s, 99)
    if sched99 > SCHEDULE_LAG_P99_LIMIT_S:
        reasons.append(f"schedule lag p99 {sched99 * 1e3:.1f} ms > {SCHEDULE_LAG_P99_LIMIT_S * 1e3:.0f} ms")
    return reasons


class SelfMonitor:
    """Event-loop lag ticker + process CPU time, started before a level and stopped after it."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task | None = None
        self.cpu_s = 0.0
        self._cpu0 = 0.0

    async def _tick(self) -> None:
        perf = time.perf_counter
        expected = perf() + LOOP_TICK_S
        while True:
            await asyncio.sleep(LOOP_TICK_S)
            now = perf()
            self.samples.append(max(0.0, now - expected))
            expected = now + LOOP_TICK_S

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        self.cpu_s = time.process_time() - self._cpu0
        await cancel_and_wait(self._task)
