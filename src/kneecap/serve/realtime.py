"""The simulated engine against the wall clock: one asyncio task steps kneecap.sim.engine.Engine and releases
each step's tokens when the step's simulated end time comes round on the wall clock.

Owns the virtual <-> wall mapping (wall_s = start + virtual_s x time_scale), per-request delivery state
(a token count and an asyncio.Event, no per-token queue), aborts, and the server's counters; not the
scheduling or step times (kneecap.sim) nor HTTP (app.py).

Semantics. A request arriving while a step runs joins the queue and is scheduled in the next step, as in
a real engine. The task computes a step when it starts (at the previous step's end, or at the arrival
that wakes an idle engine), sleeps until the step's end, then hands out its tokens. A request is stamped
with its arrival time on the virtual clock and joins only steps that start at or after it, and an idle
engine's step starts at the arrival that woke it, not when the event loop got round to the engine task: a
burst of requests that reach the server in one event-loop turn is taken up as an engine takes them up, the
first alone and the others in the next step, whatever the host's lag (kneecap simulate's engine does the
same). If the process falls behind the wall clock (a busy event loop), the engine keeps its own virtual
clock and catches up: the engine's exact decode fast path advances every step that should already have
started in one call, and their tokens go out at once (later than simulated: the lag is exposed as
`kneecap:lag_seconds`).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.serve.prefix import PrefixIndex
from kneecap.workload import RequestSpec

MAX_STEPS_PER_CALL = 4096  # steps one catch-up call may advance (bounds the work between two yields)
STEP_TIMES_KEPT = 4096  # the engine forgets finished steps' end times past this many (memory bounded over days)
ARRIVAL_EPSILON_S = 1e-9  # a step may start at "now" in virtual time


class RequestSlot:
    """Delivery state of one request: how many output tokens are ready, whether it ended, and its wake-up."""

    __slots__ = ("request_id", "prompt_tokens", "max_tokens", "ready", "done", "error", "wake", "cached_tokens")

    def __init__(self, request_id: str, prompt_tokens: int, max_tokens: int):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.ready = 0  # output tokens the engine has produced so far
        self.done = False
        self.error: str | None = None
        self.wake = asyncio.Event()
        self.cached_tokens: int | None = None  # prompt tokens the prefix cache held (set when it finishes)


@dataclass
class ServerCounters:
    """Lifetime counters exposed at /metrics (vLLM names in prom.py)."""

    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished_total: int = 0
    requests_aborted_total: int = 0
    max_lag_s: float = 0.0
    lag_s: float = 0.0


class RealtimeEngine:
    """Wraps one Engine (the whole server's life: one KV pool, one prefix cache) on the running event loop."""

    def __init__(self, target, *, time_scale: float = 1.0, clock=time.monotonic):
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise KneecapError(
                f"--time-scale must be a positive number, got {time_scale!r}",
                "pass e.g. --time-scale 1 (real time) or 0.5 (twice as fast)",
            )
        self.target = target
        self.engine = target.new_engine()
        self.time_scale = float(time_scale)
        self.clock = clock
        self.start_wall = clock()
        self.virtual_t = 0.0  # start of the engine's next step, virtual seconds
        self.slots: dict[str, RequestSlot] = {}
        self.counters = ServerCounters()
        self.prefix_index = PrefixIndex(self.engine.block_size) if self.engine.config.enable_prefix_caching else None
        self._arrived = asyncio.Event()
        self._first_arrival_v: float | None = None  # the first arrival since the engine began waiting for one
        self._next_index = 0
        self._force_exact = False  # after an abort, let the scheduler look again before any fast-path run
        self._task: asyncio.Task | None = None
        self.failure: str | None = None

    # --- clock ----------------------------------------------------------------------------------
    def virtual_now(self) -> float:
        return (self.clock() - self.start_wall) / self.time_scale

    def wall_at(self, virtual_s: float) -> float:
        return self.start_wall + virtual_s * self.time_scale

    # --- requests -------------------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, prompt_ids=None) -> RequestSlot:
        """Queue a request now. prompt_ids (token ids) let the prefix cache find shared leading blocks.
        Raises KneecapError if it can never fit the KV pool (the server answers 400)."""
        if self.failure:
            raise KneecapError(f"the simulated engine stopped: {self.failure}", "restart kneecap serve")
        index = self._next_index
        self._next_index += 1
        rid = f"cmpl-{index}"
        group, shared = (None, 0)
        if self.prefix_index is not None and prompt_ids:
            group, shared = self.prefix_index.assign(prompt_ids)
        spec = RequestSpec(
            index=index,
            request_id=rid,
            class_name="serve",
            input_tokens=prompt_tokens,
            output_tokens=max_tokens,
            prefix_group=group,
            prefix_tokens=min(shared, prompt_tokens),
        )
        at = self.virtual_now()
        rejected = self.engine.add_request(spec, at=at)
        if rejected is not None:
            raise KneecapError(
                rejected.error_message or "request exceeds the KV pool", "send a shorter prompt or max_tokens"
            )
        slot = RequestSlot(rid, prompt_tokens, max_tokens)
        self.slots[rid] = slot
        if self._first_arrival_v is None:
            self._first_arrival_v = at
        self._arrived.set()
        return slot

    def reset_prefix_cache(self) -> bool:
        """vLLM's /reset_prefix_cache on this engine's pool (refused while requests hold blocks)."""
        return self.engine.blocks.reset_prefix_cache()

    def abort(self, slot: RequestSlot) -> None:
        """The client went away: drop the request from the engine and free its KV blocks."""
        if slot.done or self.slots.pop(slot.request_id, None) is None:
            return
        slot.done = True
        slot.error = "aborted"
        self.engine.abort(slot.request_id)
        self.counters.requests_aborted_total += 1
        self._force_exact = True

    # --- the engine task ------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kneecap-serve-engine")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        try:
            await self._loop()
        except Exception as exc:  # keep the server answering: fail every open request with one message
            self.failure = f"{type(exc).__name__}: {exc}"
            print(f"error: simulated engine stopped: {self.failure}", file=sys.stderr)
            for slot in list(self.slots.values()):
                slot.error = self.failure
                slot.done = True
                slot.wake.set()
            self.slots.clear()

    async def _wait_for_arrival(self) -> None:
        """Sleep until a request arrives; the next step starts at its arrival on the virtual clock (the time the
        event loop took to wake this task is the host's, not the engine's)."""
        self._arrived.clear()
        self._first_arrival_v = None
        await self._arrived.wait()
        first = self._first_arrival_v
        self.virtual_t = max(self.virtual_t, first if first is not None else self.virtual_now())

    def _hold_later_arrivals(self, start: float) -> list:
        """Take out of the queue the requests that arrived after `start` (at its tail: requests queue in arrival
        order, preempted ones go back to its head), so that a step starting at `start` does not take them."""
        waiting = self.engine.scheduler.waiting
        held = []
        while waiting and waiting[-1].arrival_at > start + ARRIVAL_EPSILON_S:
            held.append(waiting.pop())
        held.reverse()
        return held

    async def _loop(self) -> None:
        engine = self.engine
        while True:
            if not engine.has_work:
                self.counters.lag_s = 0.0  # idle: nothing is late
                await self._wait_for_arrival()
                continue
            now_v = self.virtual_now()
            lag = now_v - self.virtual_t
            self.counters.lag_s = max(0.0, lag)
            self.counters.max_lag_s = max(self.counters.max_lag_s, self.counters.lag_s)
            max_steps = 1 if self._force_exact else MAX_STEPS_PER_CALL
            self._force_exact = False
            until = max(self.virtual_t, now_v) + ARRIVAL_EPSILON_S
            held = self._hold_later_arrivals(self.virtual_t)
            if held:  # a catch-up run stops before the step that the first of them joins
                until = min(until, held[0].arrival_at)
            try:
                out = engine.step(self.virtual_t, until=until, max_steps=max_steps)
            finally:
                engine.scheduler.waiting.extend(held)
            if out is None and held:  # nothing runnable before the next arrival, which is already in
                self.virtual_t = held[0].arrival_at
                continue
            if out is None:  # nothing runnable until something arrives or ends
                await self._wait_for_arrival()
                continue
            self.virtual_t = out.ended_at
            slept = False
            if out.num_steps == 1:
                slept = await self._sleep_until(out.ended_at)
                self._deliver(out.emitted, None)  # one step: all its tokens (a speculative step keeps several)
            else:
                ends = engine.step_end_at[-out.num_steps :]
                j = 0
                while j < len(ends):
                    slept = await self._sleep_until(ends[j]) or slept
                    wall = self.clock()
                    k = j + 1
                    while k < len(ends) and self.wall_at(ends[k]) <= wall:
                        k += 1
                    self._deliver(out.emitted, k - j)
                    j = k
            for record in out.finished:
                slot = self.slots.pop(record.request_id, None)
                if slot is not None:
                    slot.cached_tokens = record.extra.get("cached_tokens")
                    slot.done = True
                    slot.wake.set()
                    self.counters.requests_finished_total += 1
            engine.forget_finished_steps(keep_at_most=STEP_TIMES_KEPT)
            if not slept:
                await asyncio.sleep(0)  # behind the wall clock: still let the handlers write

    async def _sleep_until(self, virtual_s: float) -> bool:
        delay = self.wall_at(virtual_s) - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
            return True
        return False

    def _deliver(self, emitted: list[tuple[str, int]], steps: int | None) -> None:
        """Each (request, k) in `emitted` gains its k tokens now (steps None: one step's), or, over a run of
        one-token decode steps of which `steps` have ended, min(k, steps)."""
        slots = self.slots
        counters = self.counters
        for rid, k in emitted:
            slot = slots.get(rid)
            if slot is None:
                continue
            n = min(k if steps is None else min(k, steps), slot.max_tokens - slot.ready)
            if n <= 0:
                continue
            if slot.ready == 0:
                counters.prompt_tokens_total += slot.prompt_tokens
            slot.ready += n
            counters.generation_tokens_total += n
            slot.wake.set()

    # --- gauges ---------------------------------------------------------------------------------
    def gauges(self) -> dict:
        engine = self.engine
        return {
            "num_running": engine.num_running,
            "num_waiting": engine.num_waiting,
            "kv_usage": engine.kv_usage,
            "num_preemptions": engine.stats.preemptions,
            "num_kv_blocks": engine.blocks.num_blocks,
            "block_size": engine.block_size,
            "virtual_s": self.virtual_t,
            "prefix_caching": engine.config.enable_prefix_caching,
            "prefix_cache_queries_tokens": engine.blocks.query_tokens,
            "prefix_cache_hits_tokens": engine.blocks.hit_tokens,
            "spec_tokens": engine.config.spec_tokens,
            "spec_drafts": engine.stats.spec_drafts,
            "spec_accepted": engine.stats.spec_accepted,
        }
