"""Typed summary.json: LevelSummary and SweepSummary (pydantic v2), what bench and simulate write, read back.

Owns the names and types of summary.json's keys as docs/summary.schema.json publishes them (docs/metrics.md
defines each): `SweepSummary.read(doc)` gives typed levels, distributions and steady-state verdicts, and
`to_dict()` gives back exactly the keys and values read (keys a model does not name are kept as extras, keys
absent stay absent, whole numbers stay whole). Pure; pydantic is imported only by the modules that read a
summary (report, calibrate), never by `kneecap plan`.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import BaseModel, ConfigDict

Number = Union[int, float]  # smart union: a whole number stays an int, so the written bytes do not change


class _Doc(BaseModel):
    """A summary.json object: the keys named below, typed; any other key kept as it was."""

    model_config = ConfigDict(extra="allow")

    def to_dict(self) -> dict:
        """The object as summary.json holds it: the keys read (or set), nothing added, under their document names."""
        return self.model_dump(mode="python", exclude_unset=True, by_alias=True)

    @classmethod
    def _validated(cls, doc: object, source: str, what: str, fix: str):
        """`doc` typed; one that is not `what` is a one-line error naming its first bad key, and `fix`."""
        from pydantic import ValidationError

        from kneecap.errors import KneecapError, path_text, validation_problem

        if not isinstance(doc, (dict, cls)):  # pydantic would say "Input should be a valid dictionary or instance"
            kind = {list: "list", str: "string", bool: "true/false", type(None): "null"}.get(type(doc), "number")
            raise KneecapError(f"{source} is not {what}: it holds a JSON {kind}, not an object", fix)
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            path, problem = validation_problem(exc.errors(), doc)
            raise KneecapError(f"{source} is not {what}: {path_text(path) or 'the document'}: {problem}", fix) from None


class Distribution(_Doc):
    """One metric over a level's completed requests (ms for latencies); all None with no samples."""

    mean: Number | None = None
    min: Number | None = None
    p50: Number | None = None
    p90: Number | None = None
    p95: Number | None = None
    p99: Number | None = None
    max: Number | None = None
    n: int = 0


class Stability(_Doc):
    """A level's steady-state verdict and its evidence (kneecap.metrics.stability)."""

    verdict: str | None = None  # stable | transient | over_capacity
    offered_rps: Number | None = None
    sent_rps: Number | None = None
    served_rps: Number | None = None
    offered_output_tok_s: Number | None = None
    output_tok_s: Number | None = None
    queue_trend: Number | None = None
    ttft_trend: Number | None = None
    in_flight_mean: Number | None = None
    window_requests: int | None = None
    client_behind: str | None = None
    rule: str | None = None


class SloBreach(_Doc):
    """One SLO term a level missed: its key, the limit, the level's value, in words."""

    key: str | None = None
    limit: Number | None = None
    value: Number | None = None
    message: str | None = None


class LevelSlo(_Doc):
    met: bool | None = None
    breaches: list[SloBreach | str] = []


class Goodput(_Doc):
    """A level's requests that met every per-request objective (--goodput), per second."""

    requests: int | None = None
    request_s: Number | None = None
    output_tok_s: Number | None = None
    fraction: Number | None = None


class ServerMetrics(_Doc):
    """What the server (or the simulated engine) counted over a level (summary.json `server_metrics`): KV usage as
    a fraction of blocks (older bench runs wrote a percentage), peak queue and batch, preemptions, prefix hits."""

    source: str | None = None  # simulator | prometheus | usage | none
    engine: str | None = None
    kv_usage_max: Number | None = None
    kv_usage_mean: Number | None = None
    running_max: Number | None = None
    running_mean: Number | None = None
    waiting_max: Number | None = None
    waiting_mean: Number | None = None
    preemptions: Number | None = None
    prefix_cache_hit_rate: Number | None = None
    num_kv_blocks: Number | None = None
    spec: dict[str, Any] | None = None


