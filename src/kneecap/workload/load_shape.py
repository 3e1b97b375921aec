"""When each request of a level goes: the one load schedule that the simulator runs on its virtual clock
(kneecap.sim.sweep) and the HTTP client on a real one (kneecap.client.driver).

Owns the load shapes, written once: a closed loop of C slots (each sends its next request a turnaround after its
previous answer; optional per-slot windows make a concurrency ramp), an open loop at given send times (a rate's,
a ramp's, a replayed trace's), a multi-turn conversation's next turn (a think time after the answer it builds on),
a trace's session request held until every answer it depends on is back (plus the client's turnaround and its own
think time), and a horizon after which nothing new is sent. Like guidellm's SchedulingStrategy, it only says when
the next request goes; the clock, the sending and the answers are the caller's:

    while not schedule.done():
        for at_s, spec in schedule.pop_due(now_s): send(spec, scheduled_at=at_s)
        wait until schedule.next_due_s() (math.inf: until an answer) or an answer; schedule.answered(...)

Pure: no clock, no I/O. Times are seconds on the caller's clock (the schedule's start is `start_s` on it).
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable, Iterator, Mapping, Sequence

from kneecap.workload import RequestSpec, arrival_offsets

MAX_REFUSALS_IN_A_ROW = 1000  # a closed-loop slot whose every request is refused at once stops sending


def open_loop_offsets(
    rate: float,
    n: int | None,
    burstiness: float = 1.0,
    seed: int = 0,
    *,
    on_s: float | None = None,
    off_s: float = 0.0,
    horizon_s: float | None = None,
    max_requests: int | None = None,
) -> list[float]:
    """Send times (seconds from the start) of an open loop at `rate` requests/s (kneecap.workload.arrival_offsets):
    n of them, or (n None) those before horizon_s, drawn from 1.5x the expected count + 16, at most max_requests."""
    if n is not None:
        return arrival_offsets(rate, n, burstiness, seed, on_s=on_s, off_s=off_s)
    n_est = int(math.ceil(rate * horizon_s * 1.5)) + 16
    if max_requests is not None:
        n_est = min(n_est, max_requests)
    return [a for a in arrival_offsets(rate, n_est, burstiness, seed, on_s=on_s, off_s=off_s) if a < horizon_s]


class LoadSchedule:
    """One phase's sends. source: its requests in send order (a multi-turn phase's: its conversations' first
    turns); total: how many it sends at most (every turn and every refused request counts; None: no limit);
    slots: a closed loop's concurrency, or windows: one (start_s, end_s or None) per slot, relative to the start
    (a slot sends only inside its window); offsets: an open loop's send times from the start, one per request;
    horizon_s: nothing new goes once this long has passed since the start (an open loop's time past it ends the
    schedule; a closed-loop slot answered at or after it sends no more); follow: {a conversation turn's request id:
    the next turn}, sent think_time_s after an answer that is ok; turnaround_s: from an answer to the next send it
    frees (the client's own delay); answers: {request id: when its answer came back}, shared by the phases of a
    level so a trace's request whose answers came back in an earlier phase does not wait for them."""

    def __init__(
        self,
        source: Iterable[RequestSpec],
        *,
        total: int | None = None,
        slots: int | None = None,
        windows: Sequence[tuple[float, float | None]] = (),
        offsets: Sequence[float] = (),
        horizon_s: float = math.inf,
        follow: Mapping[str, RequestSpec] | None = None,
        think_time_s: float = 0.0,
        turnaround_s: float = 0.0,
        start_s: float = 0.0,
        answers: dict[str, float] | None = None,
    ):
        self._source: Iterator[RequestSpec] = iter(source)
        self.total = total
        self.follow = follow or {}
        self.think_time_s, self.turnaround_s = think_time_s, turnaround_s
        self.horizon_at = start_s + horizon_s
        self.answers = {} if answers is None else answers
        self.sent = 0  # requests popped (sent, or refused at once)
        self.last_answer_s = start_s  # the latest answer of this schedule's requests came back then
        self._outstanding: dict[str, int | None] = {}  # request id popped, not answered: its slot (None: open loop)
        self.closed_loop = bool(windows) or slots is not None
        # closed loop: (when, order, the request to send or None for the source's next, slot) earliest first (a
        # heap: a conversation's next turn, after a think time, may fall after another slot's next request)
        self._pending: list[tuple[float, int, RequestSpec | None, int]] = []
        self._order = 0
        self._ends: list[float] = []  # each slot's window end (inf: none)
        self._retry: list[tuple[float, int]] = []  # (when, slot) of a request refused at once: the slot goes again
        self._refusals: dict[int, int] = {}  # a slot's refusals in a row
        spans = list(windows) if windows else [(0.0, None)] * (slots or 0)
        for slot, (begin, end) in enumerate(spans):
            self._ends.append(math.inf if end is None else start_s + end)
            if begin < horizon_s:
                self._push(start_s + begin, None, slot)
        # open loop: send times in order; a trace's request waits while an answer it depends on is out (held: {an
        # answer it waits for: [its id]}; waiting: {its id: (its own time, it, the answers still out)}), then goes
        # at the later of its own time and the last of those answers plus the turnaround and its think time
        self._arrivals = [start_s + a for a in offsets]
        self._next_arrival = 0
        self._seen: set[str] = set()  # the open loop's requests so far (only these are waited for)
        self._held: dict[str, list[str]] = {}
        self._waiting: dict[str, tuple[float, RequestSpec, set[str]]] = {}
        self._released: list[tuple[float, int, RequestSpec]] = []

    def _push(self, at: float, spec: RequestSpec | None, slot: int) -> None:
        heapq.heappush(self._pending, (at, self._order, spec, slot))
        self._order += 1

    def _after_answers(self, at: float, spec: RequestSpec) -> float:
        last = max((self.answers[a] for a in spec.after_ids if a in self.answers), default=-math.inf)
        return max(at, last + self.turnaround_s + spec.think_s)

    def _take(self, at: float, spec: RequestSpec | None, slot: int | None) -> tuple[float, RequestSpec] | None:
        """Count a send of `spec` (None: the source's next) at `at`; None when the phase has sent all it may."""
        if self.total is not None and self.sent >= self.total:
            return None
        if spec is None:
            spec = next(self._source, None)
            if spec is None:
                return None
        self.sent += 1
        self._outstanding[spec.request_id] = slot
        return at, spec

    def pop_next(self, now_s: float) -> tuple[float, RequestSpec] | None:
        """The next request due by now_s and the time it was due (its scheduled send time), or None. A caller
        that learns at once that a request was refused says so (answered(..., refused=True)) before the next pop."""
        while self._retry:
            at, slot = self._retry.pop()
            got = self._take(at, None, slot)
            if got is not None:
                return got
        arrivals = self._arrivals
        while self._next_arrival < len(arrivals) and arrivals[self._next_arrival] <= now_s:
            at = arrivals[self._next_arrival]
            self._next_arrival += 1
            if at > self.horizon_at:
                self._next_arrival = len(arrivals)
                break
            spec = next(self._source, None)
            if spec is None:
                break
            self._seen.add(spec.request_id)
            if spec.after_ids:
                out = {a for a in spec.after_ids if a in self._seen and a not in self.answers}
                if out:
                    self._waiting[spec.request_id] = (at, spec, out)
                    for a in out:
                        self._held.setdefault(a, []).append(spec.request_id)
                    continue
                if self._after_answers(at, spec) > at:
                    heapq.heappush(self._released, (self._after_answers(at, spec), spec.index, spec))
                    continue
            got = self._take(at, spec, None)
            if got is not None:
                return got
        while self._released and self._released[0][0] <= now_s:
            at, _, spec = heapq.heappop(self._released)
            got = self._take(at, spec, None)
            if got is not None:
                return got
        while self._pending and self._pending[0][0] <= now_s:
            at, _, spec, slot = heapq.heappop(self._pending)
            got = self._take(at, spec, slot)
            if got is not None:
                return got
        return None

    def pop_due(self, now_s: float) -> list[tuple[float, RequestSpec]]:
        """Every request due by now_s, each with the time it was due, in send order."""
        out = []
        while (got := self.pop_next(now_s)) is not None:
            out.append(got)
        return out

    def next_due_s(self) -> float:
        """When the next request known now is due (math.inf: none until an answer comes back)."""
        until = self._arrivals[self._next_arrival] if self._next_arrival < len(self._arrivals) else math.inf
        if self._retry:
            until = min(until, self._retry[-1][0])
        if self._released and self._released[0][0] < until:
            until = self._released[0][0]
        return self._pending[0][0] if self._pending and self._pending[0][0] < until else until

    def answered(self, request_id: str, ok: bool, at_s: float, *, refused: bool = False) -> None:
        """A request's answer came back at at_s (ok: it succeeded). It frees its closed-loop slot (the slot's next
        request goes turnaround_s later, none once the slot's window or the horizon has passed; a conversation's
        next turn think_time_s after that when the answer is ok, else the next conversation), and releases the
        trace requests that waited for it. refused: the request was refused at once, on sending (the simulator's
        admission): its slot sends again at at_s, with no turnaround, and stops after MAX_REFUSALS_IN_A_ROW."""
        self.last_answer_s = max(self.last_answer_s, at_s)
        self.answers[request_id] = at_s
        slot = self._outstanding.pop(request_id, None)
        for child_id in self._held.pop(request_id, ()):
            at, child, out = self._waiting[child_id]
            out.discard(request_id)
            if not out:
                del self._waiting[child_id]
                heapq.heappush(self._released, (self._after_answers(at, child), child.index, child))
        if slot is None:
            return
        if refused:
            self._refusals[slot] = self._refusals.get(slot, 0) + 1
            if self._refusals[slot] < MAX_REFUSALS_IN_A_ROW:
                self._retry.append((at_s, slot))
            return
        self._refusals[slot] = 0
        if at_s >= self.horizon_at or at_s >= self._ends[slot]:
            return
        nxt = self.follow.get(request_id) if ok else None
        at = at_s + self.turnaround_s
        if nxt is not None:  # the conversation's next turn, after the user's think time
            self._push(at + self.think_time_s, nxt, slot)
        else:  # the slot's next request (a new conversation)
            self._push(at, None, slot)

    def done(self) -> bool:
        """Nothing more will be sent: the phase sent all it may, or nothing is due and no answer is out."""
        if self.total is not None and self.sent >= self.total:
            return True
        return self.next_due_s() == math.inf and not self._outstanding
