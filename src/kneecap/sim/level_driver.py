"""The simulated engine in virtual time as a level driver for the one level runner
(kneecap.sweep.runner): each level on a fresh engine of exactly the plan's KV blocks, its server
metrics in the one server_metrics shape, optionally one trace row per engine step.

Also SimulateOptions: the simulate command's sweep (levels, request budgets, workload) as one
validated value. Owns neither the order of levels nor files other than the trace it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kneecap.errors import KneecapError
from kneecap.levels import SweepLevel, LevelRun, server_metrics
from kneecap.records import RequestRecord
from kneecap.sim.setup import SimDeployment
from kneecap.sim.sweep import MAX_REQUESTS_PER_LEVEL, LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload

KIND_CONCURRENCY = "concurrency"
KIND_RATE = "rate"
ALL_AT_ONCE = "max"
DEFAULT_MAX_REQUESTS = 1000  # requests of a "max" (all at once) level when --requests is not given
DEFAULT_RATE_REQUESTS = 200
MIN_CLOSED_LOOP_REQUESTS = 100
REQUESTS_PER_STREAM = 4
# --duration is virtual seconds up to one virtual day (and a level at most MAX_REQUESTS_PER_LEVEL requests).
MAX_DURATION_S = 86_400.0


@dataclass(frozen=True)
class SimulateOptions:
    """One simulated sweep. Lengths in tokens, times in virtual seconds, rates in requests/s."""

    kind: str  # "concurrency" | "rate"
    levels: tuple  # concurrencies (ints, or "max") or rates
    isl: int = 1000
    osl: int = 1000
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    seed: int = 0
    burstiness: float = 1.0
    shared_prefix_tokens: int = 0
    num_prefix_groups: int = 1
    force: bool = True  # the simulator runs every level: preemption past the pool is what it shows
    # --replay: the trace's requests at speed 1, (send offset s, request) in send order; levels are then the
    # replay's mean request rates (speed x the trace's own rate), each level the whole trace
    schedule: tuple = ()
    dataset: tuple = ()  # --dataset: the requests, lengths from the data, in the order every level sends them
    ramp: object | None = None  # --ramp on the rate dimension (kneecap.workload.ramps.Ramp): one level, the ramp
    turns: int = 0  # --turns K: C users each hold K-turn conversations (requests count turns); --isl is each new input
    think_time_s: float = 0.0  # --think-time-s: the pause between an answer and the user's next turn

    def __post_init__(self) -> None:
        for flag, value in (("--isl", self.isl), ("--osl", self.osl)):
            if value < 1:
                raise KneecapError(f"{flag} must be >= 1, got {value}", f"pass e.g. {flag} 1000")
        if self.requests is not None and self.requests < 1:
            raise KneecapError(f"--requests must be >= 1, got {self.requests}", "pass e.g. --requests 200")
        if self.requests is not None and self.requests > MAX_REQUESTS_PER_LEVEL:
            raise KneecapError(f"--requests {self.requests:,} exceeds the simulator's {MAX_REQUESTS_PER_LEVEL:,} "
                               "requests per level",
                               "simulate fewer requests per level (a level's statistics settle long before that)")
        if self.duration_s is not None and not (0 < self.duration_s <= MAX_DURATION_S):
            raise KneecapError(f"--duration must be between 0 and {MAX_DURATION_S:,.0f} virtual seconds, "
                               f"got {self.duration_s}", "pass e.g. --duration 600, or --requests N")
        if self.requests is not None and self.duration_s is not None:
            raise KneecapError("--requests and --duration both given", "pass one of them")
        if ALL_AT_ONCE in self.levels and self.duration_s is not None:
            raise KneecapError("--concurrency max sends a fixed batch; it cannot run for --duration", "pass --requests N")
        if self.burstiness <= 0:
            raise KneecapError(f"--burstiness must be > 0, got {self.burstiness}", "pass e.g. --burstiness 1 (Poisson)")
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.isl:
            raise KneecapError(f"--shared-prefix {self.shared_prefix_tokens} tokens is not shorter than --isl {self.isl}",
                               "use a prefix shorter than the prompt")
        if self.warmup < 0:
            raise KneecapError(f"--warmup must be >= 0, got {self.warmup}", "pass e.g. --warmup 8")
        if self.turns and (self.kind != KIND_CONCURRENCY or ALL_AT_ONCE in self.levels or self.duration_s is not None):
            raise KneecapError("--turns runs C users' conversations in closed loop for a number of requests",
                               "pass --concurrency C --requests N (N a multiple of --turns), without max or --duration")
        if self.think_time_s < 0:
            raise KneecapError(f"--think-time-s must be >= 0, got {self.think_time_s}", "pass e.g. --think-time-s 2")

    @property
    def trace_rate(self) -> float:
        """The replayed trace's mean request rate at speed 1 (requests/s)."""
        n, span = len(self.schedule), self.schedule[-1][0] - self.schedule[0][0] if self.schedule else 0.0
        return (n - 1) / span if n > 1 and span > 0 else float(n)

    def replay_speed(self, rate: float) -> float:
        return rate / self.trace_rate

    def requests_for(self, value) -> int | None:
        """Measured requests of a level (None: as many as --duration sends)."""
        if self.ramp is not None:
            return None
        if self.schedule:
            return len(self.schedule) - self.warmup
        if value == ALL_AT_ONCE:
            return self.requests or DEFAULT_MAX_REQUESTS
        if self.requests is not None:
            return self.requests
        if self.duration_s is not None:
            return None
        if self.kind == KIND_RATE:
            return DEFAULT_RATE_REQUESTS
        return max(MIN_CLOSED_LOOP_REQUESTS, REQUESTS_PER_STREAM * int(value))

    def level_label(self, value) -> str:
        if self.ramp is not None:
            r = self.ramp
            return f"ramp {r.kind} {r.start:g} to {r.end:g}/s over {r.duration_s:g} s"
        if self.schedule:
            return f"replay x{self.replay_speed(value):g}"
        if value == ALL_AT_ONCE:
            return "C=max"
        return f"C={int(value)}" if self.kind == KIND_CONCURRENCY else f"rate={value:g}/s"

    @property
    def workload(self) -> Workload:
        return Workload(classes=(RequestClass(input=LengthDist.fixed(self.isl), output=LengthDist.fixed(self.osl),
                                              shared_prefix_tokens=self.shared_prefix_tokens,
                                              num_prefix_groups=self.num_prefix_groups),))

    def describe(self) -> dict:
        """summary.json's workload: what the requests were, so two runs of different workloads can be told apart
        (lengths from a dataset or a trace, or prompts that grow turn by turn, leave isl/osl as None)."""
        r = self.ramp
        from_data = bool(self.dataset or self.schedule or self.turns)  # no one fixed prompt length
        return {"isl": None if from_data else self.isl, "osl": None if from_data else self.osl,
                "shared_prefix_tokens": self.shared_prefix_tokens, "num_prefix_groups": self.num_prefix_groups,
                "burstiness": self.burstiness if self.kind == KIND_RATE else None,
                "dataset_requests": len(self.dataset) or None, "replay_requests": len(self.schedule) or None,
                "turns": self.turns or None, "think_time_s": self.think_time_s if self.turns else None,
                "ramp": None if r is None else {"kind": r.kind, "start": r.start, "end": r.end, "duration_s": r.duration_s}}


