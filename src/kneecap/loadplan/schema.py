"""The load-plan file: a pydantic schema, and a loader whose errors name the file, line and field.

Unknown keys are errors (a YAML typo must not silently fall back to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from kneecap.errors import KneecapError, field_path, path_text, validation_problem
from kneecap.list_file import duplicate_yaml_key
from kneecap.workload import LENGTH_PARAMS, LengthDist, RequestClass
from kneecap.workload.sweep_spec import SEED_MAX


class _Strict(BaseModel):
    # allow_inf_nan=False: YAML's .inf and .nan are refused in every number of a plan (a cost of .inf, a NaN weight)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LengthSpec(_Strict):
    """Token-count distribution: fixed | uniform | normal | lognormal | empirical (values or a file of ints)."""

    kind: Literal["fixed", "uniform", "normal", "lognormal", "empirical"] = "fixed"
    value: Optional[int] = Field(None, ge=1)
    low: Optional[int] = Field(None, ge=1)
    high: Optional[int] = Field(None, ge=1)
    mean: Optional[float] = Field(None, gt=0)
    std: Optional[float] = Field(None, ge=0)
    values: Optional[list[int]] = None
    file: Optional[str] = None  # empirical: a text file with one token count per line (relative to the plan)
    min: int = Field(1, ge=1)
    max: Optional[int] = Field(None, ge=1)

    @model_validator(mode="after")
    def _needs(self) -> "LengthSpec":
        need = () if self.kind == "empirical" else LENGTH_PARAMS[self.kind]  # empirical: values or file, below
        missing = [n for n in need if getattr(self, n) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {', '.join(missing)}")
        if self.kind == "empirical" and not (self.values or self.file):
            raise ValueError("an empirical length needs `values` or `file`")
        if self.kind == "uniform" and self.low > self.high:
            raise ValueError(f"uniform low {self.low} > high {self.high}")
        return self

    def to_dist(self, base_dir: Path) -> LengthDist:
        values: tuple[int, ...] = ()
        if self.kind == "empirical":
            if self.values:
                values = tuple(self.values)
            else:
                path = (base_dir / self.file).resolve()
                try:
                    values = tuple(int(x) for x in path.read_text().split())
                except (OSError, ValueError) as exc:
                    raise KneecapError(
                        f"cannot read token lengths from {path}: {exc}",
                        "give a text file with one whole number per line",
                    ) from None
                if not values:
                    raise KneecapError(f"{path} holds no token lengths", "put one whole number per line")
        return LengthDist(
            kind=self.kind,
            value=self.value,
            low=self.low,
            high=self.high,
            mean=self.mean,
            std=self.std,
            values=values,
            min_value=self.min,
            max_value=self.max,
        )


def _length(v: Any) -> Any:
    """Allow the shorthand `input: 1000` for a fixed length."""
    return {"kind": "fixed", "value": v} if isinstance(v, int) else v


class ArrivalSpec(_Strict):
    """How requests of a rate cell arrive. poisson = gamma with burstiness 1; onoff = bursts of `on_s` at
    the cell's rate separated by `off_s` of silence."""

    kind: Literal["poisson", "gamma", "onoff"] = "poisson"
    burstiness: float = Field(1.0, gt=0)
    on_s: float = Field(1.0, gt=0)
    off_s: float = Field(1.0, ge=0)


class ClassSpec(_Strict):
    input: LengthSpec
    output: LengthSpec
    weight: float = Field(1.0, ge=0)
    shared_prefix_tokens: int = Field(0, ge=0)
    prefix_groups: int = Field(1, ge=1)

    _coerce_in = field_validator("input", "output", mode="before")(lambda cls, v: _length(v))

    def to_request_class(self, name: str, base_dir: Path) -> RequestClass:
        return RequestClass(
            name=name,
            input=self.input.to_dist(base_dir),
            output=self.output.to_dist(base_dir),
            weight=self.weight,
            shared_prefix_tokens=self.shared_prefix_tokens,
            num_prefix_groups=self.prefix_groups,
        )


BUDGET_METRICS = ("ttft", "itl", "tpot", "e2e")
BUDGET_PCTS = ("p50", "p95", "p99")


class _Budget(_Strict):
    def limits(self) -> dict[str, float]:
        """{'ttft_p99_ms': 500.0, ...} for the budgets that are set (error_rate excluded)."""
        return {k: v for k, v in self.model_dump().items() if v is not None and k != "error_rate"}


