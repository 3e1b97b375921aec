"""Disaggregated prefill/decode (xPyD) in the simulated engine: a prefill pool of X replicas and a decode
pool of Y replicas of one setup (GPU, tp, pp, dtypes, engine limits).

What it follows: vLLM's disaggregated serving (docs "Disaggregated Prefilling", the NixlConnector and its
toy proxy): the proxy sends each request to a prefill instance with max_tokens=1, the prefill instance
computes the prompt's KV, the KV moves to a decode instance (each rank sends its own shard), and the decode
instance, holding the prompt's KV already, generates every output token. SGLang's PD disaggregation and
NVIDIA Dynamo's disaggregated serving have the same request path (prefill worker, KV transfer over
NIXL/RDMA, decode worker); Dynamo's conditional routing (short prompts prefilled locally) is not modelled.

How it is simulated (nothing in the engine changes):
1. one prefill replica at rate / X, every request with one output token (run_one_level with a schedule):
   each request's prefill time, queueing included;
2. the KV transfer: kv bytes per token per GPU x prompt tokens over one GPU's link (each GPU sends its
   shard in parallel): NVLink / xGMI / PCIe of the catalog when both pools fit one node (8 GPUs), else the
   node's network, 400 Gb/s per GPU (NVIDIA DGX H100/H200: eight ConnectX-7 400 Gb/s ports, one per GPU);
3. one decode replica at rate / Y: each request arrives at its own arrival + its prefill time + its transfer,
   and its prompt's KV is written into the decode replica's KV pool on arrival (blocks held until the
   scheduler admits it: vLLM's decode side allocates the blocks the KV is read into), so admission finds it
   cached and computes only the prompt's last partial block (the first decode step). A request whose KV
   finds no free blocks waits for them (its transfer starts when they are free). The replica runs on the
   simulator's one engine loop (kneecap.sim.sweep.drive): a request arrives when its KV is ready and blocks
   are free, which a step's end may bring. If the pool fills with KV that no waiting request can be admitted
   beside, the replica stops and every request it did not finish counts as failed.
TTFT = its prefill time + transfer + the decode replica's queue and first step; TPOT/ITL from the decode
replica. Rate loads only (a closed loop over two pools is not modelled). Owns this composition; not the
engine, the grid or the ranking.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from kneecap.metrics.search import MaxLoad, Verdict, find_max
from kneecap.metrics.slo import level_meets_slo, split_key
from kneecap.metrics.stats import nearest_rank
from kneecap.metrics.summarize import summarize_level
from kneecap.metrics.stability import is_steady
from kneecap.recommend.bound import replica_bound
from kneecap.recommend.evaluate import (
    RATE_RESOLUTION,
    LevelOutcome,
    judged,
    planned,
    simulated,
    steady_requests,
    until_steady,
)
from kneecap.recommend.space import GPUS_PER_NODE, Knobs, RecommendRequest, slo_limits
from kneecap.levels import LevelRun, SweepLevel, server_metrics
from kneecap.sim.level_driver import PlannedLevelDriver, SimulateOptions
from kneecap.sim.sweep import LevelSpec, drive
from kneecap.sweep.door import run_one_level
from kneecap.workload import Workload, arrival_offsets, make_requests

# NVIDIA DGX H100/H200 user guide, "Network ports": eight single-port ConnectX-7 cards at 400 Gb/s InfiniBand
# / Ethernet, one per GPU, for the compute fabric (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html)
NETWORK_BYTES_S_PER_GPU = 400e9 / 8
NETWORK_SOURCE = "400 Gb/s per GPU (NVIDIA DGX H100/H200: one ConnectX-7 400 Gb/s port per GPU)"
MAX_POOL_STEPS = 6  # replica adjustments tried around the first estimate
DECODE_STEP_BUFFER = 0.8  # the prefill pool is sized against 80% of the TTFT limit (the rest: transfer, first step)
LEVEL_REQUESTS = 160  # requests of a level (each pool)


@dataclass(frozen=True)
class Link:
    bytes_s: float  # per GPU, per direction
    name: str  # nvlink / xgmi / pcie / network


def link_for(req: RecommendRequest, k: Knobs, x: int, y: int) -> Link:
    """Inside one node when both pools fit (x + y) x GPUs per replica <= 8; else the network."""
    from kneecap.hardware import get_gpu

    gpu = get_gpu(k.gpu)
    if (x + y) * k.gpus_per_replica <= GPUS_PER_NODE:
        return Link(gpu.interconnect_bytes_s, gpu.interconnect)
    return Link(NETWORK_BYTES_S_PER_GPU, "network")


def transfer_s(kv_bytes_per_token_per_gpu: float, prompt_tokens: int, link: Link) -> float:
    return kv_bytes_per_token_per_gpu * prompt_tokens / link.bytes_s


def _workload(req: RecommendRequest) -> Workload:
    return req.mix if req.mix is not None else Workload.fixed(req.isl, req.osl)


def _draw(req: RecommendRequest, rate: float, n: int):
    specs = make_requests(_workload(req), n, req.seed, id_prefix="r")
    return specs, arrival_offsets(rate, n, req.burstiness, req.seed)


def prefill_times(req: RecommendRequest, k: Knobs, rate: float, n: int) -> list[float | None]:
    """One prefill replica at `rate`: each request's time from arrival to its prompt computed (None: failed)."""
    sim = simulated(req, k)
    specs, at = _draw(req, rate, n)
    schedule = tuple((a, dataclasses.replace(s, output_tokens=1)) for a, s in zip(at, specs))
    driver = PlannedLevelDriver(sim, _workload(req), LevelSpec(rate=rate, schedule=schedule), seed=req.seed)
    opts = SimulateOptions(kind="rate", levels=(rate,), requests=len(schedule))
    level = SweepLevel(index=0, value=rate, num_requests=n, num_warmup=0, first_index=0)
    _, records = run_one_level(opts, driver, level)
    done = {
        r.request_id: (r.first_token_at - r.sent_at) if r.ok and r.first_token_at is not None else None for r in records
    }
    return [done.get(s.request_id) for s in specs]


