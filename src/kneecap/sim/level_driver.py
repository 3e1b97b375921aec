"""The simulated engine in virtual time as a level driver for the one level runner
(kneecap.sweep.runner): each level on a fresh engine of exactly the plan's KV blocks, its server
metrics in the one server_metrics shape, optionally one trace row per engine step.

Also SimulateOptions: the simulate command's sweep (levels, request budgets, workload) as one
validated value. Owns neither the order of levels nor files other than the trace it is handed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kneecap.errors import KneecapError
from kneecap.levels import SweepLevel, LevelRun, server_metrics
from kneecap.metrics.stability import STABLE, level_stability
from kneecap.records import RequestRecord
from kneecap.sim.setup import SimDeployment
from kneecap.sim.sweep import CLIENT_TURNAROUND_S, DELIVERY_SPREAD_S, MAX_REQUESTS_PER_LEVEL, LevelSpec, simulate_level
from kneecap.workload import RequestSpec, Workload
from kneecap.workload.level_work import KIND_CONCURRENCY, KIND_RATE, LevelWork, WorkloadFlags, level_work
from kneecap.workload.slices import check_until_stable
from kneecap.workload.sweep_spec import SweepSpec

ALL_AT_ONCE = "max"
DEFAULT_MAX_REQUESTS = 1000  # requests of a "max" (all at once) level when --requests is not given
DEFAULT_RATE_REQUESTS = 200
MIN_CLOSED_LOOP_REQUESTS = 100
REQUESTS_PER_STREAM = 4
# --duration is virtual seconds up to one virtual day (and a level at most MAX_REQUESTS_PER_LEVEL requests).
MAX_DURATION_S = 86_400.0
STABLE_WINDOWS = 3  # --until-stable compares the p99s over the last 3 windows (as bench)


@dataclass(frozen=True, kw_only=True)
class SimulateOptions(SweepSpec):
    """One simulated sweep: the shared SweepSpec (times in virtual seconds) and what only the simulator reads."""

    kind: str  # "concurrency" | "rate"
    levels: tuple  # concurrencies (ints, or "max") or rates
    isl: int = 1000
    osl: int = 1000
    force: bool = True  # the simulator runs every level: preemption past the pool is what it shows
    # --replay: the trace's requests at speed 1, (send offset s, request) in send order; levels are then the
    # replay's mean request rates (speed x the trace's own rate), each level the whole trace
    schedule: tuple = ()
    dataset: tuple = ()  # --dataset: the requests, lengths from the data, in the order every level sends them
    ramp: object | None = None  # --ramp on the rate dimension (kneecap.workload.ramps.Ramp): one level, the ramp
    # closed loops: a client's turnaround from a response's end to its slot's next send, and the spread of one
    # step's responses reaching their clients one after another (kneecap.sim.sweep)
    client_turnaround_s: float = CLIENT_TURNAROUND_S
    delivery_spread_s: float = DELIVERY_SPREAD_S

    def __post_init__(self) -> None:
        self.check()
        if self.requests is not None and self.requests > MAX_REQUESTS_PER_LEVEL:
            raise KneecapError(
                f"--requests {self.requests:,} exceeds the simulator's {MAX_REQUESTS_PER_LEVEL:,} requests per level",
                "simulate fewer requests per level (a level's statistics settle long before that)",
            )
        if self.duration_s is not None and not (0 < self.duration_s <= MAX_DURATION_S):
            raise KneecapError(
                f"--duration must be between 0 and {MAX_DURATION_S:,.0f} virtual seconds, got {self.duration_s}",
                "pass e.g. --duration 600, or --requests N",
            )
        if ALL_AT_ONCE in self.levels and self.duration_s is not None:
            raise KneecapError(
                "--concurrency max sends a fixed batch; it cannot run for --duration", "pass --requests N"
            )
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.isl:
            raise KneecapError(
                f"--shared-prefix {self.shared_prefix_tokens} tokens is not shorter than --isl {self.isl}",
                "use a prefix shorter than the prompt",
            )
        if self.turns and (self.kind != KIND_CONCURRENCY or ALL_AT_ONCE in self.levels or self.duration_s is not None):
            raise KneecapError(
                "--turns runs C users' conversations in closed loop for a number of requests",
                "pass --concurrency C --requests N (N a multiple of --turns), without max or --duration",
            )
        for name, value in (
            ("client turnaround", self.client_turnaround_s),
            ("delivery spread", self.delivery_spread_s),
        ):
            if not (value >= 0 and math.isfinite(value)):
                raise KneecapError(f"{name} must be a finite number of seconds >= 0, got {value!r}", "pass e.g. 1e-4")
        check_until_stable(
            self.until_stable,
            self.stable_window_s,
            without="--requests, max, --replay, --ramp or --turns",
            closed_duration=not (
                self.kind != KIND_CONCURRENCY
                or self.duration_s is None
                or ALL_AT_ONCE in self.levels
                or self.schedule
                or self.ramp is not None
                or self.turns
            ),
        )

    @property
    def trace_rate(self) -> float:
        """The replayed trace's mean request rate at speed 1 (requests/s)."""
        from kneecap.workload.traces import replay_rate

        return replay_rate(self.schedule)

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
            return f"replay x{value / self.trace_rate:g}"
        if value == ALL_AT_ONCE:
            return "C=max"
        return f"C={int(value)}" if self.kind == KIND_CONCURRENCY else f"rate={value:g}/s"

    def describe(self) -> dict:
        """summary.json's workload: what the requests were, so two runs of different workloads can be told apart
        (lengths from a dataset or a trace, or prompts that grow turn by turn, leave isl/osl as None)."""
        r = self.ramp
        from_data = bool(self.dataset or self.schedule or self.turns)  # no one fixed prompt length
        dists = {k: v for k, v in (("isl_dist", self.isl_dist), ("osl_dist", self.osl_dist)) if v and not from_data}
        return {
            "isl": None if from_data or self.isl_dist else self.isl,
            "osl": None if from_data or self.osl_dist else self.osl,
            **dists,
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "num_prefix_groups": self.num_prefix_groups,
            "burstiness": self.burstiness if self.kind == KIND_RATE else None,
            "dataset_requests": len(self.dataset) or None,
            "replay_requests": len(self.schedule) or None,
            "turns": self.turns or None,
            "think_time_s": self.think_time_s if self.turns else None,
            "ramp": None if r is None else {"kind": r.kind, "start": r.start, "end": r.end, "duration_s": r.duration_s},
        }


