"""Time slices of a level's records, metrics per slice, and the "stable p99" rule that ends a level.

Owns: cutting records into fixed-length slices of the run (a request belongs to the slice in
which it was sent), one level summary per slice (with the ramp's load at the slice's middle), and
p99_stable: a level may end once the p99 estimates of TTFT and ITL, taken over all records that
finished by the end of each window, moved less than a relative tolerance over the last windows.
Pure over the records so far; the level runner decides when to call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from kneecap.errors import KneecapError
from kneecap.metrics.stats import distribution, weighted_distribution
from kneecap.metrics.summarize import summarize_level
from kneecap.records import RequestRecord
from kneecap.units import MS_PER_S
from kneecap.workload.ramps import Ramp


@dataclass(frozen=True)
class TimeSlice:
    index: int
    start_s: float  # on the records' clock
    end_s: float
    records: tuple[RequestRecord, ...]


def time_slices(
    records: Sequence[RequestRecord], slice_s: float, t0: float | None = None, num_slices: int | None = None
) -> list[TimeSlice]:
    """Records cut into [t0 + k*slice_s, t0 + (k+1)*slice_s) by sent_at (t0: the first sent_at).

    Records never sent (sent_at None) are left out. Empty slices inside the run are kept, so
    slice k always starts at t0 + k * slice_s; with num_slices there are exactly that many (a ramp's
    last slices are there even when nothing was sent in them; records past the last one are left out).
    """
    if not slice_s > 0:
        raise KneecapError(f"slice length must be positive, got {slice_s!r} s", "pass e.g. 10 (seconds)")
    sent = [r for r in records if r.sent_at is not None]
    if not sent:
        return []
    start = min(r.sent_at for r in sent) if t0 is None else t0
    n = num_slices if num_slices is not None else int(math.floor((max(r.sent_at for r in sent) - start) / slice_s)) + 1
    buckets: list[list[RequestRecord]] = [[] for _ in range(n)]
    for r in sent:
        k = int(math.floor((r.sent_at - start) / slice_s))
        if 0 <= k < n:
            buckets[k].append(r)
    return [
        TimeSlice(index=k, start_s=start + k * slice_s, end_s=start + (k + 1) * slice_s, records=tuple(b))
        for k, b in enumerate(buckets)
    ]


def slice_metrics(
    records: Sequence[RequestRecord],
    slice_s: float,
    *,
    ramp: Ramp | None = None,
    t0: float | None = None,
    num_slices: int | None = None,
) -> list[dict]:
    """One summarize_level summary per time slice (duration = the slice), with the ramp's load at its middle.

    Each entry: {index, start_s, end_s, load, summary}. load is ramp.value_at(middle - t0) when a
    ramp is given, else None. Throughput counts the tokens of requests sent in the slice over the
    slice's length.
    """
    slices = time_slices(records, slice_s, t0, num_slices)
    if not slices:
        return []
    origin = slices[0].start_s
    out = []
    for s in slices:
        mid = (s.start_s + s.end_s) / 2 - origin
        summary = summarize_level(s.records, duration_s=slice_s) if s.records else None
        out.append(
            {
                "index": s.index,
                "start_s": s.start_s,
                "end_s": s.end_s,
                "load": ramp.value_at(mid) if ramp is not None else None,
                "summary": summary,
            }
        )
    return out


@dataclass(frozen=True)
class StableP99:
    """The stable-p99 verdict: stable or not, and the estimates it compared (ms; None = too few samples)."""

    stable: bool
    why: str
    window_ends_s: tuple[float, ...]
    ttft_p99_ms: tuple[float | None, ...]
    itl_p99_ms: tuple[float | None, ...]


def check_until_stable(fraction: float | None, window_s: float, *, closed_duration: bool, without: str) -> None:
    """--until-stable's checks, for bench and simulate alike: a fraction in (0, 1), on a closed-loop --duration
    level (`closed_duration`), with a finite --stable-window-s > 0; `without` names the flags it does not go with."""
    if fraction is None:
        return
    if not 0 < fraction < 1:
        raise KneecapError(
            f"--until-stable must be a fraction between 0 and 1, got {fraction}",
            "pass e.g. --until-stable 0.05 (p99s within 5% over the last 3 windows)",
        )
    if not closed_duration:
        raise KneecapError(
            "--until-stable ends a closed-loop --duration level early",
            f"pass --concurrency C --duration S (the longest a level runs), without {without}",
        )
    if not (window_s > 0 and math.isfinite(window_s)):
        raise KneecapError(
            f"--stable-window-s must be a finite number > 0, got {window_s}", "pass e.g. --stable-window-s 10"
        )


def p99_stable(
    records: Sequence[RequestRecord],
    window_s: float,
    *,
    windows: int = 3,
    rel_tol: float = 0.05,
    min_samples: int = 50,
    now_s: float | None = None,
) -> StableP99:
    """Has the level's p99 TTFT and ITL settled?

    Estimates are taken at the ends of the last windows + 1 whole windows since the first send
    (t0 + k*window_s, up to now_s, default the last end_at), each over the completed, non-warmup
    records that ended by then; the verdict carries those window ends and estimates. Stable when
    each of the last `windows` estimates moved less than rel_tol (relative) from the one before,
    for both TTFT and ITL, and every compared estimate had >= min_samples samples.
    """
    if not window_s > 0 or windows < 1 or not 0 < rel_tol < 1 or min_samples < 1:
        raise KneecapError(
            "stable-p99 needs window_s > 0, windows >= 1, 0 < rel_tol < 1 and min_samples >= 1",
            "e.g. window_s=10, windows=3, rel_tol=0.05, min_samples=50",
        )
    done = sorted(
        (r for r in records if r.ok and not r.warmup and r.end_at is not None and r.sent_at is not None),
        key=lambda r: r.end_at,
    )
    if not done:
        return StableP99(False, "no completed request yet", (), (), ())
    t0 = min(r.sent_at for r in done)
    now = max(r.end_at for r in done) if now_s is None else now_s
    count = int(math.floor((now - t0) / window_s))
    ends = tuple(t0 + k * window_s for k in range(max(1, count - windows), count + 1))  # only the compared ones
    import numpy as np

    from kneecap.metrics.token_gaps import token_gaps

    ttft_ms = np.array(
        [(r.first_token_at - r.sent_at) * MS_PER_S if r.first_token_at is not None else np.nan for r in done],
        dtype=np.float64,
    )
    end_times = np.array([r.end_at for r in done], dtype=np.float64)  # sorted: done is ordered by end_at
    ttft: list[float | None] = []
    itl: list[float | None] = []
    for end in ends:
        m = int(np.searchsorted(end_times, end, side="right"))  # records that ended by `end`
        t = ttft_ms[:m]
        t = t[~np.isnan(t)]
        ttft.append(distribution(t)["p99"] if t.size >= min_samples else None)
        g = token_gaps(done[:m])  # the same per-token ITL as summarize_level
        itl.append(
            weighted_distribution(g.itl_ms, g.itl_weights)["p99"] if int(g.itl_weights.sum()) >= min_samples else None
        )
    verdict = StableP99(False, "", ends, tuple(ttft), tuple(itl))
    if count < windows + 1:
        return replace(verdict, why=f"{count} whole windows of {window_s:g} s so far, {windows + 1} needed")
    for name, series in (("TTFT", ttft), ("ITL", itl)):
        tail = series[-(windows + 1) :]
        if any(v is None for v in tail):
            return replace(verdict, why=f"fewer than {min_samples} {name} samples in a compared window")
        for prev, cur in zip(tail, tail[1:]):
            moved = abs(cur - prev) / prev if prev > 0 else (0.0 if cur == prev else math.inf)
            if moved >= rel_tol:
                return replace(verdict, why=f"p99 {name} moved {moved:.1%} in a window (tolerance {rel_tol:.0%})")
    return replace(verdict, stable=True, why=f"p99 TTFT and ITL moved < {rel_tol:.0%} over the last {windows} windows")


RAMP_SLICES = 10  # a ramp's metrics in this many equal time slices


def ramp_slices(
    records: Sequence[RequestRecord], ramp: Ramp, *, dimension: str = "rate", t0: float | None = None
) -> list[dict]:
    """A ramp's level cut into RAMP_SLICES slices by send time: the target load at each slice's middle
    (target_rate in requests/s, or target_concurrency in streams) and what the slice's requests saw.
    The rows summary.json's level carries under `slices`, for simulate and bench alike."""
    key = "target_rate" if dimension == "rate" else "target_concurrency"
    rows = []
    for row in slice_metrics(
        [r for r in records if not r.warmup], ramp.duration_s / RAMP_SLICES, ramp=ramp, t0=t0, num_slices=RAMP_SLICES
    ):
        # exactly RAMP_SLICES rows: an empty last slice is a row with 0 requests; a request whose send stamp fell a
        # hair after the ramp's end is not the ramp's
        s = row["summary"] or {}
        rows.append(
            {
                "index": row["index"],
                "start_s": row["start_s"],
                "end_s": row["end_s"],
                key: row["load"],
                "requests": s.get("requests", 0),
                "completed": s.get("completed", 0),
                "output_tok_s": s.get("output_tok_s"),
                "ttft_ms": s.get("ttft_ms"),
                "itl_ms": s.get("itl_ms"),
            }
        )
    return rows
