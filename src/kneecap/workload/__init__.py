"""Workloads: request classes, length distributions and arrival times — one seeded source of truth.

The simulator and the HTTP client both draw their requests here, so a simulated sweep and a
measured sweep of the same Workload and seed see the same lengths in the same order.
Pure: randomness comes in as a seed, nothing is read or written. Beside it in this package:
datasets.py (ShareGPT / custom datasets), traces.py (Mooncake / BurstGPT replay), multiturn.py,
ramps.py, slices.py (time slices, stable-p99 rule) and lengthspec.py (CLI length specs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from kneecap.errors import KneecapError

# each length distribution's parameters (positional in a length spec, kneecap.workload.lengthspec)
LENGTH_PARAMS = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "std"),
    "empirical": ("values",),
}
LENGTH_KINDS = tuple(LENGTH_PARAMS)


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts (>= 1). Parameters by kind:

    fixed: value;  uniform: low, high (inclusive);  normal: mean, std;  lognormal: mean, std
    (of the token count itself, not of its log);  empirical: values (sampled with replacement).
    Samples are rounded to integers and clipped to [min_value, max_value].
    """

    kind: str = "fixed"
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    std: float | None = None
    values: tuple[int, ...] = ()
    min_value: int = 1
    max_value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_PARAMS:
            raise KneecapError(f"unknown length distribution {self.kind!r}", f"use one of {', '.join(LENGTH_KINDS)}")
        for name in LENGTH_PARAMS[self.kind]:
            if getattr(self, name) in (None, ()):
                raise KneecapError(f"{self.kind} length distribution needs {name!r}", f"set {name}")
        if self.kind == "fixed" and self.value < 1:
            raise KneecapError(f"token length must be >= 1, got {self.value}", "use a positive length")
        if self.kind == "uniform" and not (1 <= self.low <= self.high):
            raise KneecapError(f"uniform lengths need 1 <= low <= high, got {self.low}..{self.high}", "fix low/high")

    @classmethod
    def fixed(cls, n: int) -> "LengthDist":
        return cls(kind="fixed", value=int(n))

    @property
    def expected(self) -> float:
        """Mean token count (before clipping)."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        if self.kind in ("normal", "lognormal"):
            return float(self.mean)
        return sum(self.values) / len(self.values)

    @property
    def upper_bound(self) -> int | None:
        """Largest count this distribution can produce, if bounded."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.high if self.max_value is None else min(self.high, self.max_value)
        if self.kind == "empirical":
            return max(self.values) if self.max_value is None else min(max(self.values), self.max_value)
        return self.max_value

    def sample(self, rng, n: int):
        """n integer samples (numpy int64 array) from a numpy Generator."""
        import numpy as np

        if self.kind == "fixed":
            out = np.full(n, self.value, dtype=np.int64)
        elif self.kind == "uniform":
            out = rng.integers(self.low, self.high + 1, size=n)
        elif self.kind == "normal":
            out = np.rint(rng.normal(self.mean, self.std, size=n))
        elif self.kind == "lognormal":
            # parameters of the underlying normal from the desired mean/std of the count
            var = float(self.std) ** 2
            mu2 = float(self.mean) ** 2
            sigma2 = np.log1p(var / mu2)
            out = np.rint(rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), size=n))
        else:
            out = rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)
        hi = self.max_value if self.max_value is not None else np.iinfo(np.int64).max
        return np.clip(out.astype(np.int64), self.min_value, hi)


@dataclass(frozen=True)
class RequestClass:
    """A class of requests (e.g. short-message, long-thread) with its own lengths and share of traffic."""

    name: str = "default"
    input: LengthDist = field(default_factory=lambda: LengthDist.fixed(1000))
    output: LengthDist = field(default_factory=lambda: LengthDist.fixed(1000))
    weight: float = 1.0  # share of the mix (normalised over classes)
    shared_prefix_tokens: int = 0  # tokens of a common prefix per group (0 = unique prompts)
    num_prefix_groups: int = 1  # how many distinct shared prefixes requests are spread over


@dataclass(frozen=True)
class Workload:
    classes: tuple[RequestClass, ...] = (RequestClass(),)

    def __post_init__(self) -> None:
        if not self.classes:
            raise KneecapError("a workload needs at least one request class", "declare a class")
        if any(c.weight < 0 for c in self.classes) or sum(c.weight for c in self.classes) <= 0:
            raise KneecapError("class weights must be >= 0 and not all zero", "fix the class weights")

    @classmethod
    def fixed(cls, isl: int, osl: int, name: str = "default") -> "Workload":
        return cls(classes=(RequestClass(name=name, input=LengthDist.fixed(isl), output=LengthDist.fixed(osl)),))


