"""The virtual-clock driver: one sweep level on a fresh simulated engine -> RequestRecords + trace.

Owns the virtual clock and a level's phases (what its warmup and its measured requests send); not when each
request goes (kneecap.workload.load_shape.LoadSchedule, the one schedule the HTTP client runs too), the engine
(engine.py) nor summaries and files (metrics/, results.py, the CLI). Requests come from kneecap.workload
(make_requests), exactly as the HTTP client's.

Closed loop: C requests go at t = 0; each completion sends the next one `turnaround_s` after its end (the
client's turnaround), so it arrives while the engine's next step is already in flight and joins the step
after, as with a real client against a real-time server (`kneecap serve` + `kneecap bench`). With
turnaround_s = 0 the next request would join the very next step (every slot of a wave refilled at once).
Open loop: request i goes at arrival_offsets(rate, n, burstiness, seed)[i]. "max": every request at t = 0.
`--duration S` stops *sending* at S seconds of virtual time (what was sent still finishes).
A request the engine refuses at once (it can never fit) is an answer at that instant: a closed-loop slot sends
again at once, a replayed trace's requests that wait for it go.
A warmup is its own phase before the level's on the same engine, as bench runs it (level_phases).
drive() is the one loop under all of them (and under the disaggregated decode replica of kneecap.recommend):
arrivals known in advance and arrivals that follow an event (a response's end, KV blocks freed) alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

from kneecap.errors import KneecapError
from kneecap.records import RequestRecord
from kneecap.sim.engine import Engine
from kneecap.sim.frontend import EventLoopFrontEnd
from kneecap.sim.setup import SimDeployment
from kneecap.workload import RequestSpec, Workload, make_requests
from kneecap.workload.load_shape import LoadSchedule, open_loop_offsets

REQUEST_CHUNK = 1024  # requests drawn per make_requests call when the count is open-ended (--duration)
MAX_STEPS_PER_CALL = 1 << 20
MAX_REQUESTS_PER_LEVEL = 200_000  # a --duration level stops sending after this many (memory stays bounded)
# A closed-loop client's turnaround, seconds: from a response's last token to the slot's next send. Any value
# shorter than one engine step gives the same schedule (the request waits for the step after the one in
# flight). kneecap bench against kneecap serve, 1024 in / 64 out at C=4/32/64 on a 2-core machine, measured
# at least 0.30-0.35 ms from a response's last chunk to the slot's next send (medians 1-9 ms, grown by the
# machine's load); 100 us is below both and below every engine step, as for a client on an unloaded host.
CLIENT_TURNAROUND_S = 1e-4
# The responses that one step ends reach their clients one after another (the server writes them in turn, the
# client's event loop reads them in turn; vLLM V1's OutputProcessor.process_outputs, vllm/v1/engine/
# output_processor.py, likewise goes through one step's outputs request by request): the k-th finished in a
# step is back k x this later. The same runs measured their last chunks
# 0.22-0.32 ms apart per response. What it changes: a wave that comes back to an idle engine no longer arrives
# in one instant, so the engine starts on its first request alone and the rest join the step after, as served.
# The default of every simulated level (simulate_level, so kneecap simulate, validation and recommend alike).
DELIVERY_SPREAD_S = 2.5e-4


@dataclass(frozen=True)
class LevelSpec:
    """One level of a sweep: exactly one of concurrency / rate / all_at_once; a request count or a duration."""

    concurrency: int | None = None
    rate: float | None = None
    all_at_once: bool = False
    num_requests: int | None = None  # measured requests (warmup ones come on top)
    duration_s: float | None = None  # stop sending this much virtual time after the measured requests' start
    warmup: int = 0  # requests sent first, to their end, on the same engine (kneecap.sim.sweep.level_phases)
    on_s: float | None = None  # open loop in on/off bursts: `rate` inside on_s-second windows...
    off_s: float = 0.0  # ...separated by off_s seconds of silence (kneecap.workload.arrival_offsets)
    # a replayed trace: (send offset in seconds from the measured requests' start, request) in send order; with
    # it, `rate` is the trace's mean rate (for the summary) and the requests and their times are the trace's, not
    # drawn. The first `warmup` rows are the warmup's requests, sent as an open loop at `rate` (their offsets
    # unused), as bench sends a trace's warmup
    schedule: tuple[tuple[float, RequestSpec], ...] = ()
    # requests drawn elsewhere (a dataset's lengths), sent in this order instead of the workload's draws
    specs: tuple[RequestSpec, ...] = ()
    # multi-turn, closed loop: each conversation's turns in order; a slot sends a conversation's next turn
    # think_time_s after the previous answer ends, and a new conversation when one is over
    conversations: tuple[tuple[RequestSpec, ...], ...] = ()
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if self.schedule:
            object.__setattr__(self, "num_requests", self.num_requests or len(self.schedule))
        modes = (self.concurrency is not None) + (self.rate is not None) + bool(self.all_at_once)
        if modes != 1:
            raise KneecapError(
                "a level needs exactly one of a concurrency, a rate or 'max'",
                "pass --concurrency LIST (may include max) or --rate LIST",
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise KneecapError(f"concurrency must be >= 1, got {self.concurrency}", "pass e.g. --concurrency 1,8,64")
        if self.rate is not None and not self.rate > 0:
            raise KneecapError(f"rate must be > 0 requests/s, got {self.rate}", "pass e.g. --rate 2,4,8")
        if self.num_requests is None and self.duration_s is None:
            raise KneecapError("a level needs a request count or a duration", "pass --requests N or --duration S")
        if self.num_requests is not None and self.num_requests < 1:
            raise KneecapError(f"--requests must be >= 1, got {self.num_requests}", "pass e.g. --requests 200")
        if self.duration_s is not None and not self.duration_s > 0:
            raise KneecapError(f"--duration must be > 0 s, got {self.duration_s}", "pass e.g. --duration 60")
        if self.all_at_once and self.num_requests is None:
            raise KneecapError(
                "concurrency 'max' sends a fixed number of requests at once", "pass --requests N with max"
            )
        if self.warmup < 0:
            raise KneecapError(f"--warmup must be >= 0, got {self.warmup}", "pass e.g. --warmup 8")


@dataclass
class LevelResult:
    records: list[RequestRecord]
    server_metrics: dict
    trace: list[dict] = field(default_factory=list)
    end_s: float = 0.0  # virtual time when the level's last request ended


def drive(
    engine: Engine, due: Callable[[float], float], ended: Callable[[float, list[RequestRecord]], None], t: float = 0.0
) -> bool:
    """The one loop that drives a simulated engine on the virtual clock, from `t`. due(t) sends whatever is due
    by t and returns when the next known arrival is (math.inf: none known yet); ended(t, finished) hears of every
    step (or run of identical decode steps) ending at t with the requests it finished (possibly none), and may
    make new arrivals known (a closed loop's next request; a request waiting for KV blocks that the step freed).
    Runs until no work is left and nothing more is due (True) or the engine stalls with work queued (False)."""
    while True:
        until = due(t)
        if not engine.has_work:
            if until < math.inf:
                t = max(t, until)
                continue
            return True
        out = engine.step(t, until=until, max_steps=MAX_STEPS_PER_CALL)
        if out is None:
            return False
        t = out.ended_at
        ended(t, out.finished)


def _requests(workload: Workload, seed: int, total: int | None, id_prefix: str) -> Iterator[RequestSpec]:
    if total is not None:
        yield from make_requests(workload, total, seed, id_prefix=id_prefix)
        return
    start = 0
    while True:
        yield from make_requests(workload, REQUEST_CHUNK, seed, start_index=start, id_prefix=id_prefix)
        start += REQUEST_CHUNK


@dataclass
class Phase:
    """What one phase of a level sends: its warmup or its measured requests. total: requests it sends (a
    conversation's turns each count; None: until its horizon); concurrency: a closed loop's slots (None: open
    loop at `offsets`, send times in seconds from the phase's start); horizon_s: it stops sending this long after
    its start."""

    warmup: bool
    source: Iterator[RequestSpec]  # in send order (a multi-turn phase: its conversations' first turns)
    total: int | None
    concurrency: int | None = None
    offsets: list[float] = field(default_factory=list)
    horizon_s: float = math.inf


def level_phases(level: LevelSpec, workload: Workload, *, seed: int, index: int, burstiness: float) -> list[Phase]:
    """A level's phases in order: its warmup, if any, then its measured requests, as bench sends them
    (kneecap.sweep.http_levels): the warmup closed loop at min(C, warmup) slots, an open loop's (a rate's, a
    trace's, a ramp's) at the level's rate with the level's arrival seed, all at once for 'max'; the measured
    requests then as without a warmup, from the time the warmup's last response is back."""
    warm = level.warmup
    if level.schedule:
        specs = [spec for _, spec in level.schedule]
        sources = [iter(specs[:warm]), iter(specs[warm:])]
        totals = [min(warm, len(specs)), max(len(specs) - warm, 0)]
    elif level.conversations:
        # the warmup's conversations are the first ones whose turns add up to the warmup's requests
        split, turns = 0, 0
        while split < len(level.conversations) and turns < warm:
            turns += len(level.conversations[split])
            split += 1
        parts = (level.conversations[:split], level.conversations[split:])
        sources = [iter([c[0] for c in part]) for part in parts]
        totals = [sum(len(c) for c in part) for part in parts]
    else:
        total = None if level.num_requests is None else level.num_requests + warm
        if level.specs:
            total = len(level.specs) if total is None else min(total, len(level.specs))
            source = iter(level.specs)
        else:
            source = _requests(workload, seed, total, id_prefix=f"L{index}-r")
        sources = [source, source]  # the warmup sends the first `warm` of them, the measured requests the rest
        totals = [warm if total is None else min(warm, total), None if total is None else max(total - warm, 0)]
    bursts = dict(on_s=level.on_s, off_s=level.off_s)
    phases = []
    if warm:
        n = totals[0]
        if level.rate is not None:
            phases.append(
                Phase(
                    warmup=True,
                    source=sources[0],
                    total=n,
                    offsets=open_loop_offsets(level.rate, n, burstiness, seed, **bursts),
                )
            )
        else:
            phases.append(Phase(warmup=True, source=sources[0], total=n, concurrency=min(level.concurrency or n, n)))
    n = totals[1]
    measured = Phase(
        warmup=False,
        source=sources[1],
        total=n,
        horizon_s=level.duration_s if level.duration_s is not None else math.inf,
    )
    if level.schedule:
        rows = level.schedule[warm:]
        measured.offsets = [at for at, _ in rows]
    elif level.rate is not None:
        measured.offsets = open_loop_offsets(
            level.rate, n, burstiness, seed, **bursts, horizon_s=level.duration_s, max_requests=MAX_REQUESTS_PER_LEVEL
        )
    else:
        measured.concurrency = level.concurrency if level.concurrency is not None else n
    phases.append(measured)
    return phases


def simulate_level(
    sim: SimDeployment,
    workload: Workload,
    level: LevelSpec,
    *,
    index: int = 0,
    seed: int = 0,
    burstiness: float = 1.0,
    trace: bool = False,
    fast_path: bool = True,
    turnaround_s: float = CLIENT_TURNAROUND_S,
    delivery_spread_s: float = DELIVERY_SPREAD_S,
    token_times: bool = False,
) -> LevelResult:
    """Run one level on a fresh engine of the simulated deployment (sim.new_engine); records in completion order.
    A warmup runs first on the same engine, to its end (level_phases), leaving its prefix cache.
    turnaround_s / delivery_spread_s (seconds >= 0, as SimulateOptions checks them): a closed loop's next request
    is sent rank x delivery_spread_s + turnaround_s after a response's end, rank its place among the requests its
    step finished; the measured requests go turnaround_s after the warmup's last response is back.
    token_times: records list every token's time in chunk_times (else they reference the level's step
    timeline: the same times, summarised exactly, without one float per token)."""
    engine = sim.new_engine(level=index, trace=trace, fast_path=fast_path, token_times=token_times)
    # the API server's event loop in front of the engine (kneecap.sim.frontend), where the engine's config prices it
    cost_s, per_token_s = sim.config.frontend_s_per_request, sim.config.frontend_s_per_prompt_token
    front = EventLoopFrontEnd(cost_s, per_token_s) if cost_s > 0 or per_token_s > 0 else None
    phases = level_phases(level, workload, seed=seed, index=index, burstiness=burstiness)
    concurrency = phases[-1].concurrency if level.rate is None else None  # 'max': the measured requests
    records: list[RequestRecord] = []
    follow = {conv[k].request_id: conv[k + 1] for conv in level.conversations for k in range(len(conv) - 1)}
    answers: dict[str, float] = {}  # when the client had each answer back (a trace's requests wait for these)
    t, sent = 0.0, 0
    for phase in phases:
        if not phase.warmup and len(phases) > 1:
            engine.start_measuring()  # the level's server metrics are its measured requests', as bench's
        cap = MAX_REQUESTS_PER_LEVEL - sent  # --duration at a high rate: never grow without bound
        schedule = LoadSchedule(
            phase.source,
            total=cap if phase.total is None else min(phase.total, cap),
            slots=phase.concurrency,
            offsets=phase.offsets,
            horizon_s=phase.horizon_s,
            follow=follow,
            think_time_s=level.think_time_s,
            turnaround_s=turnaround_s,
            start_s=t,
            answers=answers,
        )
        meta = {"level": index, "concurrency": concurrency, "rate": level.rate, "warmup": phase.warmup}
        if not drive(engine, *_on_engine(engine, schedule, records, meta, delivery_spread_s, front), t):
            raise KneecapError(
                "the simulated engine stopped making progress with requests still queued",
                "this is a simulator bug; please report the command line",
            )
        sent += schedule.sent
        t = schedule.last_answer_s + turnaround_s  # the next phase starts one turnaround after its last answer
    end_s = max((r.end_at for r in records if r.end_at is not None), default=0.0)
    return LevelResult(records=records, server_metrics=engine.server_metrics(), trace=engine.trace(), end_s=end_s)


def _on_engine(
    engine: Engine,
    schedule: LoadSchedule,
    records: list[RequestRecord],
    meta: dict,
    spread_s: float,
    front: EventLoopFrontEnd | None = None,
):
    """drive()'s due and ended for one phase: send what the schedule has due, and hand it every answer (the k-th
    of a step's reaches its client k x spread_s later; one the engine refuses at once is an answer then). front: the
    API server's event loop, which hands the engine each request when its round ends (kneecap.sim.frontend); the
    request keeps its send time (TTFT counts from it)."""

    def submit(at: float, spec: RequestSpec, now: float) -> None:
        rejected = engine.add_request(spec, at, meta=dict(meta), scheduled_at=at)
        if rejected is not None:  # it can never fit
            records.append(rejected)
            schedule.answered(spec.request_id, False, now, refused=True)

    def due(now: float) -> float:
        while (got := schedule.pop_next(now)) is not None:
            if front is None:
                submit(got[0], got[1], got[0])
            else:
                front.arrive(got[0], got, got[1].input_tokens)
        if front is None:
            return schedule.next_due_s()
        for released_at, (at, spec) in front.release(now):
            submit(at, spec, released_at)
        return min(schedule.next_due_s(), front.next_s())

    def ended(now: float, finished: list[RequestRecord]) -> None:
        for rank, rec in enumerate(finished):
            records.append(rec)
            schedule.answered(rec.request_id, rec.ok, now + rank * spread_s)

    return due, ended
