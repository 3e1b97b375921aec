"""One candidate in the simulated engine: a level at a load (VirtualTimeDriver on a fresh engine of the
plan's KV blocks, summarized and judged against the SLO), one replica's highest load meeting the SLO
(find_max over such levels), and the replica count that serves the whole load (checked at the load itself).

Runs in worker processes: every function takes plain values and rebuilds (and caches) the plan.
Owns neither the grid nor the ranking (search.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

from kneecap.levels import SweepLevel
from kneecap.metrics.search import MaxLoad, Verdict, find_max
from kneecap.metrics.slo import STEADY_STATE, level_meets_slo, slo_value
from kneecap.metrics.stability import MAX_EXTENDED_REQUESTS, extended_requests, is_steady, level_stability
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.recommend.space import ENGINE_DEFAULTS, Knobs, RecommendRequest
from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver
from kneecap.sim.setup import SimDeployment, from_plan
from kneecap.sweep.door import run_one_level
from kneecap.workload import Workload


@dataclass(frozen=True)
class MixOptions(SimulateOptions):
    """SimulateOptions whose levels draw from a class mix instead of one fixed ISL/OSL pair."""

    mix: Workload | None = None

    @property
    def workload(self) -> Workload:
        return self.mix if self.mix is not None else super().workload


COARSE_REQUESTS = 200  # measured requests of any level at least: the search and the sizing check run the same levels
FINE_REQUESTS = COARSE_REQUESTS  # the check at the stated load: the same level as the search ran there
STEADY_FACTOR = 3.5  # a level holds >= 3.5x the requests in flight by Little's law (the stability rule asks 3x)
MAX_STEADY_REQUESTS = MAX_EXTENDED_REQUESTS  # a level is extended until stable or over capacity, up to this many
RATE_RESOLUTION = 0.1  # find_max stops when the bracket is within 10%
MAX_REPLICA_STEPS = 6  # replica adjustments tried around ceil(load / per-replica max)


@lru_cache(maxsize=256)
def planned(request: DeploymentRequest):
    return plan_deployment(request).plan


def simulated(req: RecommendRequest, k: Knobs) -> SimDeployment:
    """The candidate on the simulated engine: vLLM's defaults, its two batch limits, prefix caching, and the request's speculative
    decoding when the candidate speculates (each sequence's accepted lengths drawn from the request's seed)."""
    return from_plan(
        planned(req.deployment_request(k)),
        defaults=ENGINE_DEFAULTS,
        max_num_seqs=k.max_num_seqs,
        max_num_batched_tokens=k.max_num_batched_tokens,
        prefix_caching=k.prefix_caching,
        speculative=req.spec_for(k.spec),
        spec_seed=req.seed if k.spec else None,
    )


@dataclass(frozen=True)
class LevelOutcome:
    load: float
    met: bool  # every SLO term met, at a stable level
    why: str
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    tpot_p50_ms: float | None
    output_tok_s: float | None
    kv_usage_max: float | None
    preemptions: int | None
    values: dict  # every SLO key -> the level's value (None: no data)
    stability: str | None = None  # the level's verdict (metrics.stability): stable | transient | over_capacity
    requests: int = 0  # the requests the level ran (after extending it to steady state)
    prefix_hit_rate: float | None = None  # the prefix cache's hit rate over the level (the fleet's, through a router)


def predicted_e2e_s(req: RecommendRequest) -> float:
    """A request's end-to-end time at a load that meets the SLO, at most: its TTFT limit + osl x its TPOT (or ITL)
    limit (10 s without latency terms)."""
    ttft = max((v for k, v in req.slo.items() if k.startswith("ttft_")), default=None)
    tpot = max((v for k, v in req.slo.items() if k.startswith(("tpot_", "itl_"))), default=None)
    return ((ttft or 0.0) + req.osl * (tpot or 0.0)) / 1000.0 if (ttft or tpot) else 10.0


def steady_requests(req: RecommendRequest, load: float, base: int) -> int:
    """A level's first size: STEADY_FACTOR x the requests in flight by Little's law (rate x predicted_e2e_s; a
    closed loop: its streams, after its first round), at least `base`, at most MAX_STEADY_REQUESTS."""
    if req.kind != "rate":
        return max(base, math.ceil((STEADY_FACTOR + 1) * load))
    return int(min(MAX_STEADY_REQUESTS, max(base, math.ceil(STEADY_FACTOR * load * predicted_e2e_s(req)))))


def until_steady(run, kind: str, value, requests: int):
    """run(n) -> (records, summary, server_metrics) for a level of n requests, run again longer (the simulator is
    deterministic for a seed) while its verdict is transient (kneecap.metrics.stability.extended_requests).
    Returns the last run's summary (its `stability` set) and server metrics."""
    n, attempt = requests, 0
    while True:
        records, summary, sm = run(n)
        summary["stability"] = st = level_stability(records, kind=kind, value=value)
        summary["steady_requests"] = n
        more = extended_requests(n, st, attempt)
        if more is None:
            return summary, sm
        n, attempt = more, attempt + 1