def level_spec(opts: SimulateOptions, value, num_requests: int | None, num_warmup: int, *, on_s: float | None = None,
               off_s: float = 0.0, seed: int = 0) -> LevelSpec:
    """One level as the virtual-clock driver runs it (on_s/off_s: open-loop on/off bursts; seed: a ramp's
    arrivals and the requests it sends)."""
    if opts.ramp is not None:
        from kneecap.workload import make_requests
        from kneecap.workload.ramps import ramp_arrival_times

        times = ramp_arrival_times(opts.ramp, seed=seed)
        specs = opts.dataset[:len(times)] if opts.dataset else make_requests(opts.workload, len(times), seed)
        return LevelSpec(rate=value, warmup=num_warmup, schedule=tuple(zip(times, specs)))
    if value == ALL_AT_ONCE:
        return LevelSpec(all_at_once=True, num_requests=num_requests, warmup=num_warmup)
    if opts.turns:  # C users' conversations: turn k's prompt = turn k-1's prompt + its answer + new input
        from kneecap.workload.multiturn import expected_turns, plan_conversations

        plan = plan_conversations(num_requests + num_warmup, opts.turns, LengthDist.fixed(opts.isl),
                                  LengthDist.fixed(opts.osl), seed=seed, think_time_s=opts.think_time_s)
        conversations = tuple(tuple(t.spec for t in expected_turns(plan, conv)) for conv in plan.conversations)
        return LevelSpec(concurrency=int(value), num_requests=num_requests, warmup=num_warmup,
                         conversations=conversations, think_time_s=opts.think_time_s)
    if opts.schedule:
        speed = opts.replay_speed(value)
        return LevelSpec(rate=value, warmup=num_warmup, schedule=tuple((at / speed, spec) for at, spec in opts.schedule))
    specs = opts.dataset[:num_requests + num_warmup] if opts.dataset and num_requests is not None else opts.dataset
    if opts.kind == KIND_RATE:
        return LevelSpec(rate=value, num_requests=num_requests, duration_s=opts.duration_s, warmup=num_warmup,
                         on_s=on_s, off_s=off_s, specs=specs)
    return LevelSpec(concurrency=int(value), num_requests=num_requests, duration_s=opts.duration_s, warmup=num_warmup,
                     specs=specs)


