"""Typed recommend.json (`kneecap recommend --out DIR`): RecommendDocument and its candidates, read back.

Owns the names and types of the keys kneecap.recommend writes: the load, workload (lengths, class mix or trace),
SLO and search funnel; each candidate deployment with its parallelism, dtypes, engine limits, replicas (or
disaggregated pools), KV plan, prediction at the load, binding SLO term, one-fewer-replica check and the commands
that confirm it; the Pareto frontiers and prices. `RecommendDocument.read(doc)` types a document and `to_dict()`
gives back exactly the keys and values read, as summary_model's objects do. Pure; pydantic is imported only by the
modules that read recommend.json (the recommend report), never by `kneecap plan`.
"""

from __future__ import annotations

from typing import Any

from kneecap.metrics.summary_model import Number, _Doc


class LoadFields(_Doc):
    """The load to carry: a request rate (req/s) or a number of concurrent streams."""

    kind: str | None = None  # rate | concurrency
    value: Number | None = None


class KvPlan(_Doc):
    """A candidate's KV plan, bytes per GPU."""

    kv_capacity_tokens: int | None = None
    num_kv_blocks: int | None = None
    weights_bytes_per_gpu: Number | None = None
    kv_pool_bytes_per_gpu: Number | None = None
    overhead_bytes_per_gpu: Number | None = None
    hbm_bytes_per_gpu: Number | None = None
    kv_bytes_per_token_per_gpu: Number | None = None
    context: int | None = None


class Prediction(_Doc):
    """The simulated engine's prediction at the candidate's share of the load (per replica, or per pool)."""

    ttft_p99_ms: Number | None = None
    tpot_p99_ms: Number | None = None
    tpot_p50_ms: Number | None = None
    output_tok_s: Number | None = None
    slo_values: dict[str, Number | None] | None = None  # {SLO key: predicted value}
    kv_usage_max: Number | None = None
    preemptions: Number | None = None
    prefix_cache_hit_rate: Number | None = None
    per_replica_load: Number | dict[str, Number] | None = None  # disaggregated: {pool: load per replica}


class SpecChoice(_Doc):
    """Speculative decoding as a candidate uses it (or as the search tried it): method, draft tokens, acceptance."""

    method: str | None = None
    tokens: int | None = None
    acceptance_assumed: list[Number] | None = None
    accepted_lengths_assumed: int | None = None
    expected_tokens_per_step: Number | None = None
    tokens_tried: list[int] | None = None
    note: str | None = None


class Disaggregated(_Doc):
    """A disaggregated candidate's prefill and decode pools and the KV transfer between them."""

    prefill_replicas: int | None = None
    decode_replicas: int | None = None
    prefill_gpus: int | None = None
    decode_gpus: int | None = None
    kv_link: str | None = None
    kv_transfer_ms: Number | None = None
    kv_link_note: str | None = None
    prefill_time_p99_ms: Number | None = None
    prefill_max_rate: Number | None = None
    decode_max_rate: Number | None = None
    one_fewer_prefill: dict[str, Any] | None = None
    one_fewer_decode: dict[str, Any] | None = None


class OneFewer(_Doc):
    """The same deployment with one replica fewer, at the whole load: met or why not."""

    replicas: int | None = None
    met: bool | None = None
    why: str | None = None


class Bound(_Doc):
    """The load bound (roofline or step-time model) that capped the candidate's search."""

    load: Number | None = None
    why: str | None = None


class ConfirmPools(_Doc):
    """The bench commands that confirm each pool of a disaggregated candidate on its own, and why each so."""

    prefill: str | None = None
    prefill_note: str | None = None
    decode: str | None = None
    decode_note: str | None = None


class Candidate(_Doc):
    """One deployment: where it runs, how it is set, what it costs and what the simulator predicts for it; a sized
    candidate (checked at the load) also carries its binding term, commands and plans."""

    gpu: str | None = None
    gpus_per_replica: int | None = None
    replicas: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    dp_attention: bool | None = None
    speculative: SpecChoice | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    disaggregated: Disaggregated | None = None
    total_gpus: int | None = None
    usd_per_gpu_hour: Number | None = None
    cost_per_hour: Number | None = None
    cost_per_mtok_output: Number | None = None
    predicted: Prediction | None = None
    meets_slo: bool | None = None
    output_tok_s_per_gpu: Number | None = None
    output_tok_s_per_user: Number | None = None
    max_load: Number | None = None
    sized: bool | None = None
    quantized_below_checkpoint: list[str] | None = None  # weights, kv
    needs_behaviour_gate: bool | None = None
    behaviour_unchecked: bool | None = None
    binding: str | None = None
    margin: Number | None = None
    one_fewer_replica: OneFewer | None = None
    max_load_at_least: bool | None = None
    bound: Bound | None = None
    plan: KvPlan | None = None
    serve_cmd: str | None = None
    confirm_cmd: str | None = None
    confirm_note: str | None = None
    confirm_pools: ConfirmPools | None = None
    run_plan: dict[str, str] | None = None  # {server | simulated | prefill | prefill-simulated: plan file}
    trust: str | None = None