def decode_records(req: RecommendRequest, k: Knobs, rate: float, prefill_s: list[float | None], link: Link, n: int):
    """One decode replica at `rate` (DecodePoolDriver) through the one door, in memory: (its records, the ids of the
    requests that failed before or without a record, its server metrics)."""
    driver = DecodePoolDriver(req, k, prefill_s, link)
    level = SweepLevel(index=0, value=rate, num_requests=n, num_warmup=0, first_index=0)
    summary, records = run_one_level(SimulateOptions(kind="rate", levels=(rate,), requests=n), driver, level)
    return records, summary["pool_failed"], summary["server_metrics"]


@dataclass(frozen=True)
class DecodePoolDriver:
    """A level driver for one decode replica: request i arrives at its own arrival + prefill_s[i] + its transfer with
    its prompt's KV, which is written into the pool (blocks held until admission). Records timed from the arrival;
    the requests the prefill pool failed, or that the pool never admitted, are the level's `pool_failed`."""

    req: RecommendRequest
    k: Knobs
    prefill_s: list
    link: Link

    def server_gone(self, summary: dict) -> str | None:
        return None

    def run_level(self, level: SweepLevel, keep) -> LevelRun:
        req, k, link = self.req, self.k, self.link
        records, failed, sm = _decode_level(req, k, level.value, self.prefill_s, link, level.num_requests)
        for record in records:
            keep(record)
        metrics = server_metrics("simulator", **sm)  # the engine's own, already rounded as this shape rounds
        return LevelRun(server_metrics=metrics, records=records, fields={"pool_failed": failed})