def workload_flags(opts: SimulateOptions) -> WorkloadFlags:
    """SimulateOptions' workload flags in the shape bench's are translated from (kneecap.workload.level_work)."""
    return opts.workload_flags(
        dimension=opts.kind,
        dataset=opts.dataset,
        schedule=opts.schedule,
        trace_rate=opts.trace_rate if opts.schedule else None,
        ramp=opts.ramp,
    )


def level_spec(
    opts: SimulateOptions,
    level: SweepLevel,
    *,
    workload: Workload | None = None,
    seed: int | None = None,
    on_s: float | None = None,
    off_s: float = 0.0,
) -> LevelSpec:
    """One level as the virtual-clock driver runs it: its warmup's and its own work from the one translation
    bench uses (kneecap.workload.level_work), sent as kneecap.sim.sweep.level_phases sends them; a level without a
    request count (--duration) draws its requests as it goes. workload / seed: a load-plan cell's own class and
    seed (lengths and arrivals)."""
    import dataclasses

    flags = workload_flags(opts) if seed is None else dataclasses.replace(workload_flags(opts), seed=seed)
    workload = workload or opts.workload  # a subclass may draw from its own mix
    value = level.value
    warm = level_work(flags, level, warmup=True, workload=workload) if level.num_warmup else LevelWork(specs=())
    n_warm = len(warm.specs)
    if opts.schedule or opts.ramp is not None:  # a replayed trace or a ramp: the level's send times
        work = level_work(flags, level, warmup=False)
        rows = [*((0.0, s) for s in warm.specs), *zip(work.offsets, work.specs)]
        return LevelSpec(rate=value, warmup=n_warm, schedule=tuple(rows))
    if opts.kind == KIND_RATE:
        load = dict(rate=value, on_s=on_s, off_s=off_s)
    else:
        load = dict(all_at_once=True) if value == ALL_AT_ONCE else dict(concurrency=int(value))
    if level.num_requests is None:  # --duration: requests drawn as the level goes (a dataset's, in its order)
        return LevelSpec(**load, duration_s=opts.duration_s, warmup=level.num_warmup, specs=opts.dataset)
    work = level_work(flags, level, warmup=False, workload=workload)
    if opts.turns:  # C users' conversations: turn k's prompt = turn k-1's prompt + its answer + new input
        return LevelSpec(
            concurrency=int(value),
            num_requests=level.num_requests,
            warmup=n_warm,
            conversations=_conversations(warm) + _conversations(work),
            think_time_s=opts.think_time_s,
        )
    return LevelSpec(**load, num_requests=level.num_requests, warmup=n_warm, specs=warm.specs + work.specs)