Budget = create_model(
    "Budget",
    __base__=_Budget,
    __doc__="SLO budget of one class: latency percentiles in ms (ttft_p99_ms, ...), and the tolerated error rate (0..1).",
    **{f"{m}_{p}_ms": (Optional[float], Field(None, gt=0)) for m in BUDGET_METRICS for p in BUDGET_PCTS},
    error_rate=(float, Field(0.01, ge=0, le=1)),
)


class Expectation(_Strict):
    """What a behaviour case's answer must satisfy (exactly one kind)."""

    exact: Optional[str] = None
    regex: Optional[str] = None
    json_schema: Optional[dict] = None
    must_abstain: Optional[bool] = None
    language: Optional[str] = None  # ISO 639-1 code, e.g. "en", "fr"

    @model_validator(mode="after")
    def _one(self) -> "Expectation":
        set_ = [k for k, v in self.model_dump().items() if v is not None]
        if len(set_) != 1:
            raise ValueError(
                f"an expectation needs exactly one of exact, regex, json_schema, must_abstain, language (got {set_ or 'none'})"
            )
        if self.regex is not None:
            import re

            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"invalid regex {self.regex!r}: {exc}") from None
        return self


class BehaviourCase(_Strict):
    name: str
    prompt: str
    expect: Expectation
    max_tokens: int = Field(64, ge=1)


class PrivacySpec(_Strict):
    keep_prompts: bool = False  # traces keep prompt hashes, not prompts, unless this is true
    redact_server_strings: bool = False


class StateSpec(_Strict):
    """How to reach a known state before each cell. warm: declared warm-up requests first; cold: a pause
    (and a prefix-cache reset where the server exposes one)."""

    warmup_requests: int = Field(4, ge=0)
    cold_pause_s: float = Field(2.0, ge=0)
    reset_prefix_cache: bool = True


class LoadSpec(_Strict):
    """One dimension raised at a time: the steps of concurrency (closed loop) or rate (open loop, req/s).
    `steps: auto` starts below the preflight's safe concurrency and doubles."""

    dimension: Literal["concurrency", "rate"] = "concurrency"
    steps: Union[list[float], Literal["auto"]] = "auto"
    requests_per_cell: Optional[int] = Field(None, ge=1)
    duration_s: Optional[float] = Field(None, gt=0)
    arrival: ArrivalSpec = ArrivalSpec()
    # the load every class with an SLO must sustain (same unit as steps): a candidate whose capacity is
    # below it fails the SLO gate. Unset: any non-empty capacity region passes.
    required: Optional[float] = Field(None, gt=0)

    @field_validator("steps")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, list) and (not v or any(not (0 < s < float("inf")) for s in v)):  # .inf/.nan: found by fuzzing
            raise ValueError("steps must be a non-empty list of positive, finite numbers")
        return v

    @model_validator(mode="after")
    def _count(self) -> "LoadSpec":
        if self.requests_per_cell is None and self.duration_s is None:
            raise ValueError("set requests_per_cell or duration_s")
        if isinstance(self.steps, list):
            if self.dimension == "concurrency" and any(s != int(s) for s in self.steps):
                raise ValueError("concurrency steps must be whole numbers")
        return self


class StopSpec(_Strict):
    """Declared limits: a cell crossing one stops the ramp for that class/state/repetition."""

    max_error_rate: float = Field(0.05, ge=0, le=1)  # any error kind, incl. 5xx and OOM
    max_timeout_rate: float = Field(0.02, ge=0, le=1)
    max_invalid_output_rate: float = Field(0.0, ge=0, le=1)
    unstable_tail_ratio: float = Field(20.0, gt=1)  # p99/p50 of TTFT beyond this = unstable tail
    stop_on_suspect: bool = True  # the client's own lag may have set the numbers: measurement corruption
    stop_on_slo_breach: bool = True  # stop raising load after the first cell that breaks a budget


