"""Summary statistics: exact distributions (numpy) and a bounded, mergeable streaming summary.

Owns the one statistics shape every metric uses, {mean, p50, p90, p95, p99, max, n}, and
how percentiles are computed. Does not know what the numbers measure (summarize.py does).

Percentiles use numpy's default method, 'linear' (Hyndman & Fan type 7): for n sorted values
x[0..n-1] and quantile q, h = (n - 1) * q and the result is x[floor(h)] + (h - floor(h)) *
(x[floor(h) + 1] - x[floor(h)]). With no data every statistic is None (never 0) and n is 0.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from kneecap.errors import KneecapError

PERCENTILES = (50, 90, 95, 99)
STAT_KEYS = ("mean", "p50", "p90", "p95", "p99", "max", "n")


def empty_distribution() -> dict:
    """The shape of a distribution with no samples: every statistic None, n = 0."""
    return {**dict.fromkeys(STAT_KEYS), "n": 0}


def _as_finite_array(values, name: str = "values"):
    import numpy as np

    arr = np.asarray(values if hasattr(values, "__len__") else list(values), dtype=np.float64).reshape(-1)
    if arr.size and not np.all(np.isfinite(arr)):
        raise KneecapError(
            f"statistics got a non-finite sample in {name}",
            "records carry a NaN or infinite time; check the driver that wrote them",
        )
    return arr


def distribution(values: Iterable[float] | Sequence[float]) -> dict:
    """Exact {mean, p50, p90, p95, p99, max, n} of `values` (same unit in, same unit out), by numpy.percentile."""
    import numpy as np

    arr = _as_finite_array(values)
    if arr.size == 0:
        return empty_distribution()
    pcts = np.percentile(arr, PERCENTILES, method="linear")
    return {
        "mean": float(arr.mean()),
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pcts)},
        "max": float(arr.max()),
        "n": int(arr.size),
    }


def _linear(n: int, order_stat, q: float) -> float:
    """The q-quantile of n samples by the 'linear' rule, from order_stat(rank) (0-based), with numpy's
    interpolation between the neighbouring order statistics (numpy/lib/_function_base_impl.py _lerp)."""
    h = (n - 1) * q
    lo = math.floor(h)
    a, b, t = order_stat(lo), order_stat(min(lo + 1, n - 1)), h - lo
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def weighted_distribution(values: Sequence[float], weights: Sequence[int]) -> dict:
    """Exact statistics of `values` where values[i] occurs weights[i] times (integer weights >= 0).

    Equal to distribution(numpy.repeat(values, weights)) without materialising the repeats, so
    a per-token statistic over millions of tokens costs memory per chunk, not per token.
    """
    import numpy as np

    vals = _as_finite_array(values)
    w = np.asarray(weights, dtype=np.int64).reshape(-1)
    if vals.shape != w.shape:
        raise KneecapError(
            f"weighted statistics got {vals.size} values but {w.size} weights", "pass one integer weight per value"
        )
    if w.size and w.min() < 0:
        raise KneecapError("weighted statistics got a negative weight", "weights are sample counts (>= 0)")
    keep = w > 0
    vals, w = vals[keep], w[keep]
    n = int(w.sum())
    if n == 0:
        return empty_distribution()
    # equal values are pooled first (sorted, weights summed), so the same multiset of samples gives the
    # same floats whichever way it was split into (value, weight) pairs (per token, or per engine step)
    vals, inverse = np.unique(vals, return_inverse=True)
    w = np.bincount(inverse.reshape(-1), weights=w, minlength=vals.size).astype(np.int64)
    cum = np.cumsum(w)  # cum[j] = number of samples with rank < cum[j]

    def order_stat(rank: int) -> float:
        return float(vals[int(np.searchsorted(cum, rank, side="right"))])

    return {
        "mean": float(np.dot(vals, w) / n),
        **{f"p{p}": _linear(n, order_stat, p / 100.0) for p in PERCENTILES},
        "max": float(vals[-1]),
        "n": n,
    }


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of ascending values by the nearest-rank rule: the ceil(q * n)-th smallest."""
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


