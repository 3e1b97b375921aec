"""A trace as `kneecap recommend`'s workload (--replay TRACE --replay-speed X): the trace's rows become one request
class whose input and output lengths are drawn from the trace's own lengths (each sampled on its own, with
replacement), and its mean arrival rate x the speed becomes the rate to serve. The search takes that class through
the same path as a --classes file; the confirming bench run replays the trace itself, at its own arrival times.

Owns the summary of what was taken from the trace (rows, mean rate, ISL/OSL mean and p99) and the names of the
length files a `kneecap run` plan reads; parsing is kneecap.workload.traces's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kneecap.metrics.stats import nearest_rank
from kneecap.workload import LengthDist, RequestClass, Workload
from kneecap.workload.traces import plan_replay, read_trace, replay_rate

CLASS_NAME = "trace"
# the trace's lengths, one token count a line, beside the run plans (a load plan's empirical length `file`)
LENGTH_FILES = {"input": "trace-input-tokens.txt", "output": "trace-output-tokens.txt"}


@dataclass(frozen=True)
class TraceLoad:
    path: str
    speed: float
    rows: int
    trace_rate: float  # mean requests/s at the recorded speed (replay_rate, as bench and simulate compute it)
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    failed_rows: int = 0  # BurstGPT rows with 0 response tokens (not replayable, left out)

    @property
    def rate(self) -> float:
        """The rate to serve: the trace's mean rate x the replay speed."""
        return self.trace_rate * self.speed

    @property
    def workload(self) -> Workload:
        return Workload(
            classes=(
                RequestClass(
                    name=CLASS_NAME,
                    input=LengthDist(kind="empirical", values=self.input_tokens),
                    output=LengthDist(kind="empirical", values=self.output_tokens),
                ),
            )
        )

    def summary(self) -> dict:
        n = self.rows
        return {
            "file": self.path,
            "speed": self.speed,
            "rows": n,
            "failed_rows_left_out": self.failed_rows,
            "mean_rate_recorded": round(self.trace_rate, 6),
            "rate": round(self.rate, 6),
            "input_tokens_mean": round(sum(self.input_tokens) / n, 1),
            "input_tokens_p99": nearest_rank(sorted(self.input_tokens), 0.99),
            "output_tokens_mean": round(sum(self.output_tokens) / n, 1),
            "output_tokens_p99": nearest_rank(sorted(self.output_tokens), 0.99),
            "model": "one request class: input and output lengths each sampled from the trace's own (with replacement); "
            "Poisson arrivals at the trace's mean rate x the speed",
        }

    def describe(self) -> str:
        s = self.summary()
        return (
            f"from trace {self.path}: {s['rows']} requests"
            + (f" ({s['failed_rows_left_out']} failed rows left out)" if self.failed_rows else "")
            + f", mean rate {self.trace_rate:.4g} requests/s x speed {self.speed:g} = {self.rate:.4g} requests/s; "
            f"input tokens mean {s['input_tokens_mean']:g} / p99 {s['input_tokens_p99']}, "
            f"output tokens mean {s['output_tokens_mean']:g} / p99 {s['output_tokens_p99']}"
        )

    def speed_for(self, rate: float) -> float:
        """The --replay-speed at which a bench replay of the trace offers `rate` requests/s on average."""
        return rate / self.trace_rate


def trace_load(path: str | Path, speed: float = 1.0) -> TraceLoad:
    """Read a Mooncake JSONL or BurstGPT CSV trace (the readers' own one-line errors on a bad file or speed)."""
    trace = read_trace(path)
    replay = plan_replay(trace, replay_speed=speed)
    schedule = [(r.send_at_s * speed, r.spec) for r in replay.requests]  # at the recorded speed
    return TraceLoad(
        path=str(path),
        speed=float(speed),
        rows=len(schedule),
        trace_rate=replay_rate(schedule),
        input_tokens=tuple(s.input_tokens for _, s in schedule),
        output_tokens=tuple(s.output_tokens for _, s in schedule),
        failed_rows=len(trace.failed_rows),
    )


def write_length_files(d: Path, t: TraceLoad) -> None:
    for kind, values in (("input", t.input_tokens), ("output", t.output_tokens)):
        (d / LENGTH_FILES[kind]).write_text("".join(f"{v}\n" for v in values))
