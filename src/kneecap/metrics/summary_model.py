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
        """The object as summary.json holds it: the keys read (or set), nothing added."""
        return self.model_dump(mode="python", exclude_unset=True)


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


class LevelSlo(_Doc):
    met: bool | None = None
    breaches: list = []


class Goodput(_Doc):
    """A level's requests that met every per-request objective (--goodput), per second."""

    requests: int | None = None
    request_s: Number | None = None
    output_tok_s: Number | None = None
    fraction: Number | None = None


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
    errors: dict[str, int] | None = None
    server_metrics: dict[str, Any] | None = None
    slo: LevelSlo | None = None
    stability: Stability | None = None
    spec: dict[str, Any] | None = None
    input_tokens: int | None = None  # over completed measured requests
    output_tokens: int | None = None
    warmup_excluded: int | None = None  # warmup requests recorded and left out of the statistics
    partial: bool | None = None  # a level cut short (interrupted): not a complete level
    goodput: Goodput | None = None

    def load(self, kind: str):
        """The level's value on the sweep's dimension (`concurrency` or `rate`)."""
        return getattr(self, kind, None)


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


class SweepSummary(_Doc):
    """A whole summary.json of `kneecap bench` or `kneecap simulate`."""

    kind: str | None = None
    status: str | None = None
    load: str | None = None  # concurrency | rate
    model_executed: bool | None = None
    benchmark_executed: bool | None = None
    manifest: str | dict[str, Any] | None = None
    levels: list[LevelSummary] = []
    skipped: list[dict[str, Any]] | None = None
    knee: dict[str, Any] | None = None
    stopped: Stopped | None = None
    slo: dict[str, Any] | None = None
    max_load: dict[str, Any] | None = None
    fleet: dict[str, Any] | None = None
    sweep: SweepFields | None = None
    workload: WorkloadFields | None = None
    deployment: DeploymentFields | None = None
    server: ServerFields | None = None
    engine: EngineFields | None = None
    seed: int | None = None

    @classmethod
    def read(cls, doc: object, source: str = "the summary") -> "SweepSummary":
        """A summary.json document, typed; one that is not one is a one-line error naming its first bad key."""
        from pydantic import ValidationError

        from kneecap.errors import KneecapError

        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the document"
            raise KneecapError(
                f"{source} is not a kneecap summary.json: {where}: {first['msg']}",
                "pass the summary.json written by kneecap bench or simulate --out DIR",
            ) from None