def _decode_level(req: RecommendRequest, k: Knobs, rate: float, prefill_s: list[float | None], link: Link, n: int):
    sim = simulated(req, k)
    plan = sim.plan
    specs, at = _draw(req, rate, n)
    engine = sim.new_engine()
    blocks, bs = engine.blocks, engine.block_size
    failed = []
    todo = []
    for i, (s, a) in enumerate(zip(specs, at)):
        p = prefill_s[i % len(prefill_s)]
        if p is None:  # the prefill pool failed it
            failed.append(s.request_id)
            continue
        ready = a + p + transfer_s(plan.kv_bytes_per_token_per_gpu, s.input_tokens, link)
        todo.append((ready, i, dataclasses.replace(s, prefix_group=i, prefix_tokens=s.input_tokens), a))
    todo.sort(key=lambda x: (x[0], x[1]))
    origin = {spec.request_id: a for _, _, spec, a in todo}
    records, held = [], {}
    pos = 0

    def due(t: float) -> float:
        """Write the KV of every request ready by t into the pool and queue it, in order, while blocks last."""
        nonlocal pos
        while pos < len(todo) and todo[pos][0] <= t:
            _, i, spec, a = todo[pos]
            hold = ("kv", spec.request_id)
            n_full = (spec.input_tokens - 1) // bs
            if n_full and blocks.allocate(hold, n_full * bs) is None:
                if engine.has_work:
                    break  # no room for its KV yet: it waits for blocks (FIFO)
                n_full = 0  # nothing will free blocks: it recomputes its prompt here
            for b in range(n_full):
                blocks.register(hold, b, ("p", spec.class_name, spec.prefix_group, b))
            rejected = engine.add_request(spec, t, meta={"level": 0, "rate": rate}, scheduled_at=a)
            if rejected is not None:
                blocks.free_seq(hold)
                records.append(rejected)
            elif n_full:
                held[spec.request_id] = hold
            pos += 1
        return todo[pos][0] if pos < len(todo) else math.inf

    def ended(t: float, finished) -> None:
        records.extend(finished)
        for rid in [r for r, h in held.items() if blocks.num_held(r)]:
            blocks.free_seq(held.pop(rid))  # admitted: the sequence holds its KV blocks itself now

    if not drive(engine, due, ended):  # the pool filled with KV that no queued request can be admitted beside
        seen = {r.request_id for r in records}
        failed.extend(spec.request_id for _, _, spec, _ in todo if spec.request_id not in seen)
    for r in records:  # time every request from its arrival at the prefill pool
        r.sent_at = r.scheduled_at = origin.get(r.request_id, r.sent_at)
        r.rate = rate
    return records, failed, engine.server_metrics()


@dataclass(frozen=True)
class PoolsOutcome:
    prefill: int
    decode: int
    link: str
    transfer_ms: float  # for a prompt of the mean length
    level: LevelOutcome
    prefill_ttft_p99_ms: float | None


def run_pools(req: RecommendRequest, k: Knobs, x: int, y: int, n: int = LEVEL_REQUESTS) -> PoolsOutcome:
    """The whole xPyD deployment at the stated rate: one replica of each pool at its share, composed; sized to
    reach steady state at the decode replica's share (evaluate.until_steady) and judged on it."""
    link = link_for(req, k, x, y)
    pre_p99: list = [None]

    def run(m: int):
        pre = prefill_times(req, k, req.load / x, m)
        recs, failed, sm = decode_records(req, k, req.load / y, pre, link, m)
        summary = summarize_level(recs, rate=req.load / y)
        if failed:
            summary["failed"] = summary.get("failed", 0) + len(failed)
            summary["requests"] = summary.get("requests", 0) + len(failed)
        sorted_pre = sorted(p for p in pre if p is not None)
        pre_p99[0] = nearest_rank(sorted_pre, 0.99) * 1000.0 if sorted_pre else None
        return recs, summary, sm

    summary, sm = until_steady(run, "rate", req.load / y, steady_requests(req, req.load / y, n))
    level = judged(req.load, summary, req.slo, sm, replicas=y)  # output tok/s: the decode pool's replicas in all
    return PoolsOutcome(
        x,
        y,
        link.name,
        transfer_s(simulated(req, k).plan.kv_bytes_per_token_per_gpu, req.isl, link) * 1000.0,
        level,
        pre_p99[0],
    )


def prefill_max(req: RecommendRequest, k: Knobs, high: float) -> MaxLoad:
    """One prefill replica's highest rate whose prompt time keeps within DECODE_STEP_BUFFER of each TTFT
    limit, less the transfer (judged on the prompt times alone)."""
    ttft = slo_limits(req.slo, ("ttft",))
    link = link_for(req, k, 1, 1)
    xfer_ms = transfer_s(simulated(req, k).plan.kv_bytes_per_token_per_gpu, req.isl, link) * 1000.0

    def evaluate(rate: float, _rep: int) -> Verdict:
        pre = sorted(p for p in prefill_times(req, k, rate, LEVEL_REQUESTS) if p is not None)
        if len(pre) < LEVEL_REQUESTS:
            return Verdict(met=False, why="prefill requests failed")
        for key, limit in ttft.items():
            stat = split_key(key)[1]
            q = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "max": 1.0, "mean": None}.get(stat, 0.99)
            v = (sum(pre) / len(pre)) if q is None else nearest_rank(pre, q)
            if v * 1000.0 + xfer_ms > DECODE_STEP_BUFFER * limit:
                return Verdict(met=False, why=f"prefill {key[:-3]} {v * 1000:.0f} ms + transfer {xfer_ms:.1f} ms")
        return Verdict(met=True, why="")

    return _search(evaluate, req, k, high, "prefill")


