"""Bounded, mergeable level summaries: records go in one at a time, memory stays constant.

For very long levels and for sweeps spread over worker processes or machines: each worker
feeds its records to a LevelAccumulator, ships `to_dict()`, and the parent merges them; the
merged summary has the same keys as summarize_level. Counts, token totals, throughput, means,
maxima and goodput are exact; percentiles come from StreamingDistribution, within
`percentile_relative_error` of the exact ones (docs/metrics.md, "Bounded, mergeable statistics").
"""

from __future__ import annotations

from typing import Iterable, Mapping

from kneecap.errors import KneecapError
from kneecap.metrics import request as req
from kneecap.metrics.slo import per_request_budgets_ms, request_is_good
from kneecap.metrics.stats import StreamingDistribution
from kneecap.metrics.token_gaps import token_gaps
from kneecap.metrics.summarize import (
    MAX_MISMATCH_EXAMPLES,
    add_token_mismatch,
    as_slo,
    attach_goodput_and_slo,
    new_token_mismatch,
    wall_time_s,
)
from kneecap.records import TIMEOUT, RequestRecord
from kneecap.units import MS_PER_S

# (summary key, per-request function in seconds); from-scheduled ones only appear on rate levels
_REQUEST_METRICS = (
    ("ttft_ms", req.ttft_s),
    ("ttft_answer_ms", req.ttft_answer_s),
    ("tpot_ms", req.tpot_s),
    ("e2e_ms", req.e2e_s),
    ("ttft_from_scheduled_ms", req.ttft_from_scheduled_s),
    ("e2e_from_scheduled_ms", req.e2e_from_scheduled_s),
)
_DISTRIBUTIONS = tuple(k for k, _ in _REQUEST_METRICS) + (
    "itl_ms",
    "chunk_gap_ms",
    "tokens_per_chunk",
    "schedule_lag_ms",
)
_REQUEST_COUNTS = ("requests", "completed", "failed", "timeouts", "failed_on_reused_connection", "warmup_excluded")
_COUNTERS = _REQUEST_COUNTS + ("output_tokens", "input_tokens", "good_requests", "good_output_tokens")
_BATCH_RECORDS = 1024  # completed records held before their samples go into the distributions (bounded memory)