def level_requests(req: RecommendRequest, load: float, base: int) -> int:
    return steady_requests(req, load, base)


def coarse_requests(req: RecommendRequest, load: float) -> int:
    """A search level's requests: steady_requests from COARSE_REQUESTS up (the level is then extended until its
    verdict is stable or over capacity)."""
    return steady_requests(req, load, COARSE_REQUESTS)


def run_level(sim, req: RecommendRequest, load: float, requests: int) -> LevelOutcome:
    """One simulated level at `load`, sized to reach steady state (until_steady) and judged against the SLO.
    `sim`: one replica (SimDeployment) or replicas behind a router (kneecap.sim.fleet.FleetDeployment)."""
    value = float(load) if req.kind == "rate" else int(load)

    def run(n: int):
        opts = MixOptions(
            kind=req.kind,
            levels=(value,),
            isl=req.isl,
            osl=req.osl,
            requests=n,
            seed=req.seed,
            mix=req.mix,
            burstiness=req.burstiness,
            shared_prefix_tokens=req.shared_prefix_tokens,
            num_prefix_groups=req.num_prefix_groups,
        )
        level = SweepLevel(index=0, value=value, num_requests=n, num_warmup=0, first_index=0)
        summary, records = run_one_level(opts, VirtualTimeDriver(sim, opts), level)
        return records, summary, summary["server_metrics"]

    summary, sm = until_steady(run, req.kind, value, level_requests(req, value, requests))
    return judged(value, summary, req.slo, sm)


def judged(load: float, summary: dict, slo: dict, server_metrics: dict, replicas: int = 1) -> LevelOutcome:
    """A level summary judged against the SLO; output_tok_s is that of `replicas` such replicas. A level whose
    stability verdict is not `stable` (over capacity, or too short to tell) does not meet the SLO, whatever its
    percentiles say."""
    ok, breaches = level_meets_slo(summary, slo)
    why = [b["message"] for b in breaches]
    st = summary.get("stability") or {}
    if not is_steady(summary) and not any(b["key"] == STEADY_STATE for b in breaches):
        why.insert(0, st.get("client_behind") or f"{st.get('verdict')} ({st.get('rule')})")
    dist = lambda m, stat: (summary.get(m) or {}).get(stat)
    out = summary.get("output_tok_s")
    return LevelOutcome(
        load=load,
        met=ok and is_steady(summary),
        why="; ".join(why),
        ttft_p99_ms=dist("ttft_ms", "p99"),
        tpot_p99_ms=dist("tpot_ms", "p99"),
        tpot_p50_ms=dist("tpot_ms", "p50"),
        output_tok_s=None if out is None else out * replicas,
        kv_usage_max=server_metrics.get("kv_usage_max"),
        preemptions=server_metrics.get("preemptions"),
        values={key: slo_value(summary, key) for key in slo},
        stability=st.get("verdict"),
        requests=summary.get("steady_requests") or summary.get("requests") or 0,
        prefix_hit_rate=server_metrics.get("prefix_cache_hit_rate"),
    )


