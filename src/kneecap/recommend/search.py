"""The search: every candidate of the grid is planned (what cannot fit is pruned), bounded (what cannot
beat the cheapest found so far is skipped), and the rest priced by the simulated engine — short levels
first (one replica's max load under the SLO, find_max), then the cheapest few sized and checked at the
stated load with longer levels. Batches of a fixed size run across worker processes; results depend on
the batch order only, never on the worker count.

Owns ranking, pruning counts and the Pareto frontiers; not flags, rendering, or the simulator.
"""

from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from kneecap.errors import KneecapError
from kneecap.recommend import confirm
from kneecap.recommend.bound import Bound, replica_bound, steady_batch_bound
from kneecap.recommend.disagg import NETWORK_SOURCE, size_pools
from kneecap.recommend.evaluate import (
    COARSE_REQUESTS,
    FINE_REQUESTS,
    MAX_STEADY_REQUESTS,
    STEADY_FACTOR,
    coarse_requests,
    per_replica_load,
    planned,
    replica_max,
    run_level,
    simulated,
    size_replicas,
)
from kneecap.recommend.gate import mark, quantized_for
from kneecap.recommend.prices import Price
from kneecap.recommend.space import Knobs, RecommendRequest
from kneecap.sim.speculative import SpecDecoding

BATCH = 4  # candidates simulated per round (fixed: the pruning between rounds must not depend on the workers)
SLACK = 0.25  # also simulate candidates whose lower-bound cost is within 25% of the best so far (the frontier)
MAX_REPRESENTATIVES = 10  # stage 1: one engine-limit setting per (GPU, tp, pp, dtypes), cheapest bounds first
LIMIT_VARIANTS_FOR = 1  # stage 2: the other max_num_seqs, then max_num_batched_tokens, of the best this many setups
REFINE = 4  # stage 3: the cheapest candidates sized and checked at the stated load with longer levels
DISAGG_SETUPS = 4  # stage 4 (rate loads): at most this many setups tried as disaggregated prefill/decode pools: those
# whose bound on the pools' cost (ceil(rate / prefill bound) + ceil(rate / decode bound) replicas) is below the cheapest
# aggregated candidate sized, cheapest bound first
RAY_TASK_TIMEOUT_S = 3600.0
PREFERRED_LIMITS = (
    256,
    8192,
)  # the representative's limits when bounds tie (vLLM's defaults on a >= 70 GiB GPU: 1024, 8192)


@dataclass
class Counts:
    evaluated: int = 0
    pruned: int = 0  # does not fit (plan_deployment refused it, or no KV pool)
    infeasible: int = 0  # the bound (roofline or step-time at the steady batch) says no load meets the SLO
    over_gpu_limit: int = 0
    bound_over_gpu_limit: int = 0  # of which the bound's replica count already needs more GPUs than allowed
    skipped_by_bound: int = 0  # its lower-bound cost cannot come within SLACK of the best found
    simulated: int = 0
    not_simulated: int = 0  # fits and could meet the SLO, but bounded out or not among the best setups
    disagg_bounded_out: int = 0  # setups whose disaggregated pools' cost bound is not below the best aggregated cost
    prune_reasons: dict = field(default_factory=dict)


def _coarse(args):
    """One replica's max load (find_max), and one level at the share of the load that ceil(load / max)
    replicas would each take: the candidate's point on the frontier before any longer check."""
    req, k, bound = args
    levels: dict = {}  # (load, requests) -> LevelOutcome: each level run once, reused by the point and the sizing
    m = replica_max(req, k, bound, levels)
    at = None
    if m.value is not None:
        n = max(1, math.ceil(req.load / m.value - 1e-9))
        share = per_replica_load(req, n)
        key = (share, coarse_requests(req, share))
        if key not in levels:
            levels[key] = run_level(simulated(req, k), req, share, key[1])
        at = levels[key]
    # failed_at None: met at the top of the search
    return m.value, m.failed_at, m.failed_because, len(m.probes), at, levels


def _refine(args):
    req, k, max_load, levels = args
    return size_replicas(req, k, max_load, FINE_REQUESTS, levels)


def _disagg(args):
    req, k, high = args
    return size_pools(req, k, high)


