"""A cheap upper bound on one replica's load under the SLO, from the plan and the GPU's datasheet peaks:
no simulated step is ever faster than reading the (active) weights and the prompts' KV at peak HBM
bandwidth, nor than its FLOPs at the GPU's highest peak; by Little's law a replica decoding B sequences
at TPOT t serves at most B / (osl x t) requests/s. Used only to skip candidates that cannot win.

With a class mix it uses the mix's weighted mean lengths, which makes it an estimate rather than a strict
bound. A speculating candidate keeps the expected 1 + a + ... + a^K tokens per decode step (its assumed acceptance),
so its decode steps per request are osl / that; its draft passes are left out (they only make it slower).
steady_batch_bound tightens it for rate loads of full-attention models with the simulated engine's own step-time
model at the candidate's steady batch. Owns the arithmetic; not the simulator (a test checks the simulated maximum
never exceeds either bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kneecap.plan.ledger import Plan
from kneecap.recommend.space import Knobs, RecommendRequest, slo_limits
from kneecap.units import MS_PER_S

# stats whose limit also bounds the mean (a level's mean is at most its p95 / p99 / max in practice)
_MEAN_BOUNDING = ("mean", "p95", "p99", "max")


@dataclass(frozen=True)
class Bound:
    load: float  # highest per-replica load (req/s or streams) that could meet the SLO; 0: none can
    why: str  # what limits it


def _limits_ms(slo: dict, metrics: tuple[str, ...], stats: tuple[str, ...] | None) -> float | None:
    return max(slo_limits(slo, metrics, stats).values(), default=None)


def replica_bound(plan: Plan, knobs: Knobs, req: RecommendRequest, *, pool: str | None = None) -> Bound:
    """pool None: an aggregated replica. pool "decode": a disaggregated decode replica (no prefill of its own:
    no TTFT check, no prompt FLOPs); "prefill": a prefill replica (the prompt's FLOPs only, one output token)."""
    d = plan.deployment
    gpu, model = d.gpu, d.model
    bw = gpu.hbm_bandwidth_bytes_s
    peak = max(f for f in (gpu.bf16_flops, gpu.fp8_flops, gpu.fp4_flops) if f)
    active = model.active_params
    frac = active / model.total_params if model.total_params else 1.0
    w_min = plan.ledger.weights_bytes * frac  # bytes every step must read on each GPU
    # under DP attention each GPU keeps (and reads) only its own 1/tp of the sequences' KV
    dp = d.attention_dp
    kv_tok = plan.kv_bytes_per_token_per_gpu / dp
    n = knobs.tp * knobs.pp
    spec = req.spec_for(knobs.spec)
    per_step = spec.expected_tokens_per_step if spec is not None else 1.0
    flops_tok = 2.0 * active / n  # per GPU, per token

    def t_round(b: float) -> float:
        return max((w_min + b * req.isl * kv_tok) / bw, b * flops_tok / peak)

    # every request's TTFT and TPOT are at least one step of itself
    any_ttft = _limits_ms(req.slo, ("ttft",), None)
    t_prefill = knobs.pp * max(2.0 * active * req.isl / (n * peak), w_min / bw)
    if pool != "decode" and any_ttft is not None and t_prefill * MS_PER_S > any_ttft:
        return Bound(
            0.0,
            f"one {req.isl}-token prefill takes at least {t_prefill * MS_PER_S:.0f} ms > TTFT limit {any_ttft:g} ms",
        )
    if pool == "prefill":
        return Bound(peak / (flops_tok * req.isl), "peak FLOPs of the prompts")
    any_tpot = _limits_ms(req.slo, ("tpot", "itl"), None)
    if any_tpot is not None and t_round(1) / per_step * MS_PER_S > any_tpot:
        return Bound(
            0.0,
            f"one decode step reads {w_min / 1e9:.1f} GB per GPU: at least {t_round(1) * MS_PER_S:.1f} ms "
            f"> TPOT limit {any_tpot:g} ms",
        )

    b_cap = min(
        knobs.max_num_seqs * knobs.pp, plan.kv_capacity_tokens // (req.isl + 1)
    )  # the replica's (every DP rank's)
    why = "KV pool / max_num_seqs"
    tpot = _limits_ms(req.slo, ("tpot", "itl"), _MEAN_BOUNDING)
    if tpot is not None:
        limit_s = tpot / MS_PER_S * per_step  # a step may take per_step x the TPOT limit
        b_tpot = min((limit_s * bw - w_min) / (req.isl * kv_tok) if kv_tok else math.inf, limit_s * peak / flops_tok)
        if b_tpot < b_cap:
            b_cap, why = b_tpot, "TPOT limit vs HBM bandwidth"
    if b_cap < 1:
        return Bound(0.0, "not one sequence fits the KV pool within the TPOT limit")
    rate_decode = b_cap * per_step / (req.osl * t_round(b_cap))
    rate_compute = peak / (flops_tok * (req.osl if pool == "decode" else req.isl + req.osl))
    rate = min(rate_decode, rate_compute)
    if rate_compute < rate_decode:
        why = "peak FLOPs"
    if req.kind == "rate":
        return Bound(rate, why)
    ttft = _limits_ms(req.slo, ("ttft",), _MEAN_BOUNDING)
    e2e = _limits_ms(req.slo, ("e2e",), _MEAN_BOUNDING)
    e2e_s = (
        e2e / MS_PER_S
        if e2e is not None
        else ((ttft + (req.osl - 1) * tpot) / MS_PER_S if ttft is not None and tpot is not None else None)
    )
    if e2e_s is None:
        return Bound(float(req.load), "no TTFT+TPOT or E2E limit to bound the streams")
    return Bound(float(max(1, math.floor(rate * e2e_s))), why + " (Little's law over the E2E limit)")


def steady_batch_bound(sim, knobs: Knobs, req: RecommendRequest) -> Bound | None:
    """A tighter bound for rate loads: capacity from the simulated engine's own step-time model at the candidate's
    steady batch. B sequences decoding together each take at least t(B), the model's step of B decodes at the
    shortest context a decode has (the prompt + 1: the least attention work), so a replica serves at most
    B / (osl x t(B)) requests/s; B is at most the engine's max_num_seqs (x pp), what the KV pool holds at that
    context, and what keeps t(B) within the TPOT limit. The best such B over powers of two and the largest allowed.
    None where the step model's inputs are not plain full attention (sliding windows, linear-attention state), for
    speculating candidates, a class mix or a closed loop: the roofline bound then stands alone."""
    if req.kind != "rate" or knobs.spec or req.mix is not None:
        return None
    d = sim.plan.deployment
    if set(d.model.layer_types) - {"full_attention", "mla"}:
        return None
    model = sim.steptime.for_engine(sim.config.profile)
    ctx = req.isl + 1

    def t(b: int) -> float:
        return model.seconds(b, b * ctx, 0.0, b * ctx, 0.0, b)

    b_cap = int(min(knobs.max_num_seqs * knobs.pp, sim.plan.kv_capacity_tokens // ctx))
    tpot = _limits_ms(req.slo, ("tpot", "itl"), _MEAN_BOUNDING)
    if tpot is not None:
        limit_s = tpot / MS_PER_S
        if b_cap < 1 or t(1) > limit_s:
            return Bound(0.0, f"one decode step of the step-time model takes {t(1) * MS_PER_S:.1f} ms > TPOT limit")
        lo, hi = 1, max(1, b_cap)  # the largest B whose step stays within the limit (t grows with B)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if t(mid) <= limit_s else (lo, mid - 1)
        b_cap = lo
    if b_cap < 1:
        return Bound(0.0, "not one sequence fits the KV pool")
    sizes = {b_cap} | {1 << i for i in range(b_cap.bit_length()) if (1 << i) <= b_cap}
    best = max(sizes, key=lambda b: b / t(b))
    return Bound(best / (req.osl * t(best)), f"step-time model: {best} decodes a step at {t(best) * MS_PER_S:.1f} ms")
