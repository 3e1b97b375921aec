"""The API server's event loop in front of the simulated engine: when a request the client sent at time a reaches
the engine, given the CPU time the server's one event loop spends on each request before handing it on.

Owns that one rule; not what the per-request cost is (sim/config.py chat_frontend_ms prices it by engine, release
and chat template) nor the clock (sweep.py feeds arrivals in and hands released requests to the engine).

The rule follows asyncio's loop. BaseEventLoop._run_once (CPython Lib/asyncio/base_events.py) polls the selector
(timeout 0 while callbacks are ready), queues the I/O callbacks, then runs exactly the callbacks ready at that moment
(ntodo = len(self._ready)); a callback queued while they run (a task's next step after an await that suspends) waits
for the next iteration. vLLM's OpenAI server runs one such loop (uvicorn); its chat handler does its synchronous
work before the request first suspends (OpenAIServingChat.create_chat_completion -> _preprocess_chat, vllm/
entrypoints/openai/serving_engine.py in 0.11.0: apply_hf_chat_template at :791 runs before the tokenizer's await at
:822, the awaits before it returning at once for a text-only request to the served model), and hands the request to
the engine (engine_client.generate) only after it. So the loop
works in rounds: a round that starts at s handles, one after another, every request whose HTTP request is in by s,
at cost_s each; the engine submits they continue with run after the round, so all of them reach the engine at the
round's end. The next round starts at that end, or at the next arrival if none is waiting.

A lone request waits exactly cost_s; N requests sent together all wait N x cost_s; cost 0 changes nothing. A cost
may also grow with the request's prompt (s_per_token x its prompt tokens, on top of cost_s): gpt-oss's chat path
renders and tokenises the whole prompt on the loop (sim/config.py CHAT_FRONTEND_NOTE); a round then lasts the sum of
its requests' costs. Not modelled: the loop's other work (HTTP parsing, streaming the responses out, the tokenizer
where it runs behind an await), which shares it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


def engine_arrivals(arrivals_s: Sequence[float], cost_s: float | Sequence[float]) -> list[float]:
    """When each request reaches the engine, for requests sent at arrivals_s (seconds, in ascending order) to a
    server whose event loop spends cost_s seconds on each (one figure for all, or one per request: the module's
    rounds). O(N), same order."""
    costs = [cost_s] * len(arrivals_s) if isinstance(cost_s, (int, float)) else list(cost_s)
    if len(costs) != len(arrivals_s):
        raise ValueError(f"one cost per request: {len(costs)} costs for {len(arrivals_s)} requests")
    for c in costs:
        if c < 0 or not math.isfinite(c):
            raise ValueError(f"cost_s must be a finite number >= 0, got {c!r}")
    out: list[float] = []
    free_at = -math.inf  # the end of the last round
    i, n = 0, len(arrivals_s)
    while i < n:
        start = max(free_at, arrivals_s[i])
        j = i
        while j < n and arrivals_s[j] <= start:
            j += 1
        free_at = start + math.fsum(costs[i:j])
        out.extend([free_at] * (j - i))
        i = j
    return out


class EventLoopFrontEnd(Generic[T]):
    """engine_arrivals as the virtual clock runs it, arrival by arrival: arrive(at, item, tokens) for each request as
    its send time comes (in time order; tokens: its prompt's, priced at s_per_token on top of cost_s),
    release(now) -> the items that reach the engine by `now`, as (time, item) in order; next_s() -> when the next
    one does (math.inf: none held)."""

    def __init__(self, cost_s: float, s_per_token: float = 0.0):
        for name, v in (("cost_s", cost_s), ("s_per_token", s_per_token)):
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if cost_s == 0 and s_per_token == 0:
            raise ValueError("cost_s or s_per_token must be > 0 (with both 0 the loop changes nothing)")
        self.cost_s = cost_s
        self.s_per_token = s_per_token
        self._waiting: deque[tuple[float, float, T]] = deque()  # arrived, not yet in a round: (at, cost, item)
        self._round: list[T] = []  # the round in progress
        self._round_start = -math.inf
        self._round_end = -math.inf

    def arrive(self, at: float, item: T, tokens: int = 0) -> None:
        cost = self.cost_s + tokens * self.s_per_token
        if self._round and at <= self._round_start:  # in by the round's start: that round handles it
            self._round.append(item)
            self._round_end += cost
        else:
            self._waiting.append((at, cost, item))

    def release(self, now: float) -> list[tuple[float, T]]:
        out: list[tuple[float, T]] = []
        while True:
            if self._round:
                if self._round_end > now:
                    break
                out.extend((self._round_end, item) for item in self._round)
                self._round = []
            if not self._waiting:
                break
            start = max(self._round_end, self._waiting[0][0])
            if start > now:
                break
            end = start
            while self._waiting and self._waiting[0][0] <= start:
                _, cost, item = self._waiting.popleft()
                self._round.append(item)
                end += cost
            self._round_start = start
            self._round_end = end
        return out

    def next_s(self) -> float:
        if self._round:
            return self._round_end
        if self._waiting:
            return max(self._round_end, self._waiting[0][0])
        return math.inf

    @property
    def held(self) -> int:
        return len(self._round) + len(self._waiting)
