"""Levers: each one is the ledger re-run on a changed Deployment, reported as pool and sequences.

Owns the list of levers (fp8 weights, fp8 KV, both, more GPUs, prefix sharing) and what each buys
over the base plan. Does not own the arithmetic (ledger.py) or the TP/context sweeps (sweeps.py).
The worked example (gqa-70b on one MI300X): fp8 weights 67 -> 165 (pool 104.14 GiB), fp8 KV 134, both 330, TP=8 1912.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.model import kv as kvmath
from kneecap.model.weights import weight_bits
from kneecap.plan.ledger import Plan, rebuild


@dataclass(frozen=True)
class Lever:
    """What one change buys: the KV pool per GPU and the paged sequences that fit."""

    name: str
    change: str  # the flags that make it, e.g. "--weight-dtype fp8"
    kv_pool_bytes: int
    max_seqs: int  # paged, at the plan's mean context
    max_concurrency: int  # min(max_seqs, compute cap)
    num_gpus: int
    gain: float  # max_seqs / the base plan's paged max_seqs
    note: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"gain": round(self.gain, 4)}


def _lever(name: str, change: str, plan: Plan, base: Plan, note: str = "") -> Lever:
    gain = plan.max_seqs_paged / base.max_seqs_paged if base.max_seqs_paged else float(plan.max_seqs_paged > 0)
    return Lever(
        name,
        change,
        plan.ledger.kv_pool_bytes,
        plan.max_seqs_paged,
        plan.max_concurrency,
        plan.deployment.num_gpus,
        gain,
        note,
    )


NODE_GPUS = 8  # GPUs in one HGX / DGX / MI300X-platform node: tensor parallelism beyond it crosses nodes


def more_gpus_tp(plan: Plan) -> int | None:
    """The TP degree the 'more GPUs' lever uses: up to one KV head per rank (where the KV stops shrinking), else
    double, within one node (TP x PP <= NODE_GPUS) and splitting the model's heads; None if there is none."""
    m, d = plan.deployment.model, plan.deployment
    node_tp = NODE_GPUS // d.pp
    heads = m.num_key_value_heads if d.tp < m.num_key_value_heads and "mla" not in m.layer_types else 0
    target = min(heads, node_tp) if heads else d.tp * 2
    while d.tp < target <= node_tp:
        try:
            kvmath.check_tp(m, target)
            return target
        except KneecapError:
            target *= 2
    return None


def prefix_sharing(plan: Plan, prefix_tokens: int) -> Lever:
    """Sequences that fit when every request shares a `prefix_tokens` prompt prefix.

    Only whole blocks are shared (as vLLM's and SGLang's prefix caches share them): the shared
    blocks are stored once, and each sequence pays for its own blocks beyond them.
    """
    if prefix_tokens < 0 or prefix_tokens > plan.mean_context:
        raise KneecapError(
            f"--prefix-tokens {prefix_tokens} must be between 0 and --mean-context {plan.mean_context}",
            "pass the shared system-prompt length in tokens",
        )
    shared_bytes = (prefix_tokens // plan.block_size) * plan.block_size * plan.kv_bytes_per_token_per_gpu
    per_seq = plan.seq_bytes_paged - shared_bytes
    pool = plan.ledger.kv_pool_bytes
    seqs = (pool - shared_bytes) // per_seq if per_seq > 0 and pool > shared_bytes else 0
    cap = plan.compute_batch_cap
    gain = seqs / plan.max_seqs_paged if plan.max_seqs_paged else float(seqs > 0)
    return Lever(
        "prefix-sharing",
        f"--prefix-tokens {prefix_tokens}",
        pool,
        seqs,
        min(seqs, cap) if cap is not None else seqs,
        plan.deployment.num_gpus,
        gain,
        f"{prefix_tokens // plan.block_size} shared blocks stored once",
    )


def skipped_levers(plan: Plan) -> list[str]:
    """Why a lever is not offered: its flag would not give what the lever promises (e.g. --weight-dtype fp8
    on 4-bit weights upcasts them, so the pool shrinks)."""
    d = plan.deployment
    out = []
    if plan.pool_source != "override" and weight_bits(d.weight_dtype) <= 8:
        bits = weight_bits(d.weight_dtype)
        out.append(
            f"fp8 weights: the weights are already {d.weight_dtype} ({bits:g}-bit)"
            + ("; --weight-dtype fp8 would upcast them and shrink the pool" if bits < 8 else "")
        )
    if plan.kv_dtype_bytes <= 1:
        out.append(f"fp8 KV: the KV cache is already {d.kv_dtype}")
    return out


def compute_levers(plan: Plan, *, prefix_tokens: int | None = None) -> list[Lever]:
    """Every lever that applies to `plan`, in the worked example's order of leverage.

    A lever is offered only when its `change` flags, added to the plan's own, give exactly its row:
    fp8 weights only for weights wider than 8 bits, fp8 KV only for a KV cache wider than 1 byte.
    """
    d = plan.deployment
    override = plan.pool_source == "override"
    levers: list[Lever] = []
    fp8_w = weight_bits(d.weight_dtype) > 8 and not override  # a logged pool: weight changes are unknowable
    fp8_kv = plan.kv_dtype_bytes > 1

    def variant(weights_fp8: bool, kv_fp8: bool) -> Plan:
        new = dataclasses.replace(
            d, weight_dtype="fp8" if weights_fp8 else d.weight_dtype, kv_dtype="fp8" if kv_fp8 else d.kv_dtype
        )
        if kv_fp8 and plan.fp8_kv_block_size:  # the engine's block for an fp8 cache (vLLM's MLA backends)
            new = dataclasses.replace(new, block_size=plan.fp8_kv_block_size)
        if override:  # a logged pool: KV dtype changes what it holds
            return rebuild(plan, new, kv_pool_bytes=plan.ledger.kv_pool_bytes)
        return rebuild(plan, new, keep_weights=not weights_fp8)

    if fp8_w:
        levers.append(_lever("fp8-weights", "--weight-dtype fp8", variant(True, False), plan))
    if fp8_kv:
        levers.append(
            _lever(
                "fp8-kv",
                "--kv-dtype fp8",
                variant(False, True),
                plan,
                "an accuracy decision: gate it on a task-level eval",
            )
        )
    if fp8_w and fp8_kv:
        levers.append(_lever("fp8-weights+fp8-kv", "--weight-dtype fp8 --kv-dtype fp8", variant(True, True), plan))
    if not override:
        tp = more_gpus_tp(plan)
        if tp is not None:
            try:
                bigger = rebuild(plan, dataclasses.replace(d, tp=tp))
                binds = {"hbm": "HBM", "compute": "the compute cap"}
                what = (
                    f"{binds[bigger.binding]} binds instead of {binds[plan.binding]}"
                    if bigger.binding != plan.binding
                    else f"{binds[bigger.binding]} still binds"
                )
                levers.append(
                    _lever("more-gpus", f"--tp {tp}", bigger, plan, f"{tp * d.pp} GPUs instead of {d.num_gpus}; {what}")
                )
            except KneecapError:
                pass
    if prefix_tokens:
        levers.append(prefix_sharing(plan, prefix_tokens))
    return levers
