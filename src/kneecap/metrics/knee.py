"""The saturation knee of a sweep: the last load level worth climbing to.

Pure: level summaries in (each with `concurrency` or `rate`, `output_tok_s`, `ttft_ms`,
`tpot_ms`), the knee out. The rule (docs/metrics.md, "Knee"):

  Sort the levels by load x. Level a is the knee when it is the first level such that
    (1) no later level b reaches >= 10% more output throughput per doubling of load:
        (y_b / y_a) ** (1 / log2(x_b / x_a)) - 1 < 0.10 for every b > a, and
    (2) going to the next level costs latency (p50 TPOT or p50 TTFT rises) or loses
        throughput. kind = "collapse" when the next level loses more than 10% of a's
        output throughput, else "saturation".
  The last level is never the knee (nothing after it shows that climbing stops paying);
  a curve still rising at its last level has no knee (None).

Scaling each step to a doubling makes 1,2,4,8 sweeps and 10,20,30,40 sweeps comparable;
requiring the condition against every later level keeps one noisy dip from ending the climb.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from kneecap.errors import KneecapError

GAIN_PER_DOUBLING = 0.10  # a doubling of load must add at least 10% output throughput to be worth it
KEYS = ("concurrency", "rate")


def gain_per_doubling(x_a: float, y_a: float, x_b: float, y_b: float) -> float:
    """Output-throughput growth from a to b, scaled to one doubling of load: (y_b/y_a)^(1/log2(x_b/x_a)) - 1."""
    if y_b <= 0:
        return -1.0
    return (y_b / y_a) ** (1.0 / math.log2(x_b / x_a)) - 1.0


def _p50(level: Mapping, key: str) -> float | None:
    return (level.get(key) or {}).get("p50")


def _latency_grows(a: Mapping, b: Mapping) -> bool:
    pairs = ((_p50(a, key), _p50(b, key)) for key in ("tpot_ms", "ttft_ms"))
    return any(la is not None and lb is not None and lb > la for la, lb in pairs)


def _usable(levels: Sequence[Mapping], key: str) -> list[tuple[float, float, Mapping]]:
    seen: set = set()
    points = []
    for level in levels:
        x, y = level.get(key), level.get("output_tok_s")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            continue  # e.g. concurrency "max", or a level with no wall time
        if level.get("partial"):
            continue  # an interrupted level's throughput is not a point of the curve
        if not (x > 0 and math.isfinite(x)) or x in seen:
            continue
        seen.add(x)
        points.append((float(x), float(y), level))
    points.sort(key=lambda p: p[0])
    return points


def find_knee(levels: Sequence[Mapping], key: str = "concurrency") -> dict | None:
    """The knee {key: x, output_tok_s, rule, kind: 'saturation'|'collapse'} or None.

    Levels without a numeric positive load value or without output_tok_s, and levels marked
    `partial` (interrupted), are ignored; a repeated load value keeps its first level.
    """
    if key not in KEYS:
        raise KneecapError(f"knee key must be one of {', '.join(KEYS)}, got {key!r}", "use concurrency or rate")
    points = _usable(levels, key)
    for i, (x_a, y_a, a) in enumerate(points[:-1]):
        if y_a <= 0:
            continue
        later = points[i + 1 :]
        gains = [gain_per_doubling(x_a, y_a, x_b, y_b) for x_b, y_b, _ in later]
        if max(gains) >= GAIN_PER_DOUBLING:
            continue
        x_n, y_n, nxt = later[0]
        falls = y_n < y_a
        latency = _latency_grows(a, nxt)
        if not (falls or latency):
            continue
        collapse = y_n < y_a * (1.0 - GAIN_PER_DOUBLING)
        step = f"{key} {x_a:g} -> {x_n:g}"
        if collapse:
            rule = (
                f"collapse: output throughput fell {100 * (1 - y_n / y_a):.1f}% ({step}); "
                f"no later level gains >= {100 * GAIN_PER_DOUBLING:g}% per doubling of load"
            )
        else:
            why = "p50 latency rose" if latency else "output throughput fell"
            rule = (
                f"saturation: best later gain {100 * max(gains):.1f}% per doubling of load "
                f"(< {100 * GAIN_PER_DOUBLING:g}%) while {why} ({step})"
            )
        return {key: a.get(key), "output_tok_s": y_a, "rule": rule, "kind": "collapse" if collapse else "saturation"}
    return None