def replica_max(req: RecommendRequest, k: Knobs, bound: float, levels: dict | None = None) -> MaxLoad:
    """find_max over simulated levels of one replica (coarse_requests at each load), from bound/8 up to
    min(bound, the whole load) (once more from bound/512 when bound/8 already fails). levels: filled with
    (load, requests) -> LevelOutcome of every level run, for the caller to reuse (the simulator is deterministic)."""
    sim = simulated(req, k)
    levels = {} if levels is None else levels

    def evaluate(load: float, _rep: int) -> Verdict:
        key = (load, coarse_requests(req, load))
        if key not in levels:
            levels[key] = run_level(sim, req, load, key[1])
        o = levels[key]
        return Verdict(met=o.met, why=o.why)

    high = min(bound, req.load)
    if req.kind == "rate":
        m = find_max(evaluate, "rate", low=high / 8, high=high, resolution=RATE_RESOLUTION)
        if m.value is None:
            m = find_max(evaluate, "rate", low=high / 512, high=high / 8, resolution=RATE_RESOLUTION)
        return m
    high = max(1, int(high))
    step = max(1, high // 32)
    m = find_max(evaluate, "concurrency", low=max(1, high // 8), high=high, resolution=step)
    if m.value is None and high // 8 > 1:
        m = find_max(evaluate, "concurrency", low=1, high=max(1, high // 8), resolution=max(1, high // 256))
    return m


def per_replica_load(req: RecommendRequest, replicas: int) -> float:
    """Each replica's share of the load: rate / replicas (requests routed at random stay Poisson), or
    ceil(concurrency / replicas) streams (the busiest replica)."""
    return req.load / replicas if req.kind == "rate" else math.ceil(req.load / replicas)


@dataclass(frozen=True)
class Sized:
    replicas: int | None  # None: no replica count within MAX_REPLICA_STEPS met the SLO
    at_load: LevelOutcome | None  # the check at the stated load with `replicas`
    one_fewer: LevelOutcome | None  # the same check with one replica fewer (fails, or replicas == 1)


def fleet_level(sim: SimDeployment, req: RecommendRequest, replicas: int, requests: int) -> LevelOutcome:
    """The whole load on `replicas` replicas behind the request's router (each its own engine and KV pool, one
    virtual clock); output_tok_s is one replica's average, as run_level's, so that x replicas is the fleet's."""
    from kneecap.sim.fleet import FleetDeployment

    o = run_level(FleetDeployment(sim, replicas, req.router, req.seed), req, req.load, requests)
    return dataclasses.replace(o, output_tok_s=None if o.output_tok_s is None else o.output_tok_s / replicas)


def size_replicas(
    req: RecommendRequest, k: Knobs, max_load: float, requests: int = FINE_REQUESTS, levels: dict | None = None
) -> Sized:
    """Replicas = ceil(load / per-replica max), then checked at the stated load (each replica at its share, or
    with req.fleet_check the whole load through the router: fleet_level): add replicas
    until the check meets the SLO, remove them while one fewer still meets it. levels: (load, requests) ->
    LevelOutcome already run for this candidate (replica_max's), reused where a check is the same level."""
    sim = simulated(req, k)
    r = max(1, math.ceil(req.load / max_load - 1e-9))
    cache: dict[int, LevelOutcome] = {}
    known = levels or {}

    def check(n: int) -> LevelOutcome:
        if n not in cache:
            share = per_replica_load(req, n)
            if req.fleet_check:
                cache[n] = fleet_level(sim, req, n, requests)
            elif (share, coarse_requests(req, share)) in known and requests == COARSE_REQUESTS:
                cache[n] = known[(share, coarse_requests(req, share))]
            else:
                cache[n] = run_level(sim, req, share, requests)
        return cache[n]

    for _ in range(MAX_REPLICA_STEPS):
        if check(r).met:
            break
        r += 1
    else:
        return Sized(None, None, None)
    while r > 1 and check(r - 1).met:
        r -= 1
    return Sized(r, check(r), check(r - 1) if r > 1 else None)
