"""What one sweep level sends, for `kneecap bench` and `kneecap simulate` alike: the one translation of the
workload flags both commands take into a level's `LevelWork`.

Owns: the workload flags once resolved (`WorkloadFlags`: lengths or length distributions, shared prefixes,
the seed, a dataset's requests, a replayed trace's rows and mean rate, a ramp and the dimension it moves on,
turns and think time) and `level_work(flags, level, warmup=..., round_index=...)`: a level's (or its
warmup's) RequestSpecs in send order, with explicit send times (a trace's, a rate ramp's), a users-over-time
schedule (a concurrency ramp) or the level's conversations. Request indices and ids come from the level
(`SweepLevel.first_index`), so a sweep never repeats one; lengths are drawn with the run's seed at those
indices, arrivals with seed + level index. Pure: files are read by the commands, nothing is sent here (the
live client and the simulated engine each send a LevelWork their own way).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kneecap.levels import SweepLevel
from kneecap.workload import LengthDist, RequestClass, RequestSpec, Workload, make_requests

LEVEL_HASH_STRIDE = 4096  # a trace's hash id h at level i becomes h x this + i (levels never share blocks)
KIND_CONCURRENCY = "concurrency"  # the two kinds of sweep level: closed-loop streams, or arrivals per second
KIND_RATE = "rate"


@dataclass(frozen=True)
class LevelWork:
    """One level's (or one warmup's) requests. offsets: send times in seconds from the work's start (open
    loop on a trace's or a ramp's clock); start_s: where that start lies on the whole trace's clock at this
    level's speed (a trace's measured rows come after its warmup rows); users: [(t_s, streams)] change points
    of a concurrency ramp; conversations: --turns (the specs are then every turn as planned, for counting)."""

    specs: tuple[RequestSpec, ...]
    offsets: tuple[float, ...] | None = None
    users: tuple[tuple[float, int], ...] | None = None
    conversations: tuple = ()
    think_time_s: float = 0.0
    duration_s: float | None = None  # a ramp's length: no request starts after it
    start_s: float = 0.0


@dataclass(frozen=True)
class WorkloadFlags:
    """The workload flags of bench and simulate, resolved. dataset: requests with the data's lengths, request
    index i taking entry i mod len; schedule: a trace's (send offset at speed 1 in s, spec) rows in send order,
    trace_rate its mean rate at speed 1 (a level's value is then a rate: speed = value / trace_rate); ramp: a
    kneecap.workload.ramps.Ramp moving on `dimension`."""

    input: LengthDist = dataclasses.field(default_factory=lambda: LengthDist.fixed(1000))
    output: LengthDist = dataclasses.field(default_factory=lambda: LengthDist.fixed(1000))
    shared_prefix_tokens: int = 0
    num_prefix_groups: int = 1
    seed: int = 0
    dimension: str = KIND_CONCURRENCY
    dataset: tuple[RequestSpec, ...] = ()
    schedule: tuple[tuple[float, RequestSpec], ...] = ()
    trace_rate: float | None = None
    ramp: object | None = None
    turns: int = 0
    think_time_s: float = 0.0

    def workload(self) -> Workload:
        """The lengths given as the one Workload shape."""
        return Workload(
            classes=(
                RequestClass(
                    name="default",
                    input=self.input,
                    output=self.output,
                    shared_prefix_tokens=self.shared_prefix_tokens,
                    num_prefix_groups=self.num_prefix_groups,
                ),
            )
        )


def level_ids(level: SweepLevel, *, warmup: bool, round_index: int = 0) -> tuple[int, int, str]:
    """(requests, first request index, request-id prefix) of a level's warmup or of one of its rounds."""
    if warmup:
        return level.num_warmup, level.first_index, f"L{level.index}w"
    start = level.first_index + level.num_warmup + round_index * (level.num_requests or 0)
    return level.num_requests or 0, start, f"L{level.index}r" if round_index == 0 else f"L{level.index}r{round_index}-"


def requests(
    flags: WorkloadFlags, n: int, start: int, prefix: str, workload: Workload | None = None
) -> tuple[RequestSpec, ...]:
    """n requests from index `start`: the dataset's (cycling) or drawn with the run's seed from the lengths given
    (or from `workload`: a load plan's class, a mix of classes)."""
    if flags.dataset:
        return tuple(
            dataclasses.replace(flags.dataset[i % len(flags.dataset)], index=i, request_id=f"{prefix}{i}")
            for i in range(start, start + n)
        )
    return tuple(make_requests(workload or flags.workload(), n, seed=flags.seed, start_index=start, id_prefix=prefix))


def level_work(
    flags: WorkloadFlags, level: SweepLevel, *, warmup: bool, round_index: int = 0, workload: Workload | None = None
) -> LevelWork:
    """What a level's warmup (warmup=True) or one of its rounds sends."""
    n, start, prefix = level_ids(level, warmup=warmup, round_index=round_index)
    if flags.schedule:  # the whole trace at this level's speed; warmup: its first rows
        return _replay(flags, level, warmup, start, prefix)
    if flags.ramp is not None and not warmup:
        return _ramp(flags, level, start, prefix)
    if flags.turns:
        return _conversations(
            flags, n, start, prefix, seed=flags.seed + level.index, count_flag="--warmup" if warmup else "--requests"
        )
    return LevelWork(specs=requests(flags, n, start, prefix, workload))


def _replay_ids(flags: WorkloadFlags, level: SweepLevel) -> dict[str, str]:
    """{a trace row's request id: its id in this level} over the whole trace (its warmup rows, then the rest)."""
    _, w_start, w_prefix = level_ids(level, warmup=True)
    _, m_start, m_prefix = level_ids(level, warmup=False)
    nw = level.num_warmup
    return {
        s.request_id: (f"{w_prefix}{w_start + k}" if k < nw else f"{m_prefix}{m_start + k - nw}")
        for k, (_, s) in enumerate(flags.schedule)
    }


def _replay(flags: WorkloadFlags, level: SweepLevel, warmup: bool, start: int, prefix: str) -> LevelWork:
    speed = float(level.value) / flags.trace_rate
    rows = flags.schedule[: level.num_warmup] if warmup else flags.schedule[level.num_warmup :]
    t0 = rows[0][0] if rows else 0.0
    # equal hash ids are equal token blocks within a level; each level's blocks are its own, so a faster replay
    # does not find the previous level's whole trace in a server's prefix cache
    ids = _replay_ids(flags, level)  # a session's child names its parent by the parent's id in this level
    specs = tuple(
        dataclasses.replace(
            s,
            index=start + k,
            request_id=f"{prefix}{start + k}",
            block_hashes=tuple(h * LEVEL_HASH_STRIDE + level.index for h in s.block_hashes),
            after_ids=tuple(ids[a] for a in s.after_ids if a in ids),  # one outside this level counts as answered
            think_s=s.think_s / speed,
        )
        for k, (_, s) in enumerate(rows)
    )
    return LevelWork(
        specs=specs,
        offsets=tuple((at - t0) / speed for at, _ in rows),
        start_s=(t0 - flags.schedule[0][0]) / speed if rows else 0.0,
    )


def _ramp(flags: WorkloadFlags, level: SweepLevel, start: int, prefix: str) -> LevelWork:
    from kneecap.workload.ramps import concurrency_schedule, ramp_arrival_times

    ramp = flags.ramp
    if flags.dimension == KIND_CONCURRENCY:
        return LevelWork(
            specs=requests(flags, level.num_requests or 0, start, prefix),
            users=tuple(concurrency_schedule(ramp)),
            duration_s=ramp.duration_s,
        )
    times = ramp_arrival_times(ramp, seed=flags.seed)
    return LevelWork(specs=requests(flags, len(times), start, prefix), offsets=tuple(times), duration_s=ramp.duration_s)


def _conversations(
    flags: WorkloadFlags, n: int, start: int, prefix: str, seed: int, count_flag: str = "--requests"
) -> LevelWork:
    """C users' K-turn conversations (workload.multiturn): n turns, n / K conversations, their new-input and
    output lengths drawn from the lengths given; the prompts grow with the answers."""
    from kneecap.workload.multiturn import expected_turns, plan_conversations

    if n == 0:
        return LevelWork(specs=())
    plan = plan_conversations(
        n, flags.turns, flags.input, flags.output, seed=seed, think_time_s=flags.think_time_s, count_flag=count_flag
    )
    convs = tuple(dataclasses.replace(c, conversation_id=f"{prefix}c{c.index}") for c in plan.conversations)
    # every turn as planned, in conversation order: a driver sends turn (conversation, k) as this spec's index and
    # request id, with the prompt the conversation has grown to by then
    specs = tuple(
        dataclasses.replace(t.spec, index=start + k, request_id=f"{prefix}{start + k}")
        for k, t in enumerate(t for conv in convs for t in expected_turns(plan, conv))
    )
    return LevelWork(specs=specs, conversations=convs, think_time_s=flags.think_time_s)


def lengths(spec: str | None, value: int | None) -> LengthDist:
    """--isl / --osl as a LengthDist: the length spec if given (kneecap.workload.lengthspec), else fixed."""
    if spec is not None:
        from kneecap.workload.lengthspec import parse_length_spec

        return parse_length_spec(spec)
    return LengthDist.fixed(value if value is not None else 1)