class VirtualTimeDriver:
    """Runs a level of a SimulateOptions sweep on a fresh engine of the SimDeployment; level i uses seed + i.
    trace: keep one row per engine step (LevelRun.trace); row_writer(path, rows) appends them to trace_path.
    token_times: records list every token's time (chunk_times) instead of referencing the level's step timeline."""

    def __init__(self, sim: SimDeployment, opts: SimulateOptions, *, trace: bool = False, trace_path: Path | None = None,
                 row_writer: Callable[[Path, list], None] | None = None, token_times: bool = False):
        self.sim = sim
        self.opts = opts
        self._token_times = token_times
        self._trace = trace or trace_path is not None
        self._trace_path = trace_path
        self._row_writer = row_writer

    def run_level(self, plan: SweepLevel, keep: Callable[[RequestRecord], None], *, workload: Workload | None = None,
                  seed: int | None = None, on_s: float | None = None, off_s: float = 0.0) -> LevelRun:
        """workload / seed: a load-plan cell's own class and seed (default: the sweep's, seed + level index)."""
        opts = self.opts
        level_seed = opts.seed + plan.index if seed is None else seed
        spec = level_spec(opts, plan.value, plan.num_requests, plan.num_warmup, on_s=on_s, off_s=off_s, seed=level_seed)
        result = simulate_level(self.sim.deployment, self.sim.config, self.sim.num_kv_blocks, workload or opts.workload,
                                spec, index=plan.index, seed=level_seed,
                                burstiness=opts.burstiness, steptime=self.sim.steptime, trace=self._trace,
                                charge_state=self.sim.charge_state, token_times=self._token_times)
        for record in result.records:
            keep(record)
        if self._trace_path is not None and self._row_writer is not None:
            self._row_writer(self._trace_path, result.trace)
        fields = {"slices": ramp_slices(result.records, opts.ramp)} if opts.ramp is not None else {}
        return LevelRun(server_metrics=server_metrics("simulator", **result.server_metrics), records=result.records,
                        trace=result.trace, fields=fields)

    def server_gone(self, summary: dict) -> str | None:
        return None  # the simulated engine never goes away


RAMP_SLICES = 10  # a ramp's metrics in this many equal time slices


def ramp_slices(records, ramp) -> list[dict]:
    """The ramp's level cut into RAMP_SLICES slices by send time: the target rate at each slice's middle and
    what the slice's requests saw (kneecap.workload.slices)."""
    from kneecap.workload.slices import slice_metrics

    rows = []
    for row in slice_metrics(records, ramp.duration_s / RAMP_SLICES, ramp=ramp):
        s = row["summary"] or {}
        rows.append({"index": row["index"], "start_s": row["start_s"], "end_s": row["end_s"],
                     "target_rate": row["load"], "requests": s.get("requests", 0), "completed": s.get("completed", 0),
                     "output_tok_s": s.get("output_tok_s"), "ttft_ms": s.get("ttft_ms"), "itl_ms": s.get("itl_ms")})
    return rows
