"""Typed results document of a load plan (`kneecap run`'s summary.json): RunDocument and its parts, read back.

Owns the names and types of the keys kneecap.loadplan writes for a run: its cells (one sweep level each, with the
cell's verdict, Little's-law check and offered load), the capacity region per candidate, class and state, the
candidates with their gates and cost, the handoff, the identities and the worksheet (classes, budgets, settings).
A cell's `metrics` is a LevelSummary (kneecap.metrics.summary_model). `RunDocument.read(doc)` types a document and
`to_dict()` gives back exactly the keys and values read, as summary_model's objects do. Pure; pydantic is imported
only by the modules that read a run's document (report), never by `kneecap plan`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from kneecap.metrics.summary_model import Distribution, Knee, LevelSummary, Number, Stopped, _Doc


class _KeywordDoc(_Doc):
    """A document object with a key that is a Python keyword ('class'): read and written by its document name."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class LittleCheck(_Doc):
    """L = lambda x W on a cell's interval, checked only where the interval is stable (kneecap.loadplan.capacity)."""

    stable: bool | None = None
    applied: bool | None = None
    rate_halves_diff: Number | None = None
    in_flight_halves_diff: Number | None = None
    arrival_rate_s: Number | None = None
    mean_time_in_system_s: Number | None = None
    L_observed: Number | None = None
    L_predicted: Number | None = None
    relative_error: Number | None = None
    consistent: bool | None = None
    reason: str | None = None  # why it was not checked (too few completed requests)


class OfferedLoad(_Doc):
    """The rate a cell's requests were sent at, its nominal step (rate cells), completions per s and drops."""

    offered_request_s: Number | None = None
    nominal_request_s: Number | None = None
    completed_request_s: Number | None = None
    dropped: int | None = None


class RunCell(_KeywordDoc):
    """One cell of the run: a candidate, class, state and load step, one repetition, its verdict and what it
    measured (`metrics`, a sweep level); a cell above a ramp's stop is `not_run` with no metrics."""

    index: int | None = None
    candidate: str | None = None
    class_name: str | None = Field(None, alias="class")
    state: str | None = None
    load: dict[str, Number | str] | None = None  # {dimension: step}
    concurrency: Number | None = None  # older documents: the load as its own key
    rate: Number | None = None
    repetition: int | None = None
    verdict: str | None = None  # pass | slo_breach | limit | not_run
    breaches: list[Any] = []
    limit: Any = None
    metrics: LevelSummary | None = None
    state_reached: str | None = None
    little: LittleCheck | None = None
    observed: dict[str, Any] | None = None
    offered: OfferedLoad | None = None
    records: str | None = None
    reason: str | None = None
    halted: str | None = None  # the run stopped in this cell (the server gone, the key refused)

    def reasons(self) -> list[str]:
        """The declared limit it crossed, then each SLO breach, as the run wrote them."""
        return ([str(self.limit)] if self.limit else []) + [str(b) for b in self.breaches]


class CapacityFailure(_Doc):
    """One failing repetition of a load step: its verdict and reasons."""

    repetition: int | None = None
    verdict: str | None = None
    reasons: list[str] = []


class AtCapacity(_Doc):
    """The worst repetition's latencies (ms) and output rate at the capacity step."""

    ttft_ms: Distribution | None = None
    itl_ms: Distribution | None = None
    tpot_ms: Distribution | None = None
    e2e_ms: Distribution | None = None
    output_tok_s: Number | None = None


class CapacityInfo(_Doc):
    """The capacity region of one candidate, class and state: the loads passing every repetition, the capacity
    (the highest load such that it and every lower step passed), the failing loads and why."""

    dimension: str | None = None  # concurrency | rate
    region: list[Number | str] = []
    capacity: Number | None = None
    failed: dict[str, list[str]] = {}  # {load: reasons}
    failures: dict[str, list[CapacityFailure]] | None = None  # {load: each failing repetition}
    repetitions: int | None = None
    highest_load: Number | None = None
    at_capacity: AtCapacity | None = None
    offered_at_capacity: Number | None = None  # rate: the lowest rate a repetition of the capacity step sent at
    capacity_shown: Number | None = None


Capacity = dict[str, dict[str, dict[str, CapacityInfo]]]  # {candidate: {class: {state: region}}}


class BehaviourResult(_Doc):
    """One behaviour case replayed on a candidate: executed or not (a simulator runs no model), passed, why."""

    case: str | None = None
    executed: bool | None = None
    passed: bool | None = None
    detail: str | None = None
    answer: str | None = None


class CandidateCost(_Doc):
    """Cost at the capacity found: self-hosted ($/GPU-hour x GPUs) or managed ($ per million tokens)."""

    basis: str | None = None  # self-hosted | managed
    usd_per_gpu_hour: Number | None = None
    num_gpus: int | None = None
    output_tok_s_at_capacity: Number | None = None
    usd_per_million_input_tokens: Number | None = None
    usd_per_million_output_tokens: Number | None = None

    def declared_prices(self) -> list[tuple[str, Number]]:
        """The per-unit prices as declared (usd_per_*), the derived $ per million output tokens left out."""
        return [
            (k, v)
            for k, v in self.to_dict().items()
            if k.startswith("usd_per") and k != "usd_per_million_output_tokens"
        ]


