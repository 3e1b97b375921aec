"""Inter-token gaps pooled over records, in compact weighted form: the one vectorised ITL computation.

Owns how per-token ITL, per-chunk gaps and tokens per chunk are taken from a record's token times
(request.chunk_gaps states the rule for one record: token-bearing chunks only, gaps within a request,
a chunk carrying k tokens after a gap g gives k samples of g / k). Level summaries (summarize.py),
streaming summaries (accumulate.py) and the stable-p99 rule (workload/slices.py) all read it here.

A record's token times come from one of three places:
- chunk_times / chunk_tokens (the live client's chunks; a simulated record made with --token-times);
- a simulated record in memory: step_runs, runs of consecutive steps of the level's StepTimeline, one
  token per step. A gap between two consecutive steps is then shared by every sequence that emitted in
  both, so the samples are the timeline's step gaps, each weighted by how many sequences it separated:
  the same multiset of values as the per-token path (the same floats, ends[i+1] - ends[i]), computed in
  time per step instead of per token;
- a simulated record read back from requests.jsonl without its per-token times: token_runs
  [first s, tokens, last s], each run taken as a first token then one chunk of the rest (its tokens
  share the run's mean gap).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

from kneecap.records import RequestRecord
from kneecap.units import MS_PER_S


@dataclass
class TokenGaps:
    """Samples as (values, integer weights) numpy arrays: a value occurring w times."""

    itl_ms: object  # per-token ITL, ms
    itl_weights: object
    gap_ms: object  # per-chunk gap, ms
    gap_weights: object
    chunk_tokens: object  # tokens per token-bearing chunk
    chunk_weights: object


def _chunks(r: RequestRecord) -> tuple[Sequence[float], Sequence[int]]:
    """A record's (chunk times, tokens per chunk) when it is not on the step-timeline path."""
    if r.chunk_times or not r.token_runs:
        return r.chunk_times, r.chunk_tokens
    times: list[float] = []
    tokens: list[int] = []
    for first_s, n, last_s in r.token_runs:
        times.append(first_s)
        tokens.append(1)
        if n > 1:
            times.append(last_s)
            tokens.append(n - 1)
    return times, tokens


def _from_chunks(records: Sequence[RequestRecord]):
    """Per-token path (vectorised request.chunk_gaps over all records at once)."""
    import numpy as np

    pairs = [_chunks(r) for r in records]
    lengths = [min(len(t), len(k)) for t, k in pairs]
    total = sum(lengths)
    times = np.fromiter(chain.from_iterable(t[:m] for (t, _), m in zip(pairs, lengths)), dtype=np.float64, count=total)
    tokens = np.fromiter(chain.from_iterable(k[:m] for (_, k), m in zip(pairs, lengths)), dtype=np.int64, count=total)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    bearing = tokens > 0
    times, tokens, owner = times[bearing], tokens[bearing], owner[bearing]
    same_request = owner[1:] == owner[:-1]
    gaps_ms = (np.diff(times) * MS_PER_S)[same_request]
    gap_tokens = tokens[1:][same_request]
    ones = np.ones(gaps_ms.size, dtype=np.int64)
    return (
        gaps_ms / np.maximum(gap_tokens, 1),
        gap_tokens,
        gaps_ms,
        ones,
        tokens,
        np.ones(tokens.size, dtype=np.int64),
    )


def _from_timeline(timeline, step_runs: list) -> tuple:
    """Step-timeline path for records sharing one timeline: step gaps weighted by the sequences they separate,
    plus the gaps between one record's runs (after a preemption), one token each."""
    import numpy as np

    firsts, counts, cross_from, cross_to = [], [], [], []
    tokens = 0
    for runs in step_runs:
        prev_last = None
        for first, n in runs:
            firsts.append(first)
            counts.append(n)
            tokens += n
            if prev_last is not None:
                cross_from.append(prev_last)
                cross_to.append(first)
            prev_last = first + n - 1
    first = np.asarray(firsts, dtype=np.int64)
    n = np.asarray(counts, dtype=np.int64)
    ends = timeline.array()
    vals, weights = [], []
    multi = n > 1
    if multi.any():
        a, last = first[multi], first[multi] + n[multi] - 1  # gaps j = a .. last-1 (gap j: step j to step j+1)
        lo, hi = int(a.min()), int(last.max())
        span = hi - lo
        w = np.cumsum(
            np.bincount(a - lo, minlength=span + 1)[:span] - np.bincount(last - lo, minlength=span + 1)[:span]
        )
        gaps = np.diff(ends[lo : hi + 1]) * MS_PER_S
        keep = w > 0
        vals.append(gaps[keep])
        weights.append(w[keep])
    if cross_from:
        src, dst = np.asarray(cross_from, dtype=np.int64), np.asarray(cross_to, dtype=np.int64)
        vals.append((ends[dst] - ends[src]) * MS_PER_S)
        weights.append(np.ones(src.size, dtype=np.int64))
    v = np.concatenate(vals) if vals else np.zeros(0)
    w = np.concatenate(weights) if weights else np.zeros(0, dtype=np.int64)
    one = np.ones(1 if tokens else 0, dtype=np.int64)
    return v, w, v, w, one, one * tokens


def token_gaps(records: Sequence[RequestRecord]) -> TokenGaps:
    """Every gap of the given (completed) records, pooled, in weighted form."""
    import numpy as np

    by_timeline: dict[int, tuple] = {}
    other = []
    for r in records:
        sr = r.step_runs
        if sr is not None and not r.chunk_times:
            by_timeline.setdefault(id(sr.timeline), (sr.timeline, []))[1].append(sr.runs)
        else:
            other.append(r)
    parts = [_from_chunks(other)] if other or not by_timeline else []
    parts += [_from_timeline(tl, runs) for tl, runs in by_timeline.values()]
    cols = [np.concatenate([p[i] for p in parts]) for i in range(6)]
    return TokenGaps(*cols)