class SpecDecoding(_Doc):
    """Speculative decoding over a level, as the server's counters (or the simulated engine's draws) say."""

    draft_tokens: Number | None = None
    accepted_tokens: Number | None = None
    acceptance_rate: Number | None = None
    mean_accepted_length: Number | None = None  # tokens per step, the bonus token included
    method: str | None = None
    source: str | None = None


class LevelPreflight(_Doc):
    """The memory preflight's verdict on a concurrency level (bench): fits, tight or exceeds."""

    verdict: str | None = None
    concurrency: Number | None = None
    peak_tokens: Number | None = None
    steady_tokens: Number | None = None
    headroom_tokens: Number | None = None
    fix: dict[str, Any] | str | None = None  # how to make it fit (fp8 KV, shorter sequences, replicas)


class FindMaxProbe(_Doc):
    """A --find-max level: the load probed, its repetition, whether it met the SLO and why not."""

    load: Number | None = None
    repetition: int | None = None
    met: bool | None = None
    why: Any = None
    extended: bool | None = None  # a transient level run again with more requests: not the probe's answer


class LevelSummary(_Doc):
    """One sweep level: its load, counts, throughput and latency distributions, verdicts."""

    concurrency: int | str | None = None  # "max": every request at once (simulate)
    rate: Number | str | None = None
    level: int | None = None
    requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    duration_s: Number | None = None
    output_tok_s: Number | None = None
    input_tok_s: Number | None = None
    total_tok_s: Number | None = None
    request_s: Number | None = None
    ttft_ms: Distribution | None = None
    itl_ms: Distribution | None = None
    tpot_ms: Distribution | None = None
    e2e_ms: Distribution | None = None
    ttft_answer_ms: Distribution | None = None  # to the first answer token (after any reasoning)
    ttft_from_scheduled_ms: Distribution | None = None  # open loop: from when the request was due
    e2e_from_scheduled_ms: Distribution | None = None
    schedule_lag_ms: Distribution | None = None  # how late the client sent each request
    chunk_gap_ms: Distribution | None = None
    tokens_per_chunk: Distribution | None = None  # tokens, not ms
    errors: dict[str, int] | None = None
    timeouts: int | None = None
    server_metrics: ServerMetrics | None = None
    slo: LevelSlo | None = None
    stability: Stability | None = None
    spec: SpecDecoding | None = None
    preflight: LevelPreflight | str | None = None  # bench's memory verdict per concurrency level
    suspect: bool | str | dict[str, Any] | None = None  # the client lagged: True, or older runs' reason
    client: dict[str, Any] | None = None  # the client's self-measurement (lag, CPU; per_worker with --workers)
    find_max: FindMaxProbe | None = None
    input_tokens: int | None = None  # over completed measured requests
    output_tokens: int | None = None
    warmup_excluded: int | None = None  # warmup requests recorded and left out of the statistics
    partial: bool | None = None  # a level cut short (interrupted): not a complete level
    goodput: Goodput | None = None

    def load(self, kind: str):
        """The level's value on the sweep's dimension (`concurrency` or `rate`)."""
        return getattr(self, kind, None)

    def distribution(self, key: str) -> Distribution | None:
        """One of the level's distributions by its summary key ('ttft_ms', 'tokens_per_chunk', ...)."""
        value = getattr(self, key, None)
        return value if isinstance(value, Distribution) else None


class SweepFields(_Doc):
    """The sweep's request budget as given (summary.json `sweep`)."""

    seed: int | None = None
    requests: int | None = None
    duration_s: Number | None = None
    warmup: int | None = None
    burstiness: Number | None = None


class WorkloadFields(_Doc):
    """What the requests were (summary.json `workload`); lengths None where the data or the turns size them."""

    isl: int | None = None
    osl: int | None = None
    isl_dist: str | None = None
    osl_dist: str | None = None
    shared_prefix_tokens: int | None = None
    num_prefix_groups: int | None = None
    turns: int | None = None
    burstiness: Number | None = None
    dataset_requests: int | None = None  # requests drawn from --dataset
    replay_requests: int | None = None  # requests of a --replay trace