class LevelAccumulator:
    """Running summary of one level. `add` records (warmup included: they are counted and
    skipped), `merge` another accumulator of the same level, `summary()` for the level dict."""

    def __init__(
        self, *, concurrency=None, rate=None, slo: Mapping | str | None = None, relative_accuracy: float = 0.01
    ):
        self.concurrency = concurrency
        self.rate = rate
        self.slo = as_slo(slo)
        self._budgets = per_request_budgets_ms(self.slo) if self.slo else {}
        self.relative_accuracy = relative_accuracy
        self.counts = {k: 0 for k in _COUNTERS}
        self.first_sent_at: float | None = None
        self.last_end_at: float | None = None
        self.errors: dict = {}
        self.token_mismatch = new_token_mismatch()
        self.levels_seen: set = set()
        self.concurrency_seen: set = set()
        self.rate_seen: set = set()
        self.dists = {k: StreamingDistribution(relative_accuracy) for k in _DISTRIBUTIONS}
        self._pending: list[RequestRecord] = []  # completed records whose samples are not yet in dists

    def add(self, r: RequestRecord) -> None:
        c = self.counts
        self.levels_seen.add(r.level)
        if r.warmup:
            c["warmup_excluded"] += 1
            return
        if r.concurrency is not None:
            self.concurrency_seen.add(r.concurrency)
        if r.rate is not None:
            self.rate_seen.add(r.rate)
        c["requests"] += 1
        if r.sent_at is not None:
            self.first_sent_at = r.sent_at if self.first_sent_at is None else min(self.first_sent_at, r.sent_at)
        if r.end_at is not None:
            self.last_end_at = r.end_at if self.last_end_at is None else max(self.last_end_at, r.end_at)
        lag = req.schedule_lag_s(r)
        if lag is not None:
            self.dists["schedule_lag_ms"].add(lag * MS_PER_S)
        if not r.ok:
            c["failed"] += 1
            c["timeouts"] += r.status == TIMEOUT or r.error_kind == TIMEOUT
            c["failed_on_reused_connection"] += bool(r.extra.get("reused_connection"))
            kind = r.error_kind or r.status
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        c["completed"] += 1
        n = r.num_output_tokens
        c["output_tokens"] += n
        c["input_tokens"] += req.input_tokens(r)
        self._pending.append(r)
        if len(self._pending) >= _BATCH_RECORDS:
            self._flush()
        add_token_mismatch(self.token_mismatch, r)
        if self.slo and request_is_good(r, self._budgets, from_scheduled=self.rate is not None or r.rate is not None):
            c["good_requests"] += 1
            c["good_output_tokens"] += n

    def _flush(self) -> None:
        """The pending records' samples into the distributions, a batch at a time: one vectorised token_gaps
        and one add_many per distribution (a call per record cost about 1 ms, minutes for a 30-minute level).
        The distributions' bucket counts, min and max do not depend on how the records are batched."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        for key, fn in _REQUEST_METRICS:
            values = [v * MS_PER_S for v in map(fn, batch) if v is not None]
            if values:
                self.dists[key].add_many(values)
        g = token_gaps(batch)  # the same samples as summarize_level's
        if g.gap_ms.size:
            self.dists["chunk_gap_ms"].add_many(g.gap_ms, counts=g.gap_weights)
            self.dists["itl_ms"].add_many(g.itl_ms, counts=g.itl_weights)
        if g.chunk_tokens.size:
            self.dists["tokens_per_chunk"].add_many(g.chunk_tokens, counts=g.chunk_weights)

    def add_many(self, records: Iterable[RequestRecord]) -> None:
        for r in records:
            self.add(r)

    def merge(self, other: "LevelAccumulator") -> "LevelAccumulator":
        """Fold another accumulator of the same level (e.g. another worker's) into this one."""
        if other.slo != self.slo:
            raise KneecapError(
                "cannot merge level summaries built with different SLOs", "give every worker the same --slo"
            )
        self._flush()
        other._flush()
        for k in _COUNTERS:
            self.counts[k] += other.counts[k]
        if other.first_sent_at is not None:
            self.first_sent_at = (
                other.first_sent_at if self.first_sent_at is None else min(self.first_sent_at, other.first_sent_at)
            )
        if other.last_end_at is not None:
            self.last_end_at = (
                other.last_end_at if self.last_end_at is None else max(self.last_end_at, other.last_end_at)
            )
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        tm = self.token_mismatch
        for k in ("requests", "output", "prompt", "output_unreported", "output_vs_chunks"):
            tm[k] += other.token_mismatch[k]
        tm["examples"] = (tm["examples"] + other.token_mismatch["examples"])[:MAX_MISMATCH_EXAMPLES]
        self.levels_seen |= other.levels_seen
        self.concurrency_seen |= other.concurrency_seen
        self.rate_seen |= other.rate_seen
        for k in _DISTRIBUTIONS:
            self.dists[k].merge(other.dists[k])
        return self

    def summary(self, duration_s: float | None = None) -> dict:
        """The level summary (summarize_level's keys); duration_s as in summarize_level."""
        self._flush()
        c = self.counts
        wall_s = wall_time_s(duration_s, self.first_sent_at, self.last_end_at)

        def per_s(n):
            return n / wall_s if wall_s else None

        out: dict = {}
        if self.concurrency is not None or self.rate is not None:
            if self.concurrency is not None:
                out["concurrency"] = self.concurrency
            if self.rate is not None:
                out["rate"] = self.rate
        elif len(self.rate_seen) == 1:
            out["rate"] = next(iter(self.rate_seen))
        elif len(self.concurrency_seen) == 1:
            out["concurrency"] = next(iter(self.concurrency_seen))
        else:
            out["concurrency"] = None
        if len(self.levels_seen) == 1:
            out["level"] = next(iter(self.levels_seen))
        out.update({k: c[k] for k in _REQUEST_COUNTS})
        out.update(
            {
                "duration_s": wall_s,
                "output_tokens": c["output_tokens"],
                "input_tokens": c["input_tokens"],
                "output_tok_s": per_s(c["output_tokens"]),
                "input_tok_s": per_s(c["input_tokens"]),
                "total_tok_s": per_s(c["output_tokens"] + c["input_tokens"]),
                "request_s": per_s(c["completed"]),
            }
        )
        for key in ("ttft_ms", "ttft_answer_ms", "itl_ms", "tpot_ms", "e2e_ms", "chunk_gap_ms", "tokens_per_chunk"):
            out[key] = self.dists[key].to_distribution()
        if "rate" in out:
            out["ttft_from_scheduled_ms"] = self.dists["ttft_from_scheduled_ms"].to_distribution()
            out["e2e_from_scheduled_ms"] = self.dists["e2e_from_scheduled_ms"].to_distribution()
        out["schedule_lag_ms"] = self.dists["schedule_lag_ms"].to_distribution()
        out["errors"] = dict(sorted(self.errors.items()))
        out["token_mismatch"] = {**self.token_mismatch, "examples": list(self.token_mismatch["examples"])}
        attach_goodput_and_slo(out, self.slo, c["good_requests"], c["good_output_tokens"], wall_s)
        out["percentile_relative_error"] = self.relative_accuracy
        return out

    def to_dict(self) -> dict:
        """JSON-safe state, to ship between processes (from_dict reverses it)."""
        self._flush()
        return {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "slo": self.slo,
            "relative_accuracy": self.relative_accuracy,
            "counts": dict(self.counts),
            "first_sent_at": self.first_sent_at,
            "last_end_at": self.last_end_at,
            "errors": dict(self.errors),
            "token_mismatch": self.token_mismatch,
            "levels_seen": sorted(self.levels_seen),
            "concurrency_seen": sorted(self.concurrency_seen),
            "rate_seen": sorted(self.rate_seen),
            "dists": {k: d.to_dict() for k, d in self.dists.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "LevelAccumulator":
        try:
            out = cls(
                concurrency=data["concurrency"],
                rate=data["rate"],
                slo=data["slo"],
                relative_accuracy=data["relative_accuracy"],
            )
            out.counts = {k: int(data["counts"][k]) for k in _COUNTERS}
            out.first_sent_at = data["first_sent_at"]
            out.last_end_at = data["last_end_at"]
            out.errors = dict(data["errors"])
            out.token_mismatch = {**data["token_mismatch"], "examples": list(data["token_mismatch"]["examples"])}
            out.levels_seen = set(data["levels_seen"])
            out.concurrency_seen = set(data["concurrency_seen"])
            out.rate_seen = set(data["rate_seen"])
            out.dists = {k: StreamingDistribution.from_dict(data["dists"][k]) for k in _DISTRIBUTIONS}
        except (KeyError, TypeError, ValueError) as exc:
            raise KneecapError(
                f"malformed level accumulator ({exc!r})", "pass a dict produced by LevelAccumulator.to_dict()"
            ) from None
        return out


EXACT_RECORDS_LIMIT = 20_000  # levels up to this many records are summarised exactly (all in memory)


def summarize_stream(
    records: Iterable[RequestRecord],
    *,
    concurrency=None,
    rate=None,
    duration_s: float | None = None,
    slo: Mapping | str | None = None,
    exact_limit: int = EXACT_RECORDS_LIMIT,
) -> dict:
    """A level summary from an iterator of records with bounded memory.

    Up to `exact_limit` records: exactly summarize_level. Beyond it the records stream through a
    LevelAccumulator (counts, throughput, means, maxima exact; percentiles within its stated relative
    error, reported as `percentile_relative_error`), so a long level never holds its records at once.
    """
    from kneecap.metrics.summarize import summarize_level

    it = iter(records)
    buffered: list[RequestRecord] = []
    for r in it:
        buffered.append(r)
        if len(buffered) > exact_limit:
            break
    else:
        return summarize_level(buffered, concurrency=concurrency, rate=rate, duration_s=duration_s, slo=slo)
    acc = LevelAccumulator(concurrency=concurrency, rate=rate, slo=slo)
    acc.add_many(buffered)
    buffered.clear()
    for r in it:
        acc.add(r)
    return acc.summary(duration_s)