class TraceFields(_Doc):
    """A --replay trace as the workload: its file, size, lengths and rate."""

    file: str | None = None
    speed: Number | None = None
    rows: int | None = None
    failed_rows_left_out: int | None = None
    mean_rate_recorded: Number | None = None
    rate: Number | None = None
    input_tokens_mean: Number | None = None
    input_tokens_p99: int | None = None
    output_tokens_mean: Number | None = None
    output_tokens_p99: int | None = None
    model: str | None = None


class RequestClassFields(_Doc):
    """One class of a --classes mix: its name, length distributions (as kneecap.workload writes them), weight."""

    name: str | None = None
    input: dict[str, Any] | None = None
    output: dict[str, Any] | None = None
    weight: Number | None = None


class RouterFields(_Doc):
    """How the sizing check spread the load over a candidate's replicas."""

    policy: str | None = None
    shared_prefix_tokens: int | None = None
    num_prefix_groups: int | None = None
    sizing_check: str | None = None


class SearchFields(_Doc):
    """The search's own settings, in words where they are rules."""

    coarse_requests: list[int] | None = None
    fine_requests: int | None = None
    steady_state: str | None = None
    batch: int | None = None
    slack: Number | None = None
    representatives: int | None = None
    limit_variants_for: int | None = None
    refined: int | None = None
    engine: str | None = None
    disaggregated_setups: int | None = None
    disaggregated_rule: str | None = None
    dp_attention: str | None = None
    expert_parallel: str | None = None


class Funnel(_Doc):
    """How many candidates each stage of the search kept."""

    considered: int | None = None
    do_not_fit: int | None = None
    ruled_out_by_bound: int | None = None
    simulated: int | None = None
    checked_at_steady_state: int | None = None
    represented_by_their_setup: int | None = None


class BehaviourGate(_Doc):
    """The behaviour cases (--behaviour-gate FILE) the run plans of quantized candidates check first."""

    file: str | None = None
    cases: list[str] = []


class UnpricedGpu(_Doc):
    gpu: str | None = None
    note: str | None = None


class Price(_Doc):
    usd_per_gpu_hour: Number | None = None
    source: str | None = None
    date: str | None = None


class RecommendDocument(_Doc):
    """A whole recommend.json."""

    model: str | None = None
    load: LoadFields | None = None
    isl: int | None = None
    osl: int | None = None
    arrivals: str | None = None
    burstiness: Number | None = None
    classes: list[RequestClassFields] | None = None
    trace: TraceFields | None = None
    slo: dict[str, Number] | None = None  # {SLO key: limit}
    gpus: list[str] | None = None
    router: RouterFields | None = None
    speculative: SpecChoice | None = None
    evaluated: int | None = None
    pruned: int | None = None
    infeasible: int | None = None
    over_gpu_limit: int | None = None
    skipped_by_bound: int | None = None
    simulated: int | None = None
    not_simulated: int | None = None
    sized: int | None = None
    disaggregated_tried: int | None = None
    disaggregated_not_met: list[Any] | None = None
    disaggregated_bounded_out: int | None = None
    prune_reasons: dict[str, Any] | None = None
    funnel: Funnel | None = None
    seconds: Number | None = None
    search: SearchFields | None = None
    ray: dict[str, Any] | None = None
    prices: dict[str, Price] | None = None  # {gpu: price}
    candidates: list[Candidate] = []
    points: list[Candidate] | None = None  # every simulated candidate (absent: the sized ones alone)
    frontier: list[Candidate] = []
    throughput_frontier: list[Candidate] | None = None
    best: Candidate | None = None
    behaviour_gate: BehaviourGate | None = None
    unpriced_gpus: list[UnpricedGpu] | None = None

    @classmethod
    def read(cls, doc: object, source: str = "recommend.json") -> "RecommendDocument":
        """A recommend.json document, typed; one that is not one is a one-line error naming its first bad key."""
        return cls._validated(
            doc, source, "a kneecap recommend.json", "pass the recommend.json written by kneecap recommend --out DIR"
        )