class CandidateResult(_Doc):
    """A candidate's outcome: the behaviour gate, then the SLO gate on its capacity region, cost, peak output."""

    name: str | None = None
    target: str | None = None  # simulator | server
    routing: str | None = None
    model_executed: bool | None = None
    benchmark_executed: bool | None = None
    behaviour: list[BehaviourResult] | None = None
    verdict: str | None = None  # accepted | rejected | not judged
    gate: str | None = None  # behaviour | slo: the gate it failed
    reason: str | None = None
    capacity: dict[str, dict[str, CapacityInfo]] | None = None  # {class: {state: region}}
    cost: dict[str, CandidateCost | None] | None = None  # {class: cost}
    peak_output_tok_s: Number | None = None


class Identity(_Doc):
    """What a candidate was: a simulated deployment (with its KV plan) or a server (as far as it said)."""

    kind: str | None = None  # simulator | server
    plan: dict[str, Any] | None = None  # a `kneecap plan --json` document
    redacted: bool | None = None


class LengthDist(_Doc):
    """A class's input or output length distribution, in tokens (kneecap.loadplan.schema.LengthSpec)."""

    kind: str | None = None  # fixed | uniform | normal | lognormal | empirical
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: Number | None = None
    std: Number | None = None
    values: list[int] | None = None
    file: str | None = None
    min: int | None = None
    max: int | None = None


class ClassFields(_Doc):
    """One workload class as the plan declared it."""

    input: LengthDist | int | str | None = None
    output: LengthDist | int | str | None = None
    weight: Number | None = None
    shared_prefix_tokens: int | None = None
    prefix_groups: int | None = None


class SloBudget(_Doc):
    """One class's SLO budget: latency percentiles in ms and the tolerated error rate (0..1), as the plan set them
    (kneecap.loadplan.schema.Budget; unset ones absent)."""

    ttft_p50_ms: Number | None = None
    ttft_p95_ms: Number | None = None
    ttft_p99_ms: Number | None = None
    itl_p50_ms: Number | None = None
    itl_p95_ms: Number | None = None
    itl_p99_ms: Number | None = None
    tpot_p50_ms: Number | None = None
    tpot_p95_ms: Number | None = None
    tpot_p99_ms: Number | None = None
    e2e_p50_ms: Number | None = None
    e2e_p95_ms: Number | None = None
    e2e_p99_ms: Number | None = None
    error_rate: Number | None = None


class Worksheet(_Doc):
    """The plan as run: classes, SLO budgets per class, and the load/stop settings."""

    classes: dict[str, ClassFields] | None = None
    budgets: dict[str, SloBudget] | None = None
    ledger: dict[str, Any] | None = None  # {candidate: HBM ledger or None}, or one ledger
    plan: dict[str, Any] | None = None  # one plan for the whole run
    states: list[str] | None = None
    load: dict[str, Any] | None = None
    repetitions: int | None = None
    stop: dict[str, Any] | None = None
    seed: int | None = None

    SETTINGS_EXCLUDED: ClassVar[tuple[str, ...]] = ("classes", "budgets", "ledger", "plan")

    def settings(self) -> list[tuple[str, Any]]:
        """The load/stop settings (every key but classes, budgets, ledger and plan), in the document's order."""
        return [(k, v) for k, v in self.to_dict().items() if k not in self.SETTINGS_EXCLUDED and v is not None]


class RunDocument(_Doc):
    """A whole summary.json of `kneecap run`."""

    kind: str | None = None
    status: str | None = None  # running | complete | stopped
    levels: list[LevelSummary] = []
    knee: Knee | None = None
    stopped: Stopped | None = None
    manifest: str | dict[str, Any] | None = None
    model_executed: bool | None = None
    benchmark_executed: bool | None = None
    plan_name: str | None = None
    name: str | None = None  # older documents
    plan_sha256: str | None = None
    description: str | None = None
    cells: list[RunCell] = []
    capacity: Capacity | None = None
    candidates: list[CandidateResult] = []
    handoff: str | None = None  # the handoff folder, relative to the results folder
    selected_cell: str | None = None  # --cell: the one cell re-run
    identities: dict[str, Identity] | None = None
    worksheet: Worksheet | str | None = None
    preferred: str | None = None  # the cheapest accepted candidate
    plan: dict[str, Any] | None = None  # one plan for the whole run

    @classmethod
    def read(cls, doc: object, source: str = "the run's summary") -> "RunDocument":
        """A `kneecap run` summary.json, typed; one that is not one is a one-line error naming its first bad key."""
        return cls._validated(
            doc, source, "a kneecap run summary.json", "pass the folder written by kneecap run PLAN --out DIR"
        )