class StreamingDistribution:
    """Bounded, mergeable summary of a stream of numbers: exact count/sum/min/max plus a
    log-bucketed histogram (the DDSketch construction: Masson, Rim & Lee, VLDB 2019,
    https://arxiv.org/abs/1908.10693).

    Bucket i holds values in (gamma^(i-1), gamma^i] with gamma = (1 + a) / (1 - a), and is read
    back as 2 * gamma^i / (gamma + 1), within relative error `a` (= relative_accuracy) of every
    value in it. Percentiles use the same 'linear' rule as distribution(): each of the two
    neighbouring order statistics is read from its bucket and clamped to [min, max], so for data
    of one sign every percentile is within relative error `a` of the exact one (mixed signs:
    within a * max(|x_lo|, |x_hi|)). mean, max and n are exact.
    Values with |x| < zero_threshold count as 0 (absolute error < zero_threshold).
    Memory: one counter per occupied bucket, at most ln(max/min) / ln(gamma) + 1 per sign —
    about 1,150 buckets for a 1e-3..1e7 range at a = 0.01 — however many values are added.
    Two summaries merge exactly (bucket counts add) when their relative_accuracy is equal.
    """

    def __init__(self, relative_accuracy: float = 0.01, zero_threshold: float = 1e-9):
        if not (0.0 < relative_accuracy < 1.0):
            raise KneecapError(
                f"relative_accuracy must be in (0, 1), got {relative_accuracy!r}", "use e.g. 0.01 for 1% relative error"
            )
        if not zero_threshold > 0:
            raise KneecapError(f"zero_threshold must be positive, got {zero_threshold!r}", "use e.g. 1e-9")
        self.relative_accuracy = float(relative_accuracy)
        self.zero_threshold = float(zero_threshold)
        self._gamma = (1.0 + self.relative_accuracy) / (1.0 - self.relative_accuracy)
        self._log_gamma = math.log(self._gamma)
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None
        self.zero_count = 0
        self.positive: dict[int, int] = {}
        self.negative: dict[int, int] = {}  # indexed by |x|

    def _index(self, magnitude: float) -> int:
        return math.ceil(math.log(magnitude) / self._log_gamma)

    def _value(self, index: int) -> float:
        return 2.0 * self._gamma**index / (self._gamma + 1.0)

    def add(self, value: float, count: int = 1) -> None:
        """Add `value` `count` times."""
        x = float(value)
        if not math.isfinite(x):
            raise KneecapError(
                "streaming statistics got a non-finite sample",
                "records carry a NaN or infinite time; check the driver that wrote them",
            )
        if count <= 0:
            return
        self.count += count
        self.sum += x * count
        self.min = x if self.min is None else min(self.min, x)
        self.max = x if self.max is None else max(self.max, x)
        if abs(x) < self.zero_threshold:
            self.zero_count += count
        else:
            store = self.positive if x > 0 else self.negative
            i = self._index(abs(x))
            store[i] = store.get(i, 0) + count

    def add_many(self, values: Iterable[float], counts: Sequence[int] | None = None) -> None:
        """Add every value (vectorised with numpy); values[i] is added counts[i] times when given."""
        import numpy as np

        arr = _as_finite_array(values)
        if counts is None:
            w = np.ones(arr.size, dtype=np.int64)
        else:
            w = np.asarray(counts, dtype=np.int64).reshape(-1)
            if w.shape != arr.shape or (w.size and w.min() < 0):
                raise KneecapError(
                    f"streaming statistics got {arr.size} values and {w.size} counts", "pass one count (>= 0) per value"
                )
            arr, w = arr[w > 0], w[w > 0]
        if arr.size == 0:
            return
        self.count += int(w.sum())
        self.sum += float(np.dot(arr, w))
        lo, hi = float(arr.min()), float(arr.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        mag = np.abs(arr)
        zero = mag < self.zero_threshold
        self.zero_count += int(w[zero].sum())
        for store, mask in ((self.positive, (arr > 0) & ~zero), (self.negative, (arr < 0) & ~zero)):
            if not mask.any():
                continue
            idx = np.ceil(np.log(mag[mask]) / self._log_gamma).astype(np.int64)
            low = int(idx.min())  # the indices span a few thousand buckets at most: count them without sorting
            sums = np.bincount(idx - low, weights=w[mask]).astype(np.int64)
            for k in np.flatnonzero(sums).tolist():
                store[k + low] = store.get(k + low, 0) + int(sums[k])

    def merge(self, other: "StreamingDistribution") -> "StreamingDistribution":
        """Add `other`'s samples into this summary (exact: counts add); returns self."""
        if other.relative_accuracy != self.relative_accuracy or other.zero_threshold != self.zero_threshold:
            raise KneecapError(
                f"cannot merge streaming statistics with relative accuracy {other.relative_accuracy} "
                f"into one with {self.relative_accuracy}",
                "build every worker's summary with the same relative_accuracy and zero_threshold",
            )
        if other.count == 0:
            return self
        self.count += other.count
        self.sum += other.sum
        self.min = other.min if self.min is None else min(self.min, other.min)
        self.max = other.max if self.max is None else max(self.max, other.max)
        self.zero_count += other.zero_count
        for mine, theirs in ((self.positive, other.positive), (self.negative, other.negative)):
            for k, c in theirs.items():
                mine[k] = mine.get(k, 0) + c
        return self

    def _order_stat(self, rank: int) -> float:
        """Estimate of the rank-th smallest value (0-based), clamped to [min, max]."""
        # (estimate, count) from the most negative bucket up
        buckets = [(-self._value(i), self.negative[i]) for i in sorted(self.negative, reverse=True)]
        buckets += [(0.0, self.zero_count)] + [(self._value(i), self.positive[i]) for i in sorted(self.positive)]
        seen = 0
        for estimate, n in buckets:
            seen += n
            if rank < seen:
                return min(max(estimate, self.min), self.max)
        return self.max  # pragma: no cover - rank < count always finds a bucket

    def quantile(self, q: float) -> float | None:
        """Estimated q-quantile (0 <= q <= 1) by the 'linear' rule; None when empty."""
        if not 0.0 <= q <= 1.0:
            raise KneecapError(f"quantile must be in [0, 1], got {q!r}", "use e.g. 0.99 for p99")
        if self.count == 0:
            return None
        return _linear(self.count, self._order_stat, q)

    def to_distribution(self) -> dict:
        """Same keys as distribution(); percentiles within relative_accuracy, the rest exact."""
        if self.count == 0:
            return empty_distribution()
        return {
            "mean": self.sum / self.count,
            **{f"p{p}": self.quantile(p / 100.0) for p in PERCENTILES},
            "max": self.max,
            "n": self.count,
        }

    def to_dict(self) -> dict:
        """JSON-safe form, to ship a summary between processes or machines (from_dict reverses it)."""
        return {
            "relative_accuracy": self.relative_accuracy,
            "zero_threshold": self.zero_threshold,
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "zero_count": self.zero_count,
            "positive": {str(k): v for k, v in sorted(self.positive.items())},
            "negative": {str(k): v for k, v in sorted(self.negative.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "StreamingDistribution":
        try:
            out = cls(float(data["relative_accuracy"]), float(data.get("zero_threshold", 1e-9)))
            out.count = int(data["count"])
            out.sum = float(data["sum"])
            out.min = None if data["min"] is None else float(data["min"])
            out.max = None if data["max"] is None else float(data["max"])
            out.zero_count = int(data.get("zero_count", 0))
            out.positive = {int(k): int(v) for k, v in data.get("positive", {}).items()}
            out.negative = {int(k): int(v) for k, v in data.get("negative", {}).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise KneecapError(
                f"malformed streaming statistics ({exc})", "pass a dict produced by StreamingDistribution.to_dict()"
            ) from None
        if out.count != out.zero_count + sum(out.positive.values()) + sum(out.negative.values()):
            raise KneecapError(
                "malformed streaming statistics: bucket counts do not add up to count",
                "pass a dict produced by StreamingDistribution.to_dict()",
            )
        return out