def _on_node(fn, x):
    """A Ray task: fn(x) and the id of the node it ran on."""
    import ray

    return fn(x), ray.get_runtime_context().get_node_id()


class _Runner:
    """fn over items, in order: inline with one worker, on one process pool kept for the whole search, or as
    Ray tasks on a cluster (`ray`: auto, local or HOST:PORT). The same items in the same order either way, so
    the answer does not depend on where they ran."""

    def __init__(self, workers: int, ray: str | None = None):
        self.workers, self.ray_address = workers, ray
        self.pool = self.conn = self.task = None
        self.used_nodes: set[str] = set()

    def map(self, fn, items):
        if not items:
            return []
        if self.ray_address is not None:
            return self._ray_map(fn, items)
        if self.workers <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=self.workers)
        return list(self.pool.map(fn, items))

    def _ray_map(self, fn, items):
        if self.conn is None:
            from kneecap.cluster.connect import connect

            self.conn = connect(self.ray_address)
        ray = self.conn.ray
        if self.task is None:
            self.task = ray.remote(num_cpus=1, max_retries=0)(_on_node)
        refs = [self.task.remote(fn, x) for x in items]
        try:
            got = ray.get(refs, timeout=RAY_TASK_TIMEOUT_S)
        except Exception as exc:  # a node died, a timeout: named, never a traceback
            raise KneecapError(
                f"candidate evaluations did not finish on the Ray cluster at {self.ray_address} ({type(exc).__name__})",
                "check the cluster (ray status) and run recommend again",
            ) from None
        self.used_nodes.update(node for _, node in got)
        return [result for result, _ in got]

    @property
    def nodes(self) -> dict | None:
        if self.conn is None:
            return None
        return {"alive": len(self.conn.alive_nodes()), "ran_tasks": len(self.used_nodes)}

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
        if self.conn is not None:
            self.conn.close()


def pareto(items: list[dict], keys: tuple) -> list[dict]:
    """Items not dominated under `keys` ((getter, 'min'|'max') pairs); order kept. Of items with equal values
    under every key only the first stays (settings that change nothing the keys see are one point)."""

    def score(it):
        v = [g(it) for g, _ in keys]
        return None if None in v else [x if sense == "min" else -x for x, (_, sense) in zip(v, keys)]

    scored = [(a, va) for a, va in ((a, score(a)) for a in items) if va is not None]
    out, kept = [], []
    for a, va in scored:
        if va not in kept and not any(vb != va and all(x <= y for x, y in zip(vb, va)) for _, vb in scored):
            out.append(a)
            kept.append(va)
    return out


def _binding(slo: dict, values: dict, kv_usage_max: float | None) -> tuple[str, float | None]:
    """The SLO term closest to its limit (margin = 1 - value / limit), or the KV pool when it ran full."""
    best, margin = None, None
    for key, limit in slo.items():
        v = values.get(key)
        if v is None or not limit:
            continue
        m = 1.0 - v / limit
        if margin is None or m < margin:
            best, margin = key, m
    if kv_usage_max is not None and kv_usage_max >= 0.95 and (margin is None or 1 - kv_usage_max < margin):
        return "kv_pool", 1.0 - kv_usage_max
    return best or "none", margin


