"""Sweeps: the plan across TP degrees (with the KV-replication trap) and across advertised contexts.

Owns which points are swept and what each reports. The arithmetic is the ledger's (ledger.py) and
the KV formula's (kneecap.model.kv). The worked example: TP 1/8/16 -> 67/1912/2010 sequences (TP=16
replicates the 8 KV heads: 5% more for twice the GPUs); 128k context -> 1 contiguous vs 67 paged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.model import kv as kvmath
from kneecap.plan.ledger import Plan, kv_layout, rebuild, sequences_at

CONTEXT_POINTS = (4096, 8192, 32768, 131072)
MAX_SWEEP_TP = 64


@dataclass(frozen=True)
class TpPoint:
    tp: int
    num_gpus: int
    kv_heads_per_gpu: int
    replicated: bool
    fits: bool  # weights + overhead fit in HBM at this TP
    kv_pool_bytes: int
    kv_bytes_per_token_per_gpu: int
    max_seqs: int  # paged, at the plan's mean context
    gain: float | None  # max_seqs over the previous fitting point

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"gain": None if self.gain is None else round(self.gain, 4)}


@dataclass(frozen=True)
class ContextPoint:
    context: int
    seq_bytes_contiguous: int
    contiguous: int  # sequences that fit reserving `context` tokens each
    paged: int  # sequences that fit at the mean context (capped at `context`), whole blocks
    model_max: bool = False  # the model's advertised maximum (max_position_embeddings)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def sweep_tps(plan: Plan) -> list[int]:
    """Powers of two up to 2x the KV heads (at least 8, at most 64), plus the plan's own TP."""
    m = plan.deployment.model
    top = min(max(2 * m.num_key_value_heads, 8), MAX_SWEEP_TP)
    return sorted({1 << i for i in range(0, 13) if (1 << i) <= top} | {plan.deployment.tp})


def tp_sweep(plan: Plan) -> list[TpPoint]:
    """The plan at each TP degree of sweep_tps (skipping degrees that do not split the heads)."""
    if plan.pool_source == "override":
        return []  # a logged pool says nothing about other layouts
    d = plan.deployment
    points: list[TpPoint] = []
    previous: int | None = None
    for tp in sweep_tps(plan):
        try:
            kvmath.check_tp(d.model, tp)
        except KneecapError:
            continue
        new = dataclasses.replace(d, tp=tp)
        try:
            p = rebuild(plan, new)
        except KneecapError:
            heads, replicated = kv_layout(new)
            points.append(TpPoint(tp, tp * d.pp, heads, replicated, False, 0, 0, 0, None))
            continue
        gain = p.max_seqs_paged / previous if previous else None
        points.append(
            TpPoint(
                tp,
                p.deployment.num_gpus,
                p.kv_heads_per_gpu,
                p.kv_replicated,
                True,
                p.ledger.kv_pool_bytes,
                p.kv_bytes_per_token_per_gpu,
                p.max_seqs_paged,
                gain,
            )
        )
        previous = p.max_seqs_paged or None
    return points


def context_points(plan: Plan) -> list[int]:
    """4k, 8k, 32k, 128k up to the model's advertised maximum, that maximum, and the plan's --context."""
    top = plan.deployment.model.max_position_embeddings
    return sorted({c for c in CONTEXT_POINTS if not top or c <= top} | {plan.context} | ({top} if top else set()))


def context_sweep(plan: Plan) -> list[ContextPoint]:
    """Contiguous vs paged sequences as the advertised context grows (the pool does not change)."""
    d = plan.deployment
    dtype_bytes, pool = plan.kv_dtype_bytes, plan.ledger.kv_pool_bytes
    out = []
    for ctx in context_points(plan):
        contig = kvmath.sequence_kv_bytes_per_gpu(d.model, ctx, dtype_bytes, d.tp, d.pp, d.block_size, paged=False)
        paged = sequences_at(plan, min(plan.mean_context, ctx))  # the count section 3 and preflight use
        out.append(
            ContextPoint(ctx, contig, pool // contig if contig else 0, paged, ctx == d.model.max_position_embeddings)
        )
    return out


def paged_below_contiguous(plan: Plan, points: list[ContextPoint]) -> str | None:
    """Why paged allocation holds fewer sequences than contiguous at some context, when it does.

    Only sliding-window layers cause it (kneecap.model.kv): contiguous keeps exactly the window, while a
    paged window straddles a block boundary and keeps one block more.
    """
    low = [p.context for p in points if p.paged < p.contiguous]
    m = plan.deployment.model
    if not low:
        return None
    where = ", ".join(f"{c:,}" for c in low)
    if "sliding_attention" in m.layer_types and m.sliding_window:
        bs = plan.block_size
        blocks = kvmath.blocks_for(m.sliding_window, bs) + 1
        return (
            f"paged holds fewer than contiguous at {where} tokens: a sliding-window layer's {m.sliding_window:,}-token "
            f"window straddles a block boundary, so paging keeps {blocks} blocks ({blocks * bs:,} slots) per sliding "
            f"layer where a contiguous buffer keeps exactly {m.sliding_window:,}"
        )
    return f"paged holds fewer than contiguous at {where} tokens: a paged sequence rounds up to whole blocks"