# Trace replay: Mooncake's traces give one hash id per 512-token block of a prompt (kneecap.workload.traces).
TRACE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: lengths in tokens; prefix_group identifies a shared prefix (None = unique)."""

    index: int
    request_id: str
    class_name: str
    input_tokens: int  # total prompt tokens, shared prefix included
    output_tokens: int
    prefix_group: int | None = None
    prefix_tokens: int = 0
    conversation_id: str | None = None  # multi-turn only (workload.multiturn); records carry it
    turn: int | None = None  # 1-based turn within the conversation; None outside multi-turn
    block_hashes: tuple[int, ...] = ()  # trace replay: one hash id per block_tokens of prompt (equal ids, equal tokens)
    block_tokens: int = TRACE_BLOCK_TOKENS  # tokens a trace's hash id stands for (Mooncake: 512, Qwen-Bailian: 16)
    # trace replay of sessions: sent only once every one of these requests' answers is back (a session's next turn;
    # an agent resuming after its sub-agents), think_s after the last of them
    after_ids: tuple[str, ...] = ()
    think_s: float = 0.0


def make_requests(
    workload: Workload, n: int, seed: int = 0, start_index: int = 0, id_prefix: str = "r"
) -> list[RequestSpec]:
    """n requests drawn from the workload's class mix, deterministic in (workload, n, seed, start_index)."""
    import numpy as np

    if n < 0:
        raise KneecapError(f"request count must be >= 0, got {n}", "pass a positive --requests")
    rng = np.random.default_rng([seed, start_index])
    weights = np.asarray([c.weight for c in workload.classes], dtype=float)
    picks = (
        rng.choice(len(workload.classes), size=n, p=weights / weights.sum())
        if len(workload.classes) > 1
        else np.zeros(n, dtype=int)
    )
    specs: list[RequestSpec] = []
    per_class = {}
    for ci, cls in enumerate(workload.classes):
        idx = np.nonzero(picks == ci)[0]
        per_class[ci] = (
            iter(cls.input.sample(rng, len(idx)).tolist()),
            iter(cls.output.sample(rng, len(idx)).tolist()),
            iter(rng.integers(0, max(1, cls.num_prefix_groups), size=len(idx)).tolist()),
        )
    for k in range(n):
        ci = int(picks[k])
        cls = workload.classes[ci]
        ins, outs, groups = per_class[ci]
        isl, osl, group = int(next(ins)), int(next(outs)), int(next(groups))
        prefix = min(cls.shared_prefix_tokens, isl - 1) if cls.shared_prefix_tokens else 0
        i = start_index + k
        specs.append(
            RequestSpec(
                index=i,
                request_id=f"{id_prefix}{i}",
                class_name=cls.name,
                input_tokens=isl,
                output_tokens=osl,
                prefix_group=group if prefix else None,
                prefix_tokens=prefix,
            )
        )
    return specs


def arrival_offsets(
    rate: float, n: int, burstiness: float = 1.0, seed: int = 0, *, on_s: float | None = None, off_s: float = 0.0
) -> list[float]:
    """Intended send times (s from level start) of n requests at `rate` req/s.

    Inter-arrival gaps are gamma-distributed with shape `burstiness` and mean 1/rate:
    burstiness 1 is a Poisson process, < 1 burstier, > 1 more regular. Gaps are not capped.
    rate = inf sends everything at t = 0.
    On/off bursts (on_s given): the process above runs only during `on_s`-second windows separated by
    `off_s` seconds of silence — `rate` is the rate inside a burst; the long-run mean is
    rate x on_s / (on_s + off_s).
    """
    import math

    import numpy as np

    if n <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * n
    if rate <= 0:
        raise KneecapError(f"request rate must be positive, got {rate}", "pass e.g. --rate 4")
    if burstiness <= 0:
        raise KneecapError(f"burstiness must be positive, got {burstiness}", "pass e.g. --burstiness 1 (Poisson)")
    if on_s is not None and (on_s <= 0 or off_s < 0):
        raise KneecapError(f"on/off bursts need on_s > 0 and off_s >= 0, got {on_s}/{off_s}", "e.g. on_s: 2, off_s: 8")
    rng = np.random.default_rng([seed, 7919])
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0  # the first request goes at the level's start
    times = np.cumsum(gaps)
    if on_s is not None:
        times = times + np.floor(times / on_s) * off_s  # skip the silent windows
    return times.tolist()


def concurrency_levels(spec: str) -> list[int]:
    """Parse '1,2,4' into positive ints."""
    try:
        values = [int(p) for p in spec.split(",") if p.strip()]
    except ValueError:
        raise KneecapError(
            f"concurrency list {spec!r} is not a list of whole numbers", "pass e.g. --concurrency 1,8,64"
        ) from None
    if not values or any(v < 1 for v in values):
        raise KneecapError(
            f"concurrency levels must be whole numbers >= 1, got {spec!r}", "pass e.g. --concurrency 1,8,64"
        )
    return values


def parse_rates(spec: str, flag: str = "--rate") -> list[float]:
    """Parse '0.5,1,2' (requests/s) into positive floats; 'inf' sends every request at once. With flag
    "--replay-speed" the same list is read as speed-ups of a replayed trace, and errors say so."""
    what, example = (
        ("replay speeds", "--replay-speed 1,2,4 (times as fast as recorded)")
        if flag == "--replay-speed"
        else ("request rates", f"{flag} 1,2,4 (requests/s)")
    )
    try:
        values = [float(p) for p in spec.split(",") if p.strip()]
    except ValueError:
        raise KneecapError(f"{flag} {spec!r} is not a list of numbers", f"pass e.g. {example}") from None
    if not values or any(not (v > 0) for v in values):
        raise KneecapError(f"{what} must be numbers > 0, got {spec!r}", f"pass e.g. {example}")
    return values


def parse_levels(concurrency: str | None, rate: str | None) -> tuple[str, list]:
    """--concurrency / --rate -> ('concurrency', [1, 8, 'max']) or ('rate', [2.0, 4.0]); neither: C=1."""
    if concurrency and rate:
        raise KneecapError("--concurrency and --rate both given", "pass one of them: closed loop or open loop")
    if rate:
        return "rate", parse_rates(rate)
    parts = [p.strip() for p in (concurrency or "1").split(",") if p.strip()]
    if not parts:
        raise KneecapError("--concurrency is empty", "pass e.g. --concurrency 1,8,64,max")
    return "concurrency", ["max" if p.lower() == "max" else concurrency_levels(p)[0] for p in parts]