def _point(
    req: RecommendRequest,
    k: Knobs,
    price: float,
    replicas: int,
    at,
    max_load: float | None,
    disaggregated: dict | None = None,
) -> dict:
    """A candidate as the frontier sees it: its cost and one level's prediction at its share of the load."""
    gpus = k.gpus_per_replica * replicas
    cost = price * gpus
    r_out = at.output_tok_s if disaggregated else (at.output_tok_s * replicas if at.output_tok_s is not None else None)
    return {
        "gpu": k.gpu,
        "gpus_per_replica": k.gpus_per_replica,
        "replicas": replicas,
        "tp": k.tp,
        "pp": k.pp,
        "ep": k.ep,
        "dp_attention": k.dp_attention,
        "speculative": _spec_doc(req.spec_for(k.spec)) if k.spec else None,
        "weight_dtype": k.weight_dtype,
        "kv_dtype": k.kv_dtype,
        "max_num_seqs": k.max_num_seqs,
        "max_num_batched_tokens": k.max_num_batched_tokens,
        "prefix_caching": k.prefix_caching,
        "disaggregated": disaggregated,
        "total_gpus": gpus,
        "usd_per_gpu_hour": price,
        "cost_per_hour": round(cost, 4),
        "cost_per_mtok_output": None if not r_out else round(cost / (r_out * 3600.0 / 1e6), 4),
        "predicted": {
            "ttft_p99_ms": at.ttft_p99_ms,
            "tpot_p99_ms": at.tpot_p99_ms,
            "tpot_p50_ms": at.tpot_p50_ms,
            "output_tok_s": r_out,
            "slo_values": at.values,
            "kv_usage_max": at.kv_usage_max,
            "preemptions": at.preemptions,
            "prefix_cache_hit_rate": at.prefix_hit_rate,
        },
        "meets_slo": at.met,
        "output_tok_s_per_gpu": None if r_out is None else r_out / gpus,
        "output_tok_s_per_user": None if not at.tpot_p50_ms else 1000.0 / at.tpot_p50_ms,
        "max_load": max_load,
        "sized": False,
        "quantized_below_checkpoint": list(quantized_for(req.model, k.weight_dtype, k.kv_dtype)),
    }


def _spec_doc(s: SpecDecoding) -> dict:
    """A speculating candidate's method, K and the acceptance it assumes (the request's, not a measurement)."""
    return {
        "method": s.method,
        "tokens": s.tokens,
        "acceptance_assumed": list(s.rates) or None,
        "accepted_lengths_assumed": len(s.accepted_lengths) or None,
        "expected_tokens_per_step": round(s.expected_tokens_per_step, 4),
    }


def _plan_doc(plan) -> dict:
    return {
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "num_kv_blocks": plan.num_kv_blocks,
        "weights_bytes_per_gpu": plan.ledger.weights_bytes,
        "kv_pool_bytes_per_gpu": plan.ledger.kv_pool_bytes,
        "overhead_bytes_per_gpu": plan.ledger.overhead_bytes,
        "hbm_bytes_per_gpu": plan.ledger.hbm_bytes,
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
        "context": plan.context,
    }


def _trust(plan) -> str:
    d = plan.deployment
    moe = d.model.active_params < d.model.total_params
    return confirm.trust(d.gpu.vendor, moe, "fp8" in (d.weight_dtype, d.kv_dtype))


def _met(o) -> dict:
    return {"met": o.met, "why": o.why}


def _candidate(
    req: RecommendRequest, k: Knobs, price: float, plan, max_load: float, sized, bound: Bound, max_load_open: bool
) -> dict:
    at = sized.at_load
    r = sized.replicas
    binding, margin = _binding(req.slo, at.values, at.kv_usage_max)
    share = per_replica_load(req, r)
    out = _point(req, k, price, r, at, max_load)
    out["predicted"]["per_replica_load"] = share
    out.update(
        {
            "sized": True,
            "binding": binding,
            "margin": margin,
            "one_fewer_replica": sized.one_fewer and {"replicas": r - 1, **_met(sized.one_fewer)},
            "max_load_at_least": max_load_open,  # True: met at the top of the search (the whole
            # load, or the roofline bound); the replica's true maximum may be higher
            "bound": {"load": bound.load, "why": bound.why},
            "plan": _plan_doc(plan),
            "serve_cmd": confirm.serve_cmd(req, k, checkpoint_dtype=plan.deployment.model.weight_dtype),
            "confirm_cmd": confirm.bench_cmd(req, share, max_load),
            "confirm_note": confirm.replay_note(req, share, max_load)
            if req.trace is not None
            else None
            if req.mix is None
            else (
                "bench sends one length pair: the class mix's weighted means; the mix itself runs with the `kneecap run` plan"
            ),
            "trust": _trust(plan),
        }
    )
    return out