def _conversations(work: LevelWork) -> tuple[tuple[RequestSpec, ...], ...]:
    """A LevelWork's turns (in conversation order) as one tuple of turns per conversation."""
    convs: dict[str, list[RequestSpec]] = {}
    for spec in work.specs:
        convs.setdefault(spec.conversation_id, []).append(spec)
    return tuple(tuple(turns) for turns in convs.values())


class VirtualTimeDriver:
    """Runs a level of a SimulateOptions sweep on a fresh engine of the SimDeployment; level i uses seed + i.
    trace: keep one row per engine step (LevelRun.trace); row_writer(path, rows) appends them to trace_path.
    token_times: records list every token's time (chunk_times) instead of referencing the level's step timeline."""

    def __init__(
        self,
        sim: SimDeployment,
        opts: SimulateOptions,
        *,
        trace: bool = False,
        trace_path: Path | None = None,
        row_writer: Callable[[Path, list], None] | None = None,
        token_times: bool = False,
    ):
        self.sim = sim
        self.opts = opts
        self._token_times = token_times
        self._trace = trace or trace_path is not None
        self._trace_path = trace_path
        self._row_writer = row_writer

    def run_level(
        self,
        level: SweepLevel,
        keep: Callable[[RequestRecord], None],
        *,
        workload: Workload | None = None,
        seed: int | None = None,
        on_s: float | None = None,
        off_s: float = 0.0,
    ) -> LevelRun:
        """workload / seed: a load-plan cell's own class and seed (default: the sweep's, seed + level index)."""
        opts = self.opts
        level_seed = opts.seed + level.index if seed is None else seed
        spec = level_spec(opts, level, workload=workload, seed=seed, on_s=on_s, off_s=off_s)

        def run(spec: LevelSpec):
            return simulate_level(
                self.sim,
                workload or opts.workload,
                spec,
                index=level.index,
                seed=level_seed,
                burstiness=opts.burstiness,
                trace=self._trace,
                token_times=self._token_times,
                turnaround_s=opts.client_turnaround_s,
                delivery_spread_s=opts.delivery_spread_s,
            )

        fields = {}
        if opts.until_stable is None:
            result = run(spec)
        else:  # the level up to a horizon that doubles until the p99s settle within it (or --duration is reached)
            import dataclasses

            horizon = min(opts.duration_s, 2 * (STABLE_WINDOWS + 1) * opts.stable_window_s)
            while True:
                result = run(dataclasses.replace(spec, duration_s=horizon))
                stop_s, fields["stable_p99"] = stable_stop(
                    result.records, opts.until_stable, opts.stable_window_s, horizon, value=level.value
                )
                if stop_s is not None or horizon >= opts.duration_s:
                    break
                horizon = min(opts.duration_s, 2 * horizon)
            if stop_s is not None:  # the level again, sending nothing after the p99s settled
                result = run(dataclasses.replace(spec, duration_s=stop_s))
        for record in result.records:
            keep(record)
        if self._trace_path is not None and self._row_writer is not None:
            self._row_writer(self._trace_path, result.trace)
        if opts.ramp is not None:
            from kneecap.workload.slices import ramp_slices

            fields["slices"] = ramp_slices(result.records, opts.ramp)
        return LevelRun(
            server_metrics=server_metrics("simulator", **result.server_metrics),
            records=result.records,
            trace=result.trace,
            fields=fields,
        )

    def server_gone(self, summary: dict) -> str | None:
        return None  # the simulated engine never goes away


