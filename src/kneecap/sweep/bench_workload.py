"""What each bench level sends: its requests, and when, drawn from the one workload code (kneecap.workload).

Owns the translation of BenchOptions' workload (fixed lengths or length distributions, a dataset with
its own lengths, a replayed trace, a ramp, multi-turn conversations) into one level's `LevelWork`:
the RequestSpecs in send order, and either the arrival process of the level's rate, explicit send
times (a trace's, a rate ramp's), a users-over-time schedule (a concurrency ramp) or the level's
conversations. The same functions the simulator uses (make_requests, sample_dataset, plan_replay,
ramp_arrival_times, concurrency_schedule, plan_conversations) make them, so a simulated and a
measured sweep of the same flags and seed ask for the same lengths. Files are read once, here.
Sends nothing (kneecap.sweep.http_levels does).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kneecap.levels import SweepLevel
from kneecap.sweep.options import KIND_CONCURRENCY, BenchOptions
from kneecap.workload import RequestSpec

LEVEL_HASH_STRIDE = 4096  # a trace's hash id h at level i becomes h x this + i (levels never share blocks)
RAMP_SLICES = 10  # a ramp's metrics in this many equal time slices (as simulate writes them)


@dataclass(frozen=True)
class LevelWork:
    """One level's (or one warmup's) requests. offsets: send times in seconds from the level's start (open
    loop on a trace's or a ramp's clock); users: [(t_s, streams)] change points of a concurrency ramp;
    conversations: --turns (the specs are then every turn as planned, for counting)."""

    specs: tuple[RequestSpec, ...]
    offsets: tuple[float, ...] | None = None
    users: tuple[tuple[float, int], ...] | None = None
    conversations: tuple = ()
    think_time_s: float = 0.0
    duration_s: float | None = None  # a ramp's length: no request starts after it


@dataclass(frozen=True)
class BenchWorkload:
    """A bench run's workload with its files already read: `level(plan, warmup=...)` gives a level's work.

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

    def level(self, plan: SweepLevel, *, warmup: bool, round_index: int = 0) -> LevelWork:
        opts = self.opts
        if warmup:
            n, start, prefix = plan.num_warmup, plan.first_index, f"L{plan.index}w"
        else:
            n = plan.num_requests
            start = plan.first_index + plan.num_warmup + round_index * plan.num_requests
            prefix = f"L{plan.index}r" if round_index == 0 else f"L{plan.index}r{round_index}-"
        seed = opts.seed + plan.index
        if self.schedule:  # the whole trace at this level's speed; warmup: its first rows, sent at once
            speed = plan.value / opts.trace_rate
            rows = self.schedule[:plan.num_warmup] if warmup else self.schedule[plan.num_warmup:]
            t0 = rows[0][0] if rows else 0.0
            # equal hash ids are equal token blocks within a level; each level's blocks are its own, so a faster
            # replay does not find the previous level's whole trace in the server's prefix cache
            specs = tuple(dataclasses.replace(s, index=start + k, request_id=f"{prefix}{start + k}",
                                              block_hashes=tuple(h * LEVEL_HASH_STRIDE + plan.index
                                                                 for h in s.block_hashes))
                          for k, (_, s) in enumerate(rows))
            return LevelWork(specs=specs, offsets=None if warmup else tuple((at - t0) / speed for at, _ in rows))
        if opts.ramp is not None and not warmup:
            return self._ramp(plan, start, prefix, seed)
        if opts.turns:
            return self._conversations(n, start, prefix, seed)
        return LevelWork(specs=self.requests(n, start, prefix))

    def requests(self, n: int, start: int, prefix: str) -> tuple[RequestSpec, ...]:
        """n requests from index `start`: the dataset's (cycling) or drawn from the lengths given."""
        if self.dataset:
            return tuple(dataclasses.replace(self.dataset[i % len(self.dataset)].spec, index=i, request_id=f"{prefix}{i}")
                         for i in range(start, start + n))
        from kneecap.workload import make_requests

        return tuple(make_requests(self.workload(), n, seed=self.opts.seed, start_index=start, id_prefix=prefix))

    def workload(self):
        """The lengths given (fixed, or --isl/--osl length specs) as the one Workload shape."""
        from kneecap.workload import RequestClass, Workload

        opts = self.opts
        return Workload(classes=(RequestClass(name="default", input=self.input_lengths(), output=self.output_lengths(),
                                              shared_prefix_tokens=opts.shared_prefix_tokens,
                                              num_prefix_groups=opts.num_prefix_groups),))

    def input_lengths(self):
        return _lengths(self.opts.isl_dist, self.opts.isl if self.opts.isl is not None else 1)

    def output_lengths(self):
        return _lengths(self.opts.osl_dist, self.opts.osl)

    def _ramp(self, plan: SweepLevel, start: int, prefix: str, seed: int) -> LevelWork:
        from kneecap.workload.ramps import concurrency_schedule, parse_ramp, ramp_arrival_times

        ramp = parse_ramp(self.opts.ramp)
        if self.opts.kind == KIND_CONCURRENCY:
            return LevelWork(specs=self.requests(plan.num_requests, start, prefix),
                             users=tuple(concurrency_schedule(ramp)), duration_s=ramp.duration_s)
        times = ramp_arrival_times(ramp, seed=self.opts.seed)
        return LevelWork(specs=self.requests(len(times), start, prefix), offsets=tuple(times), duration_s=ramp.duration_s)

    def _conversations(self, n: int, start: int, prefix: str, seed: int) -> LevelWork:
        """C users' K-turn conversations (workload.multiturn): n turns, n / K conversations, their new-input
        and output lengths drawn from the lengths given; the prompts grow with the server's own answers."""
        from kneecap.workload.multiturn import expected_turns, plan_conversations

        if n == 0:
            return LevelWork(specs=())
        opts = self.opts
        plan = plan_conversations(n, opts.turns, self.input_lengths(), self.output_lengths(), seed=seed,
                                  think_time_s=opts.think_time_s)
        convs = tuple(dataclasses.replace(c, conversation_id=f"{prefix}c{c.index}") for c in plan.conversations)
        # every turn as planned, in conversation order: the driver sends turn (conversation, k) as this spec's
        # index and request id, with the prompt the conversation has grown to by then
        specs = tuple(dataclasses.replace(t.spec, index=start + k, request_id=f"{prefix}{start + k}")
                      for k, t in enumerate(t for conv in convs for t in expected_turns(plan, conv)))
        return LevelWork(specs=specs, conversations=convs, think_time_s=opts.think_time_s)


