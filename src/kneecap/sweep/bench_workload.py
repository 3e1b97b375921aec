"""What each bench level sends: its requests, and when, drawn from the one workload code (kneecap.workload).

Owns reading BenchOptions' workload (a dataset with its own lengths, a replayed trace) once and handing
it, with the lengths, ramp and turns given, to the one level translation (kneecap.workload.level_work)
that `kneecap simulate` uses too: a simulated and a measured sweep of the same flags and seed ask for the
same lengths, token blocks and send times. Sends nothing (kneecap.sweep.http_levels does).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from kneecap.levels import SweepLevel
from kneecap.sweep.options import BenchOptions
from kneecap.workload import RequestSpec
from kneecap.workload.level_work import LevelWork, WorkloadFlags, level_work, requests
from kneecap.workload.traces import TraceSchedule, replay_rate, replay_schedule

__all__ = ["BenchWorkload", "LevelWork", "TraceSchedule", "load_workload", "replay_schedule", "replay_rate"]


@dataclass(frozen=True)
class BenchWorkload:
    """A bench run's workload with its files already read: `level(plan, warmup=...)` gives a level's work
    (kneecap.workload.level_work, the translation simulate uses too).

    dataset: the sampled dataset requests (lengths from the data) in the order request index i takes
    entry i mod len; schedule: the trace's (send offset at speed 1 s, spec) rows in send order."""

    opts: BenchOptions
    dataset: tuple = ()  # kneecap.workload.datasets.DatasetRequest
    schedule: tuple = ()
    too_long_lines: tuple[int, ...] = ()
    rejected: dict = dataclasses.field(default_factory=dict)  # dataset entries dropped, by reason

    @property
    def dataset_texts(self) -> tuple[str, ...]:
        return tuple(r.prompt for r in self.dataset)

    def flags(self) -> WorkloadFlags:
        """BenchOptions' workload flags in the shape both commands translate."""
        opts = self.opts
        from kneecap.workload.ramps import parse_ramp

        return opts.workload_flags(
            dimension=opts.kind,
            dataset=tuple(r.spec for r in self.dataset),
            schedule=self.schedule,
            trace_rate=opts.trace_rate,
            ramp=parse_ramp(opts.ramp) if opts.ramp is not None else None,
        )

    def level(self, plan: SweepLevel, *, warmup: bool, round_index: int = 0) -> LevelWork:
        work = level_work(self.flags(), plan, warmup=warmup, round_index=round_index)
        if self.schedule and warmup:  # a trace's warmup rows go at once
            work = dataclasses.replace(work, offsets=None, start_s=0.0)
        return work

    def requests(self, n: int, start: int, prefix: str) -> tuple[RequestSpec, ...]:
        """n requests from index `start`: the dataset's (cycling) or drawn from the lengths given."""
        return requests(self.flags(), n, start, prefix)

    def workload(self):
        """The lengths given (fixed, or --isl/--osl length specs) as the one Workload shape."""
        return self.opts.workload


def note_skipped_rows(lines: tuple[int, ...], context: str) -> None:
    """The trace rows --skip-too-long left out, on stderr even with --quiet (bench and simulate say it alike): the
    run measures fewer rows than the trace has. `context` names the context the rows exceeded."""
    if lines:
        print(
            f"note: skipped {len(lines)} trace rows longer than {context} "
            f"(lines {', '.join(map(str, lines[:10]))}{' ...' if len(lines) > 10 else ''})",
            file=sys.stderr,
        )


def load_workload(opts: BenchOptions, *, context_tokens: int | None, count_tokens=None) -> BenchWorkload:
    """Read the dataset or the trace once (a broken file, or rows past the server's context, are one line
    here, before any folder is written). count_tokens: the prompt token counter (default 4 characters a
    token, as simulate estimates)."""
    if opts.replay is not None:
        trace_rows = replay_schedule(opts.replay, context_tokens, opts.skip_too_long)
        return BenchWorkload(opts, schedule=trace_rows.schedule, too_long_lines=trace_rows.too_long_lines)
    if opts.dataset != "random":
        from kneecap.workload.datasets import LengthFilter, estimate_tokens, read_dataset, sample_dataset

        n = max([opts.requests_for(v) for v in opts.levels] + [1]) + opts.warmup
        sample = sample_dataset(
            read_dataset(opts.dataset),
            n,
            count_tokens or estimate_tokens,
            seed=opts.seed,
            length_filter=LengthFilter(max_total_tokens=context_tokens) if context_tokens else LengthFilter(),
            output_len=opts.osl,
            default_output_len=None,
        )
        return BenchWorkload(opts, dataset=sample.requests, rejected=sample.rejected)
    return BenchWorkload(opts)
