"""Parse a command-line length distribution ("1000", "uniform:100:2000", "lognormal:mean=1000,std=300").

Owns the spec-string grammar for kneecap.workload.LengthDist and its one-line errors; nothing else.

Grammar: N (fixed) | KIND:POSITIONAL[:POSITIONAL...] | KIND:key=value[,key=value...], with
KIND one of fixed (value), uniform (low, high), normal / lognormal (mean, std), empirical
(values, comma-separated: "empirical:120,340,800"). Optional min=/max= keys clip the samples.
"""

from __future__ import annotations

import math

from kneecap.errors import KneecapError
from kneecap.workload import LENGTH_KINDS, LENGTH_PARAMS, LengthDist

_POSITIONAL = {k: v for k, v in LENGTH_PARAMS.items() if k != "empirical"}
_INTEGER = {"value", "low", "high", "min", "max"}
_HINT = 'write e.g. "1000", "uniform:100:2000", "normal:mean=1000,std=200" or "lognormal:mean=1000,std=300,max=4096"'


def _number(spec: str, key: str, text: str) -> float | int:
    try:
        v = float(text)
    except ValueError:
        raise KneecapError(f"length {spec!r}: {key} must be a number, got {text!r}", _HINT) from None
    if not math.isfinite(v):
        raise KneecapError(f"length {spec!r}: {key} must be a finite number, got {text!r}", _HINT)
    if key in _INTEGER:
        if v != int(v):
            raise KneecapError(f"length {spec!r}: {key} must be a whole number of tokens, got {text!r}", _HINT)
        return int(v)
    return v


def parse_length_spec(spec: str) -> LengthDist:
    """A LengthDist from its spec string; any mistake is one KneecapError naming the spec."""
    text = str(spec).strip()
    if not text:
        raise KneecapError("length spec is empty", _HINT)
    if ":" not in text:
        return LengthDist(kind="fixed", value=_number(text, "value", text))
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in LENGTH_KINDS:
        raise KneecapError(f"length {text!r}: unknown distribution {kind!r}", f"use one of {', '.join(LENGTH_KINDS)}")
    params: dict = {}
    if kind == "empirical":
        parts = [p.strip() for p in rest.split(",") if p.strip()]
        clip = [p for p in parts if "=" in p]
        values = [_number(text, "value", p) for p in parts if "=" not in p]
        params["values"] = tuple(values)
        parts = clip
    elif "=" in rest:
        parts = [p.strip() for p in rest.split(",") if p.strip()]
    else:
        pos = [p.strip() for p in rest.split(":")]
        if len(pos) != len(_POSITIONAL[kind]):
            raise KneecapError(
                f"length {text!r}: {kind} takes {len(_POSITIONAL[kind])} values "
                f"({', '.join(_POSITIONAL[kind])}), got {len(pos)}",
                _HINT,
            )
        params.update({k: _number(text, k, v) for k, v in zip(_POSITIONAL[kind], pos)})
        parts = []
    allowed = set(_POSITIONAL.get(kind, ())) | {"min", "max"}
    for part in parts:
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if not eq or key not in allowed:
            raise KneecapError(
                f"length {text!r}: unknown parameter {part!r} for {kind}", f"{kind} takes {', '.join(sorted(allowed))}"
            )
        params[key] = _number(text, key, value.strip())
    for bound in ("min", "max"):
        if bound in params:
            params[f"{bound}_value"] = params.pop(bound)
    if kind in ("normal", "lognormal"):
        if not params.get("std", 0) >= 0 or (kind == "lognormal" and not params.get("mean", 0) > 0):
            raise KneecapError(f"length {text!r}: needs mean > 0 and std >= 0", _HINT)
    try:
        return LengthDist(kind=kind, **params)
    except KneecapError as exc:
        raise KneecapError(f"length {text!r}: {exc.message}", exc.hint or _HINT) from None


def parse_length_flag(flag: str, spec: str | None) -> tuple[int | None, str | None]:
    """--isl / --osl: a whole number of tokens, or a length distribution (kneecap.workload.lengthspec, the
    grammar `kneecap run` classes use) -> (tokens, None) or (its mean rounded, the spec)."""
    if spec is None:
        return None, None
    try:
        dist = parse_length_spec(spec)
    except KneecapError as exc:
        raise KneecapError(f"{flag} {exc.message}", exc.hint) from None
    if dist.kind == "fixed":
        return dist.value, None
    return max(1, round(dist.expected)), spec