def _lengths(spec: str | None, value: int | None):
    from kneecap.workload import LengthDist

    if spec is not None:
        from kneecap.workload.lengthspec import parse_length_spec

        return parse_length_spec(spec)
    return LengthDist.fixed(value if value is not None else 1)


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
        sample = sample_dataset(read_dataset(opts.dataset), n, count_tokens or estimate_tokens, seed=opts.seed,
                                length_filter=LengthFilter(max_total_tokens=context_tokens) if context_tokens else
                                LengthFilter(), output_len=opts.osl, default_output_len=None)
        return BenchWorkload(opts, dataset=sample.requests, rejected=sample.rejected)
    return BenchWorkload(opts)


@dataclass(frozen=True)
class TraceSchedule:
    schedule: tuple  # (send offset at speed 1 s, RequestSpec)
    rate: float  # mean request rate at speed 1 (requests/s)
    too_long_lines: tuple[int, ...] = ()


def replay_schedule(path: str, context_tokens: int | None, skip_too_long: bool) -> TraceSchedule:
    """A trace's requests at speed 1 (kneecap.workload.traces.plan_replay) and its mean rate."""
    from kneecap.workload.traces import plan_replay, read_trace

    replay = plan_replay(read_trace(path), max_context_tokens=context_tokens, skip_too_long=skip_too_long)
    schedule = tuple((r.send_at_s, r.spec) for r in replay.requests)
    return TraceSchedule(schedule=schedule, rate=replay_rate(schedule), too_long_lines=replay.too_long_lines)


def replay_rate(schedule) -> float:
    """A trace's mean request rate at speed 1 (requests/s): (rows - 1) over its span, as simulate counts it."""
    n = len(schedule)
    span = schedule[-1][0] - schedule[0][0] if n else 0.0
    return (n - 1) / span if n > 1 and span > 0 else float(max(n, 1))