def _disagg_candidate(req: RecommendRequest, k: Knobs, price: float, plan, ds) -> dict:
    p = ds.pools
    at = p.level
    binding, margin = _binding(req.slo, at.values, at.kv_usage_max)
    g = k.gpus_per_replica
    info = {
        "prefill_replicas": p.prefill,
        "decode_replicas": p.decode,
        "prefill_gpus": p.prefill * g,
        "decode_gpus": p.decode * g,
        "kv_link": p.link,
        "kv_transfer_ms": round(p.transfer_ms, 3),
        "kv_link_note": NETWORK_SOURCE
        if p.link == "network"
        else f"{plan.deployment.gpu.interconnect} of the GPU catalog",
        "prefill_time_p99_ms": p.prefill_ttft_p99_ms,
        "prefill_max_rate": ds.prefill_max,
        "decode_max_rate": ds.decode_max,
        "one_fewer_prefill": ds.one_fewer_prefill and _met(ds.one_fewer_prefill),
        "one_fewer_decode": ds.one_fewer_decode and _met(ds.one_fewer_decode),
    }
    out = _point(req, k, price, p.prefill + p.decode, at, None, info)
    out["predicted"]["per_replica_load"] = {"prefill": req.load / p.prefill, "decode": req.load / p.decode}
    out.update(
        {
            "sized": True,
            "binding": binding,
            "margin": margin,
            "one_fewer_replica": None,
            "max_load_at_least": False,
            "bound": None,
            "plan": _plan_doc(plan),
            "serve_cmd": confirm.serve_cmd(
                req, k, checkpoint_dtype=plan.deployment.model.weight_dtype, disaggregated=True
            ),
            "confirm_cmd": confirm.bench_cmd(req, req.load, None, disaggregated=True),
            "confirm_note": "run against the router in front of both pools, at the whole rate",
            "confirm_pools": confirm.pool_bench_cmds(req, p.prefill, p.decode, p.transfer_ms),
            "trust": _trust(plan) + "; disaggregated serving is not validated against measurements",
        }
    )
    return out


def _no_candidate(req: RecommendRequest, c: Counts, reasons: list[str]) -> KneecapError:
    if c.pruned == c.evaluated:
        hint = (
            "try more GPUs per replica (up to 8 per node; raise --max-gpus if it is lower), a GPU with more memory (--gpus), "
            "or fp8 weights and KV (--weight-dtypes fp8 --kv-dtypes fp8)"
        )
    else:
        hint = "try a looser SLO, fp8 weights and KV (--weight-dtypes fp8 --kv-dtypes fp8), or a faster GPU (--gpus)"
        if req.max_gpus is not None and c.over_gpu_limit:
            hint += ", or a higher --max-gpus"
    why = reasons[0] if reasons else (next(iter(c.prune_reasons)) if c.prune_reasons else "no candidate met the SLO")
    slo = ", ".join(f"{k}={v:g}" for k, v in req.slo.items())
    return KneecapError(
        f"no deployment of {req.model} meets {slo} at {req.kind} {req.load:g} ({c.evaluated} candidates: "
        f"{c.pruned} do not fit, {c.infeasible} cannot meet the SLO, {c.over_gpu_limit} need more GPUs "
        f"than allowed; e.g. {why})",
        hint,
    )


def _disagg_setups(
    req: RecommendRequest, plans: dict, by_setup: dict, coarse: list, best_cost: float, c: Counts
) -> list:
    """The setups worth trying as xPyD pools: a lower bound on the pools' cost (at least ceil(rate / prefill bound)
    prefill and ceil(rate / decode bound) decode replicas, replica_bound's roofline for each pool) below the cheapest
    aggregated candidate's cost; cheapest bound first, at most DISAGG_SETUPS. Each setup with its best simulated
    engine limits (coarse), else its representative's."""
    best_knobs = {}
    for it in sorted(coarse, key=lambda x: (x[0], x[1])):
        best_knobs.setdefault(it[2].plan_key, it)
    scored = []
    for key, items in by_setup.items():
        it = best_knobs.get(key, items[0])
        k, plan = it[2], plans[key]
        pre, dec = replica_bound(plan, k, req, pool="prefill"), replica_bound(plan, k, req, pool="decode")
        if pre.load <= 0 or dec.load <= 0:
            c.disagg_bounded_out += 1
            continue
        n = math.ceil(req.load / pre.load - 1e-9) + math.ceil(req.load / dec.load - 1e-9)
        lb = it[4] * k.gpus_per_replica * n
        if lb >= best_cost or (req.max_gpus is not None and n * k.gpus_per_replica > req.max_gpus):
            c.disagg_bounded_out += 1
            continue
        scored.append((lb, it[1], it))
    scored.sort(key=lambda x: (x[0], x[1]))
    c.disagg_bounded_out += max(0, len(scored) - DISAGG_SETUPS)
    return [it for _, _, it in scored[:DISAGG_SETUPS]]