class PlannedLevelDriver:
    """A level its caller planned as the engine runs it (a kneecap.sim.sweep.LevelSpec: e.g. a schedule of its own,
    or a fixed batch of given requests) on a fresh engine of the SimDeployment, with the caller's workload and seed:
    for callers whose level is not a sweep flag's (recommend's disaggregated pools, the validation points)."""

    def __init__(self, sim: SimDeployment, workload: Workload, plan: LevelSpec, *, seed: int = 0):
        self.sim, self.workload, self.plan, self.seed = sim, workload, plan, seed

    def run_level(self, level: SweepLevel, keep: Callable[[RequestRecord], None]) -> LevelRun:
        result = simulate_level(self.sim, self.workload, self.plan, index=level.index, seed=self.seed)
        for record in result.records:
            keep(record)
        return LevelRun(server_metrics=server_metrics("simulator", **result.server_metrics), records=result.records)

    def server_gone(self, summary: dict) -> str | None:
        return None


def stable_stop(
    records, rel_tol: float, window_s: float, duration_s: float, *, value=None
) -> tuple[float | None, dict]:
    """--until-stable on the virtual clock: the first window end k x window_s after t0, the measured requests'
    first send (before duration_s from then), at which kneecap.workload.slices.p99_stable finds the level's p99
    TTFT and ITL settled, over the records that ended by then, and the level is `stable` by the steady-state rule
    every level is judged by (kneecap.metrics.stability, its records as they stood then), as seconds from t0 (the
    --duration that stops
    the level there), and that verdict in summary.json's stable_p99 shape (bench's). None: never within duration_s.
    Any run of the level that sends until at least time t has the same records ended by t (what is sent later
    cannot change what happened before), so the verdict holds for the run that stops sending at the time
    found, and for the full --duration run; bench checks between rounds instead."""
    from kneecap.workload.slices import p99_stable

    sent = [r.sent_at for r in records if r.sent_at is not None and not r.warmup]
    t0 = min(sent, default=0.0)
    verdict = None
    k = 1
    steady = None
    while k * window_s < duration_s:
        verdict = p99_stable(records, window_s, windows=STABLE_WINDOWS, rel_tol=rel_tol, now_s=t0 + k * window_s)
        # and the level's steady-state verdict by then (kneecap.metrics.stability, the rule every level is judged by)
        steady = level_stability(records, kind=KIND_CONCURRENCY, value=value, now_s=t0 + k * window_s)
        if verdict.stable and steady["verdict"] == STABLE:
            break
        k += 1
    if verdict is None:
        verdict = p99_stable(records, window_s, windows=STABLE_WINDOWS, rel_tol=rel_tol, now_s=t0 + duration_s)
    ok = verdict.stable and steady is not None and steady["verdict"] == STABLE
    doc = dict(
        stable=ok,
        why=verdict.why if ok or not verdict.stable else f"p99s settled, but {steady['rule']}",
        rel_tol=rel_tol,
        window_s=window_s,
        ttft_p99_ms=list(verdict.ttft_p99_ms),
        itl_p99_ms=list(verdict.itl_p99_ms),
        steady_state=None if steady is None else steady["verdict"],
    )
    return (k * window_s if ok else None), doc
