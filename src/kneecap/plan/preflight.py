"""Preflight: which concurrency levels of a planned sweep fit the KV pool (pure verdicts).

Owns the per-level verdict, what would make a failing level fit, and a Plan's capacity for a sequence length
(plan_capacity). Does not own reading a live server's capacity (the CLI) nor building the Plan (build.py).

Per level C with ISL input and OSL output tokens (the Qwen3.5-397B on 8x RTX PRO 6000 example: 1,573,854 tokens at 1000/1000):
    peak   = C x blocks(ISL + OSL) x block     every request at its longest at once (requests started together)
    steady = C x blocks(ISL + OSL/2) x block   requests spread over their lifetimes: on average half-way through decode
    verdict: "fits" if peak <= capacity; "tight" if only steady fits (expect preemption when requests start
    together); "exceeds" otherwise.  max_safe_concurrency = capacity // (blocks(ISL+OSL) x block).
That example: C=512 fits (peak 1,024,000), C=1024 tight, C=2048 exceeds, max safe 786.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kneecap.errors import KneecapError
from kneecap.model.kv import blocks_for


@dataclass(frozen=True)
class Remedy:
    """What would make a level fit, with numbers."""

    fp8_kv_fits: (
        bool | None
    )  # doubling the pool (fp8 KV instead of 16-bit) makes the peak fit; None if KV is already 8-bit
    max_seq_tokens: int  # longest ISL+OSL (whole blocks) whose peak fits at this C
    pool_multiple: float  # capacity needed / capacity
    replicas: int  # data-parallel replicas of this deployment that would hold it (each serving C / replicas)
    tp: int | None  # smallest swept TP whose pool holds the peak (when a plan is known)
    num_gpus: int | None  # GPUs for the fix above: replicas x GPUs per replica, or the TP option's GPU count
    text: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"pool_multiple": round(self.pool_multiple, 4)}


@dataclass(frozen=True)
class Level:
    concurrency: int
    peak_tokens: int
    steady_tokens: int
    verdict: str
    headroom_tokens: int  # capacity - peak (negative: short by that much)
    remedy: Remedy | None = None

    def to_json(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "peak_tokens": self.peak_tokens,
            "steady_tokens": self.steady_tokens,
            "verdict": self.verdict,
            "headroom_tokens": self.headroom_tokens,
            "fix": None if self.remedy is None else self.remedy.to_json(),
        }


@dataclass(frozen=True)
class Preflight:
    kv_capacity_tokens: int
    isl: int
    osl: int
    block_size: int
    levels: tuple[Level, ...]
    max_safe_concurrency: int
    source: str  # "--kv-tokens" | "plan" | the server URL
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "isl": self.isl,
            "osl": self.osl,
            "block_size": self.block_size,
            "source": self.source,
            "levels": [lv.to_json() for lv in self.levels],
            "max_safe_concurrency": self.max_safe_concurrency,
            "notes": list(self.notes),
        }


def _check(kv_capacity_tokens: int, isl: int, osl: int, concurrencies: list[int], block_size: int) -> None:
    for flag, value in (
        ("--kv-tokens", kv_capacity_tokens),
        ("--isl", isl),
        ("--osl", osl),
        ("--block-size", block_size),
    ):
        if not isinstance(value, int) or value <= 0:
            raise KneecapError(f"{flag} must be a positive whole number, got {value!r}", f"pass e.g. {flag} 1000")
    if not concurrencies:
        raise KneecapError("no concurrency levels", "pass e.g. --concurrency 64,128,256")
    for c in concurrencies:
        if not isinstance(c, int) or c <= 0:
            raise KneecapError(
                f"concurrency levels must be positive whole numbers, got {c!r}", "pass e.g. --concurrency 64,128,256"
            )


def effective_capacity_tokens(kv_pool_bytes: int, seq_bytes: int, tokens: int, block_size: int) -> int:
    """Tokens a pool holds when every sequence is `tokens` long: pool / seq_bytes x slots per sequence.

    For models whose per-sequence cost is not proportional to length (sliding windows, linear-attention
    state), the capacity in tokens depends on the length; this is it at `tokens`.
    """
    if seq_bytes <= 0:
        return 0
    return kv_pool_bytes * tokens_in_blocks(tokens, block_size) // seq_bytes


def tokens_in_blocks(tokens: int, block_size: int) -> int:
    """Token slots of whole blocks holding `tokens` tokens."""
    return blocks_for(tokens, block_size) * block_size


def longest_fitting(sequences_at, concurrency: int, block_size: int, limit: int) -> int:
    """The longest sequence (whole blocks, at most `limit` tokens) of which `concurrency` fit, inverting
    sequences_at (tokens -> sequences the pool holds, non-increasing in tokens); 0 if not even one block fits."""
    lo, hi = 0, max(1, limit // block_size)  # in blocks: sequences_at(lo blocks) >= C holds for lo (0: vacuously)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sequences_at(mid * block_size) >= concurrency:
            lo = mid
        else:
            hi = mid - 1
    return lo * block_size


def remedy(
    capacity: int,
    concurrency: int,
    isl: int,
    osl: int,
    block_size: int,
    *,
    kv_dtype_bytes: int | None = 2,
    gpus_per_replica: int | None = None,
    tp_capacities: list[tuple[int, int, int]] | None = None,
    sequences_at=None,
    fp8_sequences_at=None,
) -> Remedy:
    """What would make C concurrent ISL+OSL sequences fit a pool of `capacity` tokens.

    tp_capacities: (tp, num_gpus, kv_capacity_tokens) per swept TP degree, from a plan. sequences_at /
    fp8_sequences_at (tokens -> sequences; from a plan, kneecap.plan.ledger.sequences_at): the deployment's own count,
    which the longest ISL+OSL inverts and fp8 KV recomputes (a linear-attention state or a sliding window does not
    scale with the pool's tokens); without them the pool is tokens, every sequence its whole blocks.
    """
    peak = concurrency * tokens_in_blocks(isl + osl, block_size)
    if sequences_at is not None:
        per_seq = longest_fitting(sequences_at, concurrency, block_size, isl + osl)
    else:
        per_seq = (capacity // concurrency) // block_size * block_size
    multiple = peak / capacity
    replicas = -(-peak // capacity)
    fp8 = None if kv_dtype_bytes is not None and kv_dtype_bytes <= 1 else (peak <= 2 * capacity)
    if fp8 is not None and fp8_sequences_at is not None:
        fp8_seqs = fp8_sequences_at(isl + osl)
        fp8 = fp8_seqs >= concurrency
    tp, gpus = next(((t, n) for t, n, cap in tp_capacities or [] if cap >= peak), (None, None))
    parts = []
    if fp8 is not None and fp8_sequences_at is not None:
        now = (
            sequences_at(isl + osl) if sequences_at is not None else capacity // tokens_in_blocks(isl + osl, block_size)
        )
        parts.append(
            f"fp8 KV holds {fp8_seqs:,} sequences of {isl + osl:,} tokens instead of {now:,} "
            f"({'fits' if fp8 else 'still short'})"
        )
    elif fp8 is not None:
        parts.append(f"fp8 KV doubles the pool to {2 * capacity:,} tokens ({'fits' if fp8 else 'still short'})")
    parts.append(f"at C={concurrency} the longest ISL+OSL that fits is {per_seq:,} tokens")
    if tp is not None:
        parts.append(f"TP={tp} ({gpus} GPUs) holds the {peak:,}-token peak")
    rep_gpus = replicas * gpus_per_replica if gpus_per_replica else None
    parts.append(
        f"or {replicas} replicas of this deployment"
        + (f" ({rep_gpus} GPUs)" if rep_gpus else "")
        + f", each serving C={-(-concurrency // replicas)}"
    )
    return Remedy(fp8, per_seq, multiple, replicas, tp, gpus if tp is not None else rep_gpus, "; ".join(parts))


def preflight(
    kv_capacity_tokens: int,
    *,
    isl: int,
    osl: int,
    concurrencies: list[int],
    block_size: int = 16,
    kv_dtype_bytes: int | None = 2,
    gpus_per_replica: int | None = None,
    tp_capacities: list[tuple[int, int, int]] | None = None,
    source: str = "--kv-tokens",
    sequences_at=None,
    fp8_sequences_at=None,
) -> Preflight:
    """The verdict for each concurrency level against a pool of `kv_capacity_tokens` tokens."""
    _check(kv_capacity_tokens, isl, osl, concurrencies, block_size)
    per_seq_peak = tokens_in_blocks(isl + osl, block_size)
    per_seq_steady = tokens_in_blocks(isl + osl // 2, block_size)
    levels = []
    for c in concurrencies:
        peak, steady = c * per_seq_peak, c * per_seq_steady
        verdict = "fits" if peak <= kv_capacity_tokens else "tight" if steady <= kv_capacity_tokens else "exceeds"
        fix = (
            None
            if verdict == "fits"
            else remedy(
                kv_capacity_tokens,
                c,
                isl,
                osl,
                block_size,
                kv_dtype_bytes=kv_dtype_bytes,
                gpus_per_replica=gpus_per_replica,
                tp_capacities=tp_capacities,
                sequences_at=sequences_at,
                fp8_sequences_at=fp8_sequences_at,
            )
        )
        levels.append(Level(c, peak, steady, verdict, kv_capacity_tokens - peak, fix))
    max_safe = kv_capacity_tokens // per_seq_peak
    notes = (f"not even one {isl}+{osl}-token sequence fits {kv_capacity_tokens:,} tokens",) if max_safe == 0 else ()
    return Preflight(kv_capacity_tokens, isl, osl, block_size, tuple(levels), max_safe, source, notes)


def uniform_layers(model) -> bool:
    """Every layer full attention (or every layer MLA): a sequence's KV is proportional to its length."""
    kinds = set(model.layer_types)
    return kinds <= {"full_attention"} or kinds <= {"mla"}


def pool_capacity_tokens(
    plan, *, tp: int, kv_pool_bytes: int, kv_bytes_per_token_per_gpu: int, tokens: int, block_size: int
) -> int:
    """Tokens a pool of kv_pool_bytes per GPU holds at `tp` when every sequence is `tokens` long: whole blocks of
    the pool, as the ledger counts them, for uniform layers; a plan counted in vLLM's KV cache groups, whole requests
    of `tokens` in the groups' blocks at that TP; else (a pool holding the attention KV alone) the pool over one
    sequence's bytes at that length."""
    from kneecap.model.kv import sequence_kv_bytes_per_gpu, state_bytes_per_sequence

    d = plan.deployment
    if uniform_layers(d.model):
        per_token = kv_bytes_per_token_per_gpu
        return (kv_pool_bytes // (per_token * block_size)) * block_size if per_token else 0
    if plan.kv_groups is not None:
        from kneecap.plan.engines import model_layout

        g = plan.kv_groups
        dp = tp if d.dp_attention else 1  # DP attention: a pool per rank, whole heads each
        layout = model_layout(
            d.model,
            tp=1 if d.dp_attention else tp,
            pp=d.pp,
            kv_dtype=d.kv_dtype,
            block_size=d.block_size,
            prefix_caching=g.prefix_caching,
            version=g.version,
        )
        return groups_capacity_tokens(layout, dp * (kv_pool_bytes // layout.block_bytes), tokens)
    seq = sequence_kv_bytes_per_gpu(d.model, tokens, plan.kv_dtype_bytes, tp, d.pp, block_size, paged=True)
    if plan.state_apart:  # the pool holds the attention KV alone (SGLang's Mamba state pool is apart)
        seq -= state_bytes_per_sequence(d.model, tp, d.pp)
    return effective_capacity_tokens(kv_pool_bytes, seq, tokens, block_size)


def groups_capacity_tokens(layout, num_blocks: int, tokens: int) -> int:
    """Token slots of the whole requests of `tokens` tokens that num_blocks blocks of vLLM's KV cache groups hold."""
    per_request = layout.blocks_per_request(tokens)
    return num_blocks * blocks_for(tokens, layout.block_size) * layout.block_size // per_request if per_request else 0


@dataclass(frozen=True)
class PlanCapacity:
    """What preflight checks a planned deployment against, for sequences of `tokens` tokens."""

    kv_capacity_tokens: int
    block_size: int  # the block the capacity is counted in (vLLM's grown block for linear-attention hybrids)
    uniform: bool  # False: the capacity holds only at this sequence length
    tp_capacities: list[tuple[int, int, int]]  # (tp, GPUs, capacity tokens) of the larger TPs that fit


def plan_capacity(plan, engine_pool, tokens: int) -> PlanCapacity:
    """The KV capacity of a Plan (kneecap.plan.build.plan_deployment's plan and engine pool) when every sequence
    holds `tokens` tokens: an engine's own pool when the engine mode counts it (SGLang keeps linear state in a pool
    of its own; vLLM's hybrid layer groups hold whole requests of `tokens` in their blocks), else the ledger's, in
    the same KV cache groups as the plan when it has them."""
    from kneecap.plan.sweeps import tp_sweep

    d = plan.deployment
    bs = d.block_size
    uniform = uniform_layers(d.model)
    if engine_pool and (uniform or engine_pool.engine == "sglang"):
        capacity = engine_pool.kv_capacity_tokens
    elif engine_pool:  # vLLM hybrid: blocks per request of `tokens` across its layer groups
        from kneecap.plan.engines import vllm_layout

        layout = vllm_layout(d, engine_pool.prefix_caching, engine_pool.version)
        bs = layout.block_size
        capacity = groups_capacity_tokens(layout, engine_pool.num_blocks, tokens)
    elif plan.kv_groups is not None:  # the ledger's pool in vLLM's KV cache groups, as `kneecap plan` counts it
        bs = plan.kv_groups.block_size
        capacity = groups_capacity_tokens(plan.kv_groups, plan.num_kv_blocks, tokens)
    else:
        capacity = pool_capacity_tokens(
            plan,
            tp=d.tp,
            kv_pool_bytes=plan.ledger.kv_pool_bytes,
            kv_bytes_per_token_per_gpu=plan.kv_bytes_per_token_per_gpu,
            tokens=tokens,
            block_size=bs,
        )
    tp_caps = [
        (
            p.tp,
            p.num_gpus,
            pool_capacity_tokens(
                plan,
                tp=p.tp,
                kv_pool_bytes=p.kv_pool_bytes,
                kv_bytes_per_token_per_gpu=p.kv_bytes_per_token_per_gpu,
                tokens=tokens,
                block_size=bs,
            ),
        )
        for p in tp_sweep(plan)
        if p.fits and p.tp > d.tp
    ]
    return PlanCapacity(capacity, bs, uniform, tp_caps)