class DeploymentFields(_Doc):
    """The simulated deployment (summary.json `deployment`, simulate only)."""

    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    block_size: int | None = None


class ServerFields(_Doc):
    """What bench learnt of the server (summary.json `server`; strings left out with --redact)."""

    engine: str | None = None
    version: str | None = None
    model_id: str | None = None


class EngineFields(_Doc):
    """The simulated engine's scheduler settings (summary.json `engine`, simulate only)."""

    defaults: str | None = None  # whose defaults: vllm, sglang, trtllm


class Stopped(_Doc):
    """Why a sweep ended before its last level (a stop rule, the server gone, the key refused)."""

    at: Any = None  # the level's load, or its label
    reason: str | None = None
    detail: str | None = None


class Knee(_Doc):
    """Where throughput stopped paying for latency (kneecap.metrics.knee): the level's load and output rate."""

    concurrency: int | str | None = None
    rate: Number | None = None
    output_tok_s: Number | None = None
    rule: str | None = None
    kind: str | None = None  # saturation | collapse


class SkippedLevel(_Doc):
    """A planned level that did not run (e.g. preflight_exceeds), by its load and its index in the sweep."""

    concurrency: int | str | None = None
    rate: Number | None = None
    index: int | None = None
    reason: str | None = None


class SearchProbe(_Doc):
    """One evaluation of --find-max's search, in the order it ran."""

    load: Number | None = None
    repetition: int | None = None
    met: bool | None = None
    why: str | None = None


class MaxLoad(_Doc):
    """--find-max's answer (summary.json `max_load`): the highest load meeting every SLO, the next step up that
    failed and why, and every probe."""

    dimension: str | None = None  # concurrency | rate
    value: Number | None = None  # None: even the lowest load failed
    repeats: int | None = None
    failed_at: Number | None = None  # None: the highest load searched met every SLO
    failed_because: str | None = None
    answer: str | None = None
    last_met: Number | None = None
    first_failed: Number | None = None
    binding: str | None = None
    searched_up_to: Number | None = None
    probes: list[SearchProbe] = []


class SweepPreflight(_Doc):
    """bench's memory preflight of the sweep (summary.json `preflight`): the largest concurrency whose worst case
    fits the server's KV pool, and each level's verdict."""

    max_safe_concurrency: Number | None = None
    kv_capacity_tokens: Number | None = None
    block_size: int | None = None
    levels: list[LevelPreflight] | None = None


class PlanFields(_Doc):
    """The KV plan a simulated engine ran with (summary.json `plan`, simulate only)."""

    kv_capacity_tokens: Number | None = None
    num_kv_blocks: Number | None = None
    kv_layout: dict[str, Any] | None = None  # vLLM's KV cache groups (kneecap.plan.engines.VllmLayout)


class SweepSummary(_Doc):
    """A whole summary.json of `kneecap bench` or `kneecap simulate`."""

    kind: str | None = None
    status: str | None = None
    load: str | None = None  # concurrency | rate
    model_executed: bool | None = None
    benchmark_executed: bool | None = None
    manifest: str | dict[str, Any] | None = None
    levels: list[LevelSummary] = []
    skipped: list[SkippedLevel] | None = None
    knee: Knee | None = None
    stopped: Stopped | None = None
    slo: dict[str, Any] | None = None
    max_load: MaxLoad | None = None
    fleet: dict[str, Any] | None = None
    sweep: SweepFields | None = None
    workload: WorkloadFields | None = None
    deployment: DeploymentFields | None = None
    server: ServerFields | None = None
    engine: EngineFields | None = None
    seed: int | None = None
    preflight: SweepPreflight | None = None
    plan: PlanFields | None = None
    server_dead: bool | None = None  # the server stopped answering during the sweep

    @classmethod
    def read(cls, doc: object, source: str = "the summary") -> "SweepSummary":
        """A summary.json document, typed; one that is not one is a one-line error naming its first bad key."""
        return cls._validated(
            doc,
            source,
            "a kneecap summary.json",
            "pass the summary.json written by kneecap bench or simulate --out DIR",
        )
