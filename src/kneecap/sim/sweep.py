"""The virtual-clock driver: one sweep level on a fresh simulated engine -> RequestRecords + trace.

Owns arrival patterns in virtual time (closed loop at concurrency C, open loop at a rate, all at
once) and the clock; not the engine (engine.py) nor summaries and files (metrics/, results.py, the CLI).
Requests come from kneecap.workload (make_requests / arrival_offsets), exactly as the HTTP client's.

Closed loop: C requests go at t = 0; each completion sends the next one `turnaround_s` after its end (the
client's turnaround), so it arrives while the engine's next step is already in flight and joins the step
after, as with a real client against a real-time server (`kneecap serve` + `kneecap bench`). With
turnaround_s = 0 the next request would join the very next step (every slot of a wave refilled at once).
Open loop: request i goes at arrival_offsets(rate, n, burstiness, seed)[i]. "max": every request at t = 0.
`--duration S` stops *sending* at S seconds of virtual time (what was sent still finishes).
drive() is the one loop under all of them (and under the disaggregated decode replica of kneecap.recommend):
arrivals known in advance and arrivals that follow an event (a response's end, KV blocks freed) alike.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

from kneecap.errors import KneecapError
from kneecap.records import RequestRecord
from kneecap.sim.engine import Engine
from kneecap.sim.setup import SimDeployment
from kneecap.workload import RequestSpec, Workload, arrival_offsets, make_requests

REQUEST_CHUNK = 1024  # requests drawn per make_requests call when the count is open-ended (--duration)
MAX_STEPS_PER_CALL = 1 << 20
MAX_REJECTS_IN_A_ROW = 1000  # a closed loop whose every request exceeds the KV pool stops sending
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
    duration_s: float | None = None  # stop sending after this much virtual time
    warmup: int = 0
    on_s: float | None = None  # open loop in on/off bursts: `rate` inside on_s-second windows...
    off_s: float = 0.0  # ...separated by off_s seconds of silence (kneecap.workload.arrival_offsets)
    # a replayed trace: (send offset in seconds, request) in send order; with it, `rate` is the trace's mean rate
    # (for the summary) and the requests and their times are the trace's, not drawn
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
            raise KneecapError("a level needs exactly one of a concurrency, a rate or 'max'",
                               "pass --concurrency LIST (may include max) or --rate LIST")
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
            raise KneecapError("concurrency 'max' sends a fixed number of requests at once", "pass --requests N with max")
        if self.warmup < 0:
            raise KneecapError(f"--warmup must be >= 0, got {self.warmup}", "pass e.g. --warmup 8")

    @property
    def label(self) -> str:
        if self.all_at_once:
            return "max"
        return f"C={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}/s"


@dataclass
class LevelResult:
    records: list[RequestRecord]
    server_metrics: dict
    trace: list[dict] = field(default_factory=list)
    end_s: float = 0.0  # virtual time when the level's last request ended


def drive(engine: Engine, due: Callable[[float], float], ended: Callable[[float, list[RequestRecord]], None],
          t: float = 0.0) -> bool:
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


def simulate_level(sim: SimDeployment, workload: Workload, level: LevelSpec, *, index: int = 0, seed: int = 0,
                   burstiness: float = 1.0, trace: bool = False, fast_path: bool = True,
                   turnaround_s: float = CLIENT_TURNAROUND_S, delivery_spread_s: float = DELIVERY_SPREAD_S,
                   token_times: bool = False) -> LevelResult:
    """Run one level on a fresh engine of the simulated deployment (sim.new_engine); records in completion order.
    turnaround_s / delivery_spread_s: a closed loop's next request is sent rank x delivery_spread_s +
    turnaround_s after a response's end, rank its place among the requests its step finished.
    token_times: records list every token's time in chunk_times (else they reference the level's step
    timeline: the same times, summarised exactly, without one float per token)."""
    engine = sim.new_engine(level=index, trace=trace, fast_path=fast_path, token_times=token_times)
    total = None if level.num_requests is None else level.num_requests + level.warmup
    if level.schedule:
        total = len(level.schedule)
        source = iter([spec for _, spec in level.schedule])
    elif level.specs:
        total = len(level.specs) if total is None else min(total, len(level.specs))
        source = iter(level.specs)
    elif level.conversations:
        total = sum(len(c) for c in level.conversations)
        source = iter([c[0] for c in level.conversations])  # first turns; later ones follow their answers
    else:
        source = _requests(workload, seed, total, id_prefix=f"L{index}-r")
    concurrency = level.concurrency if level.concurrency is not None else (total if level.all_at_once else None)
    meta_base = {"level": index, "concurrency": concurrency, "rate": level.rate}
    records: list[RequestRecord] = []
    sent = 0
    horizon = level.duration_s if level.duration_s is not None else math.inf

    follow = {conv[k].request_id: conv[k + 1] for conv in level.conversations for k in range(len(conv) - 1)}

    def send(at: float, spec: RequestSpec | None = None) -> bool | None:
        """Send `spec` (default: the next from the source) at `at`: True if queued, False if rejected at once,
        None if none is left."""
        nonlocal sent
        if total is not None and sent >= total:
            return None
        if sent >= MAX_REQUESTS_PER_LEVEL:  # --duration at a high rate: stop sending, never grow without bound
            return None
        if spec is None:
            spec = next(source, None)
            if spec is None:
                return None
        meta = dict(meta_base, warmup=sent < level.warmup)
        sent += 1
        rejected = engine.add_request(spec, at, meta=meta, scheduled_at=at)
        if rejected is not None:
            records.append(rejected)
            return False
        return True

    def fill_slot(at: float, spec: RequestSpec | None = None) -> bool:
        """Closed loop: send until one request is queued (a rejected one frees its slot at once; a rejected
        turn ends its conversation)."""
        for attempt in range(MAX_REJECTS_IN_A_ROW):
            got = send(at, spec if attempt == 0 else None)
            if got is None:
                return False
            if got:
                return True
        return False

    for name, value in (("client turnaround", turnaround_s), ("delivery spread", delivery_spread_s)):
        if not (value >= 0 and math.isfinite(value)):
            raise KneecapError(f"{name} must be >= 0 s, got {value!r}", "pass e.g. 1e-4")
    arrivals: list[float] = []
    next_arrival = 0
    # closed loop: (when, order, what) a finished slot sends next, earliest first (None: the source's next); a
    # heap, since a conversation's next turn (after a think time) may fall after a new conversation's first
    pending: list[tuple[float, int, RequestSpec | None]] = []
    if level.schedule:
        arrivals = [at for at, _ in level.schedule]
    elif level.rate is not None:
        if total is not None:
            arrivals = arrival_offsets(level.rate, total, burstiness, seed, on_s=level.on_s, off_s=level.off_s)
        else:
            n_est = min(int(math.ceil(level.rate * level.duration_s * 1.5)) + 16, MAX_REQUESTS_PER_LEVEL)
            arrivals = [a for a in arrival_offsets(level.rate, n_est, burstiness, seed, on_s=level.on_s, off_s=level.off_s)
                        if a < level.duration_s]
    else:
        for _ in range(concurrency or 0):
            if not fill_slot(0.0):
                break

    def due(now: float) -> float:
        nonlocal next_arrival
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            send(arrivals[next_arrival])
            next_arrival += 1
        while pending and pending[0][0] <= now:
            at, _, spec = heapq.heappop(pending)
            fill_slot(at, spec)
        until = arrivals[next_arrival] if next_arrival < len(arrivals) else math.inf
        return pending[0][0] if pending and pending[0][0] < until else until

    def ended(now: float, finished: list[RequestRecord]) -> None:
        for rank, rec in enumerate(finished):
            records.append(rec)
            if level.rate is None and now < horizon:
                nxt = follow.get(rec.request_id) if rec.ok else None
                back = now + rank * delivery_spread_s + turnaround_s
                if nxt is not None:  # the conversation's next turn, after the user's think time
                    heapq.heappush(pending, (back + level.think_time_s, len(records), nxt))
                else:  # closed loop: the slot sends its next request after the turnaround
                    heapq.heappush(pending, (back, len(records), None))

    if not drive(engine, due, ended):
        raise KneecapError("the simulated engine stopped making progress with requests still queued",
                           "this is a simulator bug; please report the command line")
    end_s = max((r.end_at for r in records if r.end_at is not None), default=0.0)
    return LevelResult(records=records, server_metrics=engine.server_metrics(), trace=engine.trace(), end_s=end_s)