class SimulatorTarget(_Strict):
    kind: Literal["simulator"] = "simulator"
    model: str = "llama-3.1-8b"  # preset name or config path
    gpu: str = "h100-sxm"
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)  # expert parallelism over the tp GPUs (mixture-of-experts models; as kneecap plan --ep)
    dp_attention: bool = False  # attention data-parallel over the tp GPUs (as kneecap plan --dp-attention)
    weight_dtype: Optional[str] = None
    kv_dtype: str = "bf16"
    block_size: int = Field(16, ge=1)
    engine_defaults: Literal["vllm", "sglang"] = "vllm"
    max_num_seqs: Optional[int] = Field(None, ge=1)
    max_num_batched_tokens: Optional[int] = Field(None, ge=1)
    scheduler_delay_factor: Optional[float] = Field(None, ge=0)  # vLLM V0 --scheduler-delay-factor
    prefix_caching: bool = True
    # speculative decoding, as `kneecap simulate --spec-method/--spec-tokens/--spec-acceptance` (all three or none):
    # the acceptance is one rate, one rate per draft position, or a file of accepted lengths per step
    spec_method: Optional[Literal["eagle", "eagle3", "mtp", "ngram"]] = None
    spec_tokens: Optional[int] = Field(None, ge=1)
    spec_acceptance: Optional[Union[float, list[float], str]] = None

    @model_validator(mode="after")
    def _spec_all_or_none(self):
        given = [v is not None for v in (self.spec_method, self.spec_tokens, self.spec_acceptance)]
        if any(given) and not all(given):
            raise ValueError("speculative decoding needs spec_method, spec_tokens and spec_acceptance together")
        return self

    def spec_acceptance_text(self) -> str | None:
        """spec_acceptance as --spec-acceptance takes it."""
        a = self.spec_acceptance
        if a is None or isinstance(a, str):
            return a
        return ",".join(str(x) for x in a) if isinstance(a, list) else str(a)


class ServerTarget(_Strict):
    kind: Literal["server"] = "server"
    base_url: str
    model: Optional[str] = None
    endpoint: Literal["completions", "chat"] = "completions"
    api_key_env: Optional[str] = None  # name of the env variable holding the key (never the key itself)
    timeout_s: float = Field(120.0, gt=0)
    # reuse connections: "auto" probes the server first (kneecap.client.keepalive) and reuses them only
    # if it keeps a connection open after a streamed response (llama.cpp does not)
    keepalive: Union[Literal["auto"], bool] = "auto"


class CostSpec(_Strict):
    """Self-hosted: $/GPU-hour x GPUs. Managed endpoint: $ per million input and output tokens."""

    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    num_gpus: Optional[int] = Field(None, ge=1)
    input_usd_per_mtok: Optional[float] = Field(None, ge=0)
    output_usd_per_mtok: Optional[float] = Field(None, ge=0)


class CandidateSpec(_Strict):
    name: str
    target: Union[SimulatorTarget, ServerTarget] = Field(discriminator="kind")
    cost: Optional[CostSpec] = None
    routing: Optional[str] = None  # what the candidate is for, e.g. "interactive"


class LoadPlanSpec(_Strict):
    name: str
    description: str = ""
    seed: int = Field(0, ge=0, le=SEED_MAX)  # as --seed: summary.json holds it and the cells' seeds as integers
    classes: dict[str, ClassSpec]
    slo: dict[str, Budget] = {}
    behaviour: list[BehaviourCase] = []
    privacy: PrivacySpec = PrivacySpec()
    states: list[Literal["warm", "cold"]] = ["warm"]
    state: StateSpec = StateSpec()
    load: LoadSpec
    repetitions: int = Field(1, ge=1)
    stop: StopSpec = StopSpec()
    candidates: list[CandidateSpec]

    @field_validator("behaviour")
    @classmethod
    def _distinct_cases(cls, cases: list[BehaviourCase]) -> list[BehaviourCase]:
        if repeat := _repeated_names([c.name for c in cases]):
            raise ValueError(repeat)
        return cases

    @model_validator(mode="after")
    def _refs(self) -> "LoadPlanSpec":
        if not self.classes:
            raise ValueError("declare at least one request class under `classes`")
        unknown = sorted(set(self.slo) - set(self.classes))
        if unknown:
            raise ValueError(f"slo names unknown class(es) {unknown}; classes are {sorted(self.classes)}")
        if not self.candidates:
            raise ValueError("declare at least one candidate under `candidates`")
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError(f"candidate names must be unique, got {names}")
        return self


def _node_line(root, loc: tuple) -> int | None:
    """1-based line of the YAML node at a pydantic error location (best effort)."""
    import yaml

    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    node, line = v, k.start_mark.line + 1
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _user_path(loc: tuple) -> tuple:
    """A pydantic error location as the user's field path: without validator wrappers and without the
    union tag pydantic inserts after `target` (so a class named `server` keeps its name)."""
    out: list = []
    for p in loc:
        if isinstance(p, str) and p.startswith(("function-", "union[", "tagged-union[")):
            continue
        if out and out[-1] == "target" and p in ("simulator", "server"):
            continue
        out.append(p)
    return tuple(out)