def _search(evaluate, req: RecommendRequest, k: Knobs, high: float, pool: str) -> MaxLoad:
    """find_max of one pool's replica from an eighth of its roofline bound (replica_bound's, capped at `high`) up
    to it; once more from 1/512 of it when the eighth already fails. The bound is a ceiling no simulated level
    passes, so starting under it spares the doublings from far below."""
    top = min(high, replica_bound(planned(req.deployment_request(k)), k, req, pool=pool).load)
    if not top > 0:
        top = high
    m = find_max(evaluate, "rate", low=top / 8, high=top, resolution=RATE_RESOLUTION)
    if m.value is None:
        m = find_max(evaluate, "rate", low=top / 512, high=top / 8, resolution=RATE_RESOLUTION)
    return m


def decode_max(req: RecommendRequest, k: Knobs, high: float) -> MaxLoad:
    """One decode replica's highest rate meeting the TPOT/ITL/E2E limits, prompts arriving prefilled (no
    prefill queueing: that is the prefill pool's share of the TTFT, checked when the pools are composed)."""
    decode_slo = slo_limits(req.slo, ("tpot", "itl"))
    link = link_for(req, k, 1, 1)
    n = LEVEL_REQUESTS

    def evaluate(rate: float, _rep: int) -> Verdict:
        failures: list = []

        def run(m: int):
            recs, failed, sm = decode_records(req, k, rate, [0.0], link, m)
            failures[:] = failed
            return recs, summarize_level(recs, rate=rate), sm

        summary, _ = until_steady(run, "rate", rate, steady_requests(req, rate, n))
        ok, breaches = level_meets_slo(summary, decode_slo) if decode_slo else (not failures, [])
        why = [b["message"] for b in breaches] + ([] if is_steady(summary) else [summary["stability"]["verdict"]])
        return Verdict(met=ok and not failures and is_steady(summary), why="; ".join(why))

    return _search(evaluate, req, k, high, "decode")


@dataclass(frozen=True)
class DisaggSized:
    pools: PoolsOutcome | None  # None: no pool sizes within MAX_POOL_STEPS met the SLO
    prefill_max: float | None
    decode_max: float | None
    one_fewer_prefill: LevelOutcome | None
    one_fewer_decode: LevelOutcome | None
    why: str = ""


def size_pools(req: RecommendRequest, k: Knobs, high: float) -> DisaggSized:
    """X = ceil(rate / prefill max), Y = ceil(rate / decode max); the composed deployment checked at the rate:
    a TTFT breach adds a prefill replica, any other a decode replica; then each pool shrinks while the whole
    still meets the SLO."""
    pm, dm = prefill_max(req, k, high), decode_max(req, k, high)
    if pm.value is None or dm.value is None:
        return DisaggSized(
            None, pm.value, dm.value, None, None, why=pm.failed_because if pm.value is None else dm.failed_because
        )
    x = max(1, math.ceil(req.load / pm.value - 1e-9))
    y = max(1, math.ceil(req.load / dm.value - 1e-9))
    cache: dict[tuple[int, int], PoolsOutcome] = {}

    def check(a: int, b: int) -> PoolsOutcome:
        if (a, b) not in cache:
            cache[(a, b)] = run_pools(req, k, a, b)
        return cache[(a, b)]

    for _ in range(MAX_POOL_STEPS):
        o = check(x, y)
        if o.level.met:
            break
        ttft_breach = any(
            key.startswith("ttft") and (o.level.values.get(key) or 0) > lim
            for key, lim in req.slo.items()
            if key != "error_rate"
        )
        if ttft_breach and (o.prefill_ttft_p99_ms or 0) + o.transfer_ms > 0.5 * min(
            lim for key, lim in req.slo.items() if key.startswith("ttft")
        ):
            x += 1
        else:
            y += 1
    else:
        return DisaggSized(None, pm.value, dm.value, None, None, why=check(x, y).level.why)
    while x > 1 and check(x - 1, y).level.met:
        x -= 1
    while y > 1 and check(x, y - 1).level.met:
        y -= 1
    return DisaggSized(
        check(x, y),
        pm.value,
        dm.value,
        check(x - 1, y).level if x > 1 else None,
        check(x, y - 1).level if y > 1 else None,
    )