def _funnel(c: Counts, ranked: list, coarse: list, best_cost: float, checked: int) -> dict:
    """Where each candidate of the grid stopped: does not fit; ruled out by the bound (roofline, or the step-time
    model at the steady batch, whichever is lower: it cannot meet the SLO, needs more GPUs than allowed, or its
    bound's cost is above the answer's: it cannot cost less); simulated
    (one replica's highest load searched over levels sized to steady state); checked at the stated load at steady
    state; the rest fit, could cost as little as the answer by the bound, and were not simulated because another
    engine setting of their setup (GPU, parallelism, dtypes) stood for them or their setup ranked lower."""
    simulated = {it[1] for it in coarse}
    above = sum(1 for it in ranked if it[1] not in simulated and it[0] > best_cost * (1 + 1e-9))
    bound_out = c.infeasible + c.bound_over_gpu_limit + above
    return {
        "considered": c.evaluated,
        "do_not_fit": c.pruned,
        "ruled_out_by_bound": bound_out,
        "simulated": c.simulated,
        "checked_at_steady_state": checked,
        "represented_by_their_setup": c.evaluated - c.pruned - bound_out - c.simulated,
    }


def funnel_text(doc: dict) -> str:
    """The funnel in one line, as the CLI and the report print it."""
    f = doc["funnel"]
    return (
        f"{f['considered']} candidates considered: {f['do_not_fit']} do not fit, {f['ruled_out_by_bound']} ruled out "
        f"by the bound (cannot meet the SLO, or cannot cost less than the answer), {f['simulated']} "
        f"simulated (one replica's highest load, levels sized to steady state), {f['checked_at_steady_state']} "
        f"checked at steady state at the stated load; {f['represented_by_their_setup']} not simulated (another "
        f"engine setting of the same GPU, parallelism and dtypes stood for them)"
    )