def _error_text(err: dict) -> str:
    """A pydantic error's message in users' terms."""
    return "unknown field (typo?)" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")


def _problem(errors: list[dict], doc: object) -> tuple[tuple, str, int]:
    """pydantic's errors on the YAML document `doc` -> (the first bad field's path in it, the problem in users'
    terms, how many other fields are bad): a value failing each branch of a union is one problem."""
    errors = [dict(e, loc=_user_path(e["loc"])) for e in errors]
    path, text = validation_problem(errors, doc)
    if errors[0]["type"] == "extra_forbidden":
        text = _error_text(errors[0])
    paths = {field_path(e["loc"], doc, e["type"] == "missing") for e in errors}
    return path, text, len(paths) - 1


def behaviour_cases(items: list, source: str, hint: str) -> list[dict]:
    """A list of behaviour cases outside a load plan (e.g. recommend's --behaviour-gate file), each checked as a
    plan's `behaviour:` entries are, with distinct names; one line naming `source` and the case on any error."""
    cases = []
    for i, item in enumerate(items):
        try:
            case = BehaviourCase.model_validate(item)
        except ValidationError as exc:
            path, text, _ = _problem(exc.errors(), item)
            raise KneecapError(f"{source}: case {i + 1}: {path_text(path) or '(the case)'}: {text}", hint) from None
        cases.append(case.model_dump(exclude_none=True))
    if repeat := _repeated_names([c["name"] for c in cases]):
        raise KneecapError(f"{source}: {repeat}", "give every case its own name")
    return cases


def _repeated_names(names: list[str]) -> str | None:
    """'case names repeat (a, b)' when behaviour cases share a name, else None."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    return f"case names repeat ({', '.join(repeated)})" if repeated else None


def load_plan_file(path: str | Path) -> tuple[LoadPlanSpec, Path]:
    """Read and validate a plan file; returns (spec, folder it lives in). Errors name file, line and field."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KneecapError(f"cannot read load plan {path}: {exc.strerror or exc}", "check the path") from None
    except UnicodeDecodeError as exc:  # found by tests/fuzz: a binary or non-UTF-8 file
        text_line = exc.object[: exc.start].count(b"\n") + 1
        raise KneecapError(
            f"{path}:{text_line}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
            "save the plan as UTF-8 YAML",
        ) from None
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is None and isinstance(getattr(exc, "position", None), int):  # yaml.reader.ReaderError: a bad character
            where = f"{path}:{text[: exc.position].count(chr(10)) + 1}"
        else:
            where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise KneecapError(
            f"{where}: YAML syntax error: {problem}", "fix the YAML (indentation, colons, quotes)"
        ) from None
    if not isinstance(data, dict):
        raise KneecapError(f"{path}: a load plan must be a YAML mapping", "see examples/ for the layout")
    twice = duplicate_yaml_key(root)
    if twice is not None:
        raise KneecapError(
            f"{path}:{twice[1]}: {twice[0]!r} is given twice in one mapping",
            "keep one of them (YAML would keep only the last, silently)",
        )
    try:
        spec = LoadPlanSpec.model_validate(data)
    except ValidationError as exc:
        loc, msg, others = _problem(exc.errors(), data)
        field = path_text(loc) or "(top level)"
        line = _node_line(root, loc)
        more = f" (+{others} more)" if others else ""
        raise KneecapError(
            f"{path}:{line}: {field}: {msg}{more}", "fix that field; see examples/ for valid plans"
        ) from None
    _check_speculation(spec, root, path)
    return spec, path.parent


def _check_speculation(spec: LoadPlanSpec, root, path: Path) -> None:
    """Each simulator target's spec_method / spec_tokens / spec_acceptance (rates, or a file beside the plan) as the
    simulator will take them; an error names the plan's key and its line."""
    from kneecap.sim.speculative import PLAN_NAMES, spec_decoding

    for i, candidate in enumerate(spec.candidates):
        target = candidate.target
        if not isinstance(target, SimulatorTarget):
            continue
        try:
            spec_decoding(
                target.spec_method,
                target.spec_tokens,
                target.spec_acceptance_text(),
                base_dir=path.parent,
                names=PLAN_NAMES,
            )
        except KneecapError as exc:
            loc = ("candidates", i, "target", "spec_acceptance")
            raise KneecapError(f"{path}:{_node_line(root, loc)}: {path_text(loc)}: {exc.message}", exc.hint) from None
