"""How far another process's monotonic clock is from ours, from timed round trips (NTP's estimate).

Pure: takes (sent, remote, received) stamps and returns the offset of the remote clock and the
round trip it was measured with; the error of the offset is at most half that round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ClockOffset:
    """remote clock - local clock, in seconds, from the round trip with the smallest delay."""

    offset_s: float
    rtt_s: float  # that round trip; |true offset - offset_s| <= rtt_s / 2
    samples: int

    def to_remote(self, local_t: float) -> float:
        """A time on our clock as the remote clock reads it (cluster/streams.py: an actor's level epoch)."""
        return local_t + self.offset_s


def estimate_offset(samples: Iterable[tuple[float, float, float]]) -> ClockOffset:
    """NTP-style minimum-delay estimate over (local send, remote read, local receive) triples.

    The remote read happened somewhere inside [send, receive]; assuming it was in the middle errs by
    at most half the round trip, so the round trip with the least delay bounds the error best."""
    rows = [(float(a), float(r), float(b)) for a, r, b in samples]
    if not rows:
        raise ValueError("estimate_offset needs at least one round trip")
    if any(b < a for a, _, b in rows):
        raise ValueError("a round trip ended before it started (local clock not monotonic?)")
    sent, remote, received = min(rows, key=lambda row: row[2] - row[0])
    return ClockOffset(offset_s=remote - (sent + received) / 2.0, rtt_s=received - sent, samples=len(rows))