def recommend(
    req: RecommendRequest, prices: dict[str, Price], *, workers: int = 1, progress=None, ray: str | None = None
) -> dict:
    """The search; returns recommend.json's document."""
    t0 = time.perf_counter()
    c = Counts()
    grid = req.grid()
    c.evaluated = len(grid)
    plans: dict[tuple, object] = {}
    reasons: list[str] = []
    ranked = []  # (lower-bound cost, index, knobs, bound, price)
    steady: dict[tuple, Bound | None] = {}
    for i, k in enumerate(grid):
        if k.plan_key not in plans:
            try:
                plan = planned(req.deployment_request(k))
                if plan.num_kv_blocks < 1:
                    raise KneecapError(f"{req.model} on {k.gpus_per_replica}x {k.gpu} leaves no KV pool")
                per_rank = plan.kv_capacity_tokens // plan.deployment.attention_dp
                if per_rank < req.context:
                    raise KneecapError(
                        f"{req.model} on {k.gpus_per_replica}x {k.gpu}: "
                        + ("each DP rank's KV pool" if k.dp_attention else "the KV pool")
                        + f" holds fewer tokens than one {req.context}-token sequence"
                    )
                plans[k.plan_key] = plan
            except KneecapError as exc:
                plans[k.plan_key] = exc
        plan = plans[k.plan_key]
        if isinstance(plan, KneecapError):
            c.pruned += 1
            msg = str(plan.args[0]) if plan.args else str(plan)
            c.prune_reasons[msg] = c.prune_reasons.get(msg, 0) + 1
            continue
        b = replica_bound(plan, k, req)
        if b.load > 0:  # the step-time model at the steady batch, where tighter (one engine per setup and limits)
            key = (k.plan_key, k.max_num_seqs)
            if key not in steady:
                steady[key] = steady_batch_bound(simulated(req, k), k, req)
            if steady[key] is not None and steady[key].load < b.load:
                b = steady[key]
        if b.load <= 0:
            c.infeasible += 1
            if len(reasons) < 1:
                reasons.append(f"{k.gpu} tp={k.tp} pp={k.pp} {k.weight_dtype}/{k.kv_dtype}: {b.why}")
            continue
        lb_replicas = max(1, math.ceil(req.load / b.load - 1e-9))
        if req.max_gpus is not None and lb_replicas * k.gpus_per_replica > req.max_gpus:
            c.over_gpu_limit += 1
            c.bound_over_gpu_limit += 1
            continue
        price = prices[k.gpu].usd_per_gpu_hour
        ranked.append((price * k.gpus_per_replica * lb_replicas, i, k, b, price))
    ranked.sort(key=lambda x: (x[0], x[1]))

    coarse = []  # (estimated cost, index, knobs, bound, price, max_load)
    runner = _Runner(workers, ray)
    state = {"best": math.inf}

    def simulate(items: list) -> None:
        """Coarse find_max over `items` in fixed batches, skipping what cannot beat the best (+ slack)."""
        pos = 0
        while pos < len(items):
            batch = []
            while pos < len(items) and len(batch) < BATCH:
                if items[pos][0] <= state["best"] * (1 + SLACK):
                    batch.append(items[pos])
                else:
                    c.skipped_by_bound += 1
                pos += 1
            if not batch:
                continue
            results = runner.map(_coarse, [(req, it[2], it[3].load) for it in batch])
            c.simulated += len(batch)
            for it, (value, failed_at, because, _n, at, levels) in zip(batch, results):
                if value is None:
                    if not reasons:
                        reasons.append(f"{it[2].gpu} tp={it[2].tp}: {because}")
                    continue
                n = max(1, math.ceil(req.load / value - 1e-9))
                if req.max_gpus is not None and n * it[2].gpus_per_replica > req.max_gpus:
                    c.over_gpu_limit += 1
                    continue
                est = it[4] * it[2].gpus_per_replica * n
                coarse.append((est, it[1], it[2], it[3], it[4], value, failed_at is None, n, at, levels))
                state["best"] = min(state["best"], est)
            if progress:
                progress(c.simulated, len(ranked))

    # stage 1: one representative per setup (the cheapest bound; ties: the preferred limits, then grid order)
    by_setup: dict[tuple, list] = {}
    for it in ranked:
        by_setup.setdefault(it[2].plan_key, []).append(it)
    reps = []
    for items in by_setup.values():
        items.sort(key=lambda x: (x[0], (x[2].max_num_seqs, x[2].max_num_batched_tokens) != PREFERRED_LIMITS, x[1]))
        reps.append(items[0])
    reps.sort(key=lambda x: (x[0], x[1]))
    # the cheapest setups without speculation, and as many at each K tried: the speculating ones (whose bound is the
    # roofline's, lower) never crowd out the setups a search without speculation would simulate
    chosen = sorted(
        (it for k in (0, *req.spec_token_choices) for it in [r for r in reps if r[2].spec == k][:MAX_REPRESENTATIVES]),
        key=lambda x: (x[0], x[1]),
    )
    simulate(chosen)
    # stage 2: the other engine limits of the best setup — first its other max_num_seqs (at the representative's
    # token budget), then its other token budgets at the best max_num_seqs so far
    done = {it[1] for it in chosen}
    order = sorted(coarse, key=lambda x: (x[0], x[1]))
    best_setups = []
    for it in order:
        if it[2].plan_key not in best_setups:
            best_setups.append(it[2].plan_key)
    for key in best_setups[:LIMIT_VARIANTS_FOR]:
        rep = next(it for it in order if it[2].plan_key == key)
        pc = rep[2].prefix_caching
        seqs = [
            it
            for it in by_setup[key]
            if it[1] not in done
            and it[2].max_num_batched_tokens == rep[2].max_num_batched_tokens
            and it[2].prefix_caching == pc
        ]
        simulate(seqs)
        done |= {it[1] for it in seqs}
        mine = sorted((it for it in coarse if it[2].plan_key == key), key=lambda x: (x[0], -x[5], x[1]))
        tokens = [
            it
            for it in by_setup[key]
            if it[1] not in done and it[2].max_num_seqs == mine[0][2].max_num_seqs and it[2].prefix_caching == pc
        ]
        simulate(tokens)
        done |= {it[1] for it in tokens}
        # then prefix caching the other way at the best limits so far
        mine = sorted((it for it in coarse if it[2].plan_key == key), key=lambda x: (x[0], -x[5], x[1]))
        b = mine[0][2]
        caching = [
            it
            for it in by_setup[key]
            if it[1] not in done
            and (it[2].max_num_seqs, it[2].max_num_batched_tokens) == (b.max_num_seqs, b.max_num_batched_tokens)
        ]
        simulate(caching)
        done |= {it[1] for it in caching}
    c.not_simulated = len(ranked) - c.simulated

    coarse.sort(key=lambda x: (x[0], x[1]))
    top, seen = [], set()  # the cheapest of each setup first (a frontier across GPUs), then the next cheapest
    for it in coarse:
        if it[2].plan_key not in seen and len(top) < REFINE:
            top.append(it)
            seen.add(it[2].plan_key)
    top += [it for it in coarse if it not in top][: REFINE - len(top)]
    top.sort(key=lambda x: (x[0], x[1]))
    sized = runner.map(_refine, [(req, it[2], it[5], it[9]) for it in top])
    cands, sized_keys = [], set()
    for it, s in zip(top, sized):
        if s.replicas is None:
            continue
        if req.max_gpus is not None and s.replicas * it[2].gpus_per_replica > req.max_gpus:
            continue
        cands.append(_candidate(req, it[2], it[4], plans[it[2].plan_key], it[5], s, it[3], it[6]))
        sized_keys.add(it[1])
    # stage 4 (rate loads): setups whose pools' bound may beat the cheapest aggregated candidate, as disaggregated
    # prefill and decode pools (the setup's best simulated engine limits, else its representative's)
    dis_top = (
        _disagg_setups(req, plans, by_setup, coarse, min((x["cost_per_hour"] for x in cands), default=math.inf), c)
        if req.kind == "rate"
        else []
    )
    dis = runner.map(_disagg, [(req, it[2], req.load) for it in dis_top])
    nodes = runner.nodes
    runner.close()
    dis_notes = []
    for it, ds in zip(dis_top, dis):
        k = it[2]
        if ds.pools is None:
            dis_notes.append(f"{k.gpu} tp={k.tp} pp={k.pp} ep={k.ep}: {ds.why or 'no pool sizes met the SLO'}")
            continue
        if req.max_gpus is not None and (ds.pools.prefill + ds.pools.decode) * k.gpus_per_replica > req.max_gpus:
            dis_notes.append(
                f"{k.gpu} tp={k.tp} pp={k.pp}: {ds.pools.prefill}P{ds.pools.decode}D needs more GPUs than allowed"
            )
            continue
        cands.append(_disagg_candidate(req, k, it[4], plans[k.plan_key], ds))
    if not cands:
        raise _no_candidate(req, c, reasons)
    cands.sort(
        key=lambda x: (x["cost_per_hour"], x["predicted"]["ttft_p99_ms"] or math.inf, x["disaggregated"] is not None)
    )
    # every simulated candidate is a point: the sized ones as checked, the others at their coarse level
    points = list(cands) + [
        _point(req, it[2], it[4], it[7], it[8], it[5])
        for it in sorted(coarse, key=lambda x: (x[0], x[1]))
        if it[1] not in sized_keys
        and it[8] is not None
        and (req.max_gpus is None or it[7] * it[2].gpus_per_replica <= req.max_gpus)
    ]
    points.sort(key=lambda x: (x["cost_per_hour"], x["predicted"]["ttft_p99_ms"] or math.inf, not x["sized"]))
    funnel = _funnel(c, ranked, coarse, cands[0]["cost_per_hour"], len(top))
    meeting = [x for x in points if x["meets_slo"]]
    frontier = pareto(
        meeting, ((lambda x: x["cost_per_mtok_output"], "min"), (lambda x: x["predicted"]["ttft_p99_ms"], "min"))
    )
    throughput = pareto(
        meeting, ((lambda x: x["output_tok_s_per_gpu"], "max"), (lambda x: x["output_tok_s_per_user"], "max"))
    )
    doc = {
        "model": req.model,
        "load": {"kind": req.kind, "value": req.load},
        "isl": req.isl,
        "osl": req.osl,
        "arrivals": req.arrivals,
        "burstiness": req.burstiness if req.kind == "rate" else None,
        "classes": None
        if req.mix is None
        else [
            {
                "name": c.name,
                "input": _length_doc(c.input, req, "input"),
                "output": _length_doc(c.output, req, "output"),
                "weight": c.weight,
            }
            for c in req.mix.classes
        ],
        "trace": None if req.trace is None else req.trace.summary(),
        "slo": dict(req.slo),
        "gpus": list(req.gpus),
        "router": {
            "policy": req.router,
            "shared_prefix_tokens": req.shared_prefix_tokens,
            "num_prefix_groups": req.num_prefix_groups,
            "sizing_check": "the whole load through the router over the candidate's replicas"
            if req.fleet_check
            else "one replica at its even share of the load (round-robin, no shared prefix)",
        },
        "speculative": None
        if req.spec is None
        else dict(
            _spec_doc(req.spec),
            tokens_tried=list(req.spec_token_choices),
            note=(
                "every candidate tried with and without it; the acceptance is an assumption (given, not measured): "
                "confirm it on the served model and traffic (vLLM /metrics: vllm:spec_decode_num_accepted_tokens)"
            ),
        ),
        "evaluated": c.evaluated,
        "pruned": c.pruned,
        "infeasible": c.infeasible,
        "over_gpu_limit": c.over_gpu_limit,
        "skipped_by_bound": c.skipped_by_bound,
        "simulated": c.simulated,
        "not_simulated": c.not_simulated,
        "sized": len(top),
        "disaggregated_tried": len(dis_top),
        "disaggregated_not_met": dis_notes,
        "disaggregated_bounded_out": c.disagg_bounded_out,
        "prune_reasons": c.prune_reasons,
        "funnel": funnel,
        "seconds": round(time.perf_counter() - t0, 3),
        "search": {
            "coarse_requests": [COARSE_REQUESTS, MAX_STEADY_REQUESTS],
            "fine_requests": FINE_REQUESTS,
            "steady_state": f"each level sized to {STEADY_FACTOR:g}x the requests in flight (Little's law), "
            "extended while transient; met only when stable",
            "batch": BATCH,
            "slack": SLACK,
            "representatives": len(chosen),
            "limit_variants_for": LIMIT_VARIANTS_FOR,
            "refined": REFINE,
            "engine": "vllm defaults (simulated)",
            "disaggregated_setups": DISAGG_SETUPS if req.kind == "rate" else 0,
            "disaggregated_rule": "setups whose pools' roofline cost bound is below the cheapest aggregated candidate"
            if req.kind == "rate"
            else "rate loads only",
            "dp_attention": "DP attention (ep = tp) for every tp > 1"
            if req.dp_attention and req.is_moe and req.is_mla
            else "not tried (MLA mixture-of-experts models only)",
            "expert_parallel": "ep = 1 and ep = tp for MoE models"
            if req.expert_parallel and req.is_moe
            else "ep = 1 (dense model)",
        },
        "ray": None
        if ray is None
        else {"address": ray, "nodes": nodes},  # where it ran (the answer does not depend on it)
        "prices": {
            g: {"usd_per_gpu_hour": prices[g].usd_per_gpu_hour, "source": prices[g].source, "date": prices[g].date}
            for g in req.gpus
        },
        "candidates": cands,
        "points": points,
        "frontier": frontier,
        "throughput_frontier": throughput,
        "best": cands[0],
    }
    mark(doc, None)  # quantized candidates behaviour_unchecked until a behaviour gate is given
    return doc


def _length_doc(d, req: RecommendRequest, which: str) -> dict:
    """A class length as recommend.json holds it; a trace's lengths are named by their file, not listed."""
    if req.trace is not None:
        from kneecap.recommend.trace import LENGTH_FILES

        return {"kind": "empirical", "file": LENGTH_FILES[which], "count": len(d.values)}
    return dataclasses.asdict(d)
