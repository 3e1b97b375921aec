"""Replicas behind a router, simulated: N engines on one virtual clock, each request sent to one of them when it
arrives, by round-robin, least-loaded, or a prefix-cache-aware scorer as llm-d's inference scheduler runs it.

`Fleet` has the engine's interface (add_request, step, has_work, start_measuring, server_metrics, trace), so the
level runner (kneecap.sim.sweep.drive) drives a fleet as it drives one engine. Pure: no clock but the virtual one.

Routers:
- round-robin: request i to replica i mod N (a Kubernetes Service's spread, on average).
- least-loaded: the replica with the fewest requests running plus waiting.
- prefix: the Gateway API Inference Extension's endpoint picker as llm-d configures it (llm-d's inference-scheduling
  guide: queue-scorer weight 2, kv-cache-utilization-scorer weight 2, prefix-cache-scorer weight 3, max-score
  picker): queue score (max waiting - waiting) / (max waiting - min waiting) over the replicas (1 when all equal;
  gateway-api-inference-extension pkg/epp/scheduling/framework/plugins/queuescorer/queue.go), KV score
  1 - KV usage (kvcacheutilizationscorer/kvcache_utilization.go), prefix score the request's leading prompt blocks
  found in the router's own index of the blocks it sent to that replica, over the prompt's blocks (the plugin's
  approximate, routing-history index, an LRU of at most the replica's pool in blocks). Ties: a seeded random pick,
  as the max-score picker shuffles its ties.
A request's blocks are the engine's own prefix identity (a shared prefix's group, a trace's hash ids), so the
router's index and the replica's prefix cache speak of the same blocks.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from typing import Callable

from kneecap.records import RequestRecord
from kneecap.sim.engine import Engine, StepOutcome
from kneecap.sim.scheduler import Sequence
from kneecap.workload import RequestSpec

ROUTERS = ("round-robin", "least-loaded", "prefix")
# llm-d's inference-scheduling guide's EndpointPickerConfig: scorer weights
PREFIX_WEIGHT, QUEUE_WEIGHT, KV_WEIGHT = 3.0, 2.0, 2.0


class Router:
    """Picks a replica for each request (see the module docstring)."""

    def __init__(self, policy: str, engines: list[Engine], seed: int = 0):
        if policy not in ROUTERS:
            from kneecap.errors import KneecapError

            raise KneecapError(f"unknown --router {policy!r}", f"pass one of {', '.join(ROUTERS)}")
        self.policy, self.engines = policy, engines
        self.rng = random.Random(seed)
        self.count = 0
        self.routed = [0] * len(engines)
        # the prefix scorer's index: per replica, block hash -> None, least recently routed first
        self.index: list[OrderedDict] = [OrderedDict() for _ in engines]

    def _pick_max(self, scores: list[float]) -> int:
        best = max(scores)
        ties = [i for i, s in enumerate(scores) if s >= best - 1e-12]
        return ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]

    def pick(self, spec: RequestSpec, hashes: tuple | None = None) -> int:
        """The replica for `spec`; `hashes`: its prompt's block hashes where the caller has them (kneecap serve
        hashes the prompt's token ids, as the endpoint picker hashes what it is sent), else the engine's own."""
        engines = self.engines
        if self.policy == "round-robin":
            i = self.count % len(engines)
        elif self.policy == "least-loaded":
            i = self._pick_max([-(e.num_running + e.num_waiting) for e in engines])
        else:
            i = self._pick_prefix(spec, hashes)
        self.count += 1
        self.routed[i] += 1
        return i

    def _pick_prefix(self, spec: RequestSpec, hashes: tuple | None = None) -> int:
        engines = self.engines
        if hashes is None:
            hashes = Sequence(spec, 0.0, engines[0].block_size).prefix_hashes
        total = max(1, spec.input_tokens // engines[0].block_size)
        waiting = [e.num_waiting for e in engines]
        lo, hi = min(waiting), max(waiting)
        scores = []
        for j, e in enumerate(engines):
            matched = 0
            index = self.index[j]
            for h in hashes:
                if h not in index:
                    break
                matched += 1
            queue = 1.0 if hi == lo else (hi - waiting[j]) / (hi - lo)
            scores.append(PREFIX_WEIGHT * matched / total + QUEUE_WEIGHT * queue + KV_WEIGHT * (1.0 - e.kv_usage))
        i = self._pick_max(scores)
        index, capacity = self.index[i], engines[i].blocks.num_blocks
        for h in hashes:  # the routed request's blocks, most recent last
            index[h] = None
            index.move_to_end(h)
        while len(index) > capacity:
            index.popitem(last=False)
        return i


class Fleet:
    """N engines behind a router, driven as one engine: each step call advances the replica whose step ends first
    (every replica runs its own steps concurrently on the shared virtual clock)."""

    def __init__(self, make_engine: Callable[[int], Engine], replicas: int, router: str, seed: int = 0):
        self.engines = [make_engine(i) for i in range(replicas)]
        self.router = Router(router, self.engines, seed)
        self.pending: list[StepOutcome | None] = [None] * replicas  # a replica's step under way
        self.free_at = [0.0] * replicas

    # --- the engine's interface ------------------------------------------------------------------
    def add_request(
        self, spec: RequestSpec, at: float, *, meta: dict | None = None, scheduled_at: float | None = None
    ) -> RequestRecord | None:
        i = self.router.pick(spec)
        return self.engines[i].add_request(spec, at, meta=meta, scheduled_at=scheduled_at)

    @property
    def has_work(self) -> bool:
        return any(p is not None for p in self.pending) or any(e.has_work for e in self.engines)

    @property
    def block_size(self) -> int:
        return self.engines[0].block_size

    def step(self, now: float, *, until: float = math.inf, max_steps: int = 1) -> StepOutcome | None:
        """Start a step on every replica that has work and none under way, then end the earliest step; a replica
        step ending after `until` (the next arrival) returns an empty outcome at `until` instead, so the arrival
        is routed when it happens."""
        for i, e in enumerate(self.engines):
            if self.pending[i] is None and e.has_work:
                start = max(now, self.free_at[i])
                self.pending[i] = e.step(start, until=until, max_steps=max_steps)
        live = [(p.ended_at, i) for i, p in enumerate(self.pending) if p is not None]
        if not live:
            return None
        end, i = min(live)
        if end > until:
            return StepOutcome(
                now, until, 0, 0, 0, 0, 0, [], 1, [], [], self.kv_blocks_used, self.num_running, self.num_waiting
            )
        out = self.pending[i]
        self.pending[i] = None
        self.free_at[i] = out.ended_at
        return out

    @property
    def num_running(self) -> int:
        return sum(e.num_running for e in self.engines)

    @property
    def num_waiting(self) -> int:
        return sum(e.num_waiting for e in self.engines)

    @property
    def kv_blocks_used(self) -> int:
        return sum(e.blocks.num_used for e in self.engines)

    def start_measuring(self) -> None:
        for e in self.engines:
            e.start_measuring()

    def trace(self) -> list[dict]:
        return [dict(row, replica=i) for i, e in enumerate(self.engines) for row in e.trace()]

    def server_metrics(self) -> dict:
        """The fleet's server_metrics (counts summed, KV usage's peak the busiest replica's and its mean the
        replicas' mean, the prefix hit rate pooled over their lookups; running_max / waiting_max the sum of the
        replicas' peaks, an upper bound on the fleet's), each replica's in `replicas`, the router's counts."""
        each = [e.server_metrics() for e in self.engines]
        queries = sum(m["prefix_cache_queries_tokens"] for m in each)
        hits = sum(m["prefix_cache_hits_tokens"] for m in each)
        means = [m["kv_usage_mean"] for m in each if m["kv_usage_mean"] is not None]
        specs = [m["spec"] for m in each if m.get("spec")]
        spec = None
        if specs:
            drafted = sum(s["draft_tokens"] for s in specs)
            accepted = sum(s["accepted_tokens"] for s in specs)
            drafts = sum(e.stats.spec_drafts for e in self.engines)
            spec = {
                "draft_tokens": drafted,
                "accepted_tokens": accepted,
                "acceptance_rate": round(accepted / drafted, 6) if drafted else None,
                "mean_accepted_length": round(1 + accepted / drafts, 6) if drafts else None,
                "method": specs[0]["method"],
                "source": "simulator",
            }
        return {
            "preemptions": sum(m["preemptions"] for m in each),
            "prefix_cache_hit_rate": round(hits / queries, 6) if queries else None,
            "prefix_cache_queries_tokens": queries,
            "prefix_cache_hits_tokens": hits,
            "kv_usage_max": max(m["kv_usage_max"] for m in each),
            "kv_usage_mean": round(sum(means) / len(means), 6) if means else None,
            "kv_blocks_max": sum(m["kv_blocks_max"] for m in each),
            "num_kv_blocks": sum(m["num_kv_blocks"] for m in each),
            "running_max": sum(m["running_max"] for m in each),
            "waiting_max": sum(m["waiting_max"] for m in each),
            "num_steps": sum(m["num_steps"] for m in each),
            "spec": spec,
            "router": self.router.policy,
            "routed": list(self.router.routed),
            "replicas": each,
        }


class FleetDeployment:
    """A simulated deployment served by `replicas` copies of it behind `router`: new_engine() builds the Fleet
    (each replica a fresh engine of the deployment, as SimDeployment.new_engine builds one)."""

    def __init__(self, sim, replicas: int, router: str, seed: int = 0):
        from kneecap.errors import KneecapError

        if not isinstance(replicas, int) or replicas < 1:
            raise KneecapError(f"--replicas must be a whole number >= 1, got {replicas!r}", "pass e.g. --replicas 4")
        if router not in ROUTERS:
            raise KneecapError(f"unknown --router {router!r}", f"pass one of {', '.join(ROUTERS)}")
        self.sim, self.replicas, self.router, self.seed = sim, replicas, router, seed

    def __getattr__(self, name):  # plan, config, deployment, describe(), ... are the replica's
        return getattr(self.sim, name)

    def describe(self) -> dict:
        """The replica's facts, and the fleet's: {"fleet": {replicas, router}}."""
        return {**self.sim.describe(), "fleet": {"replicas": self.replicas, "router": self.router}}

    def new_engine(self, **kw) -> Fleet:
        return Fleet(lambda i: self.sim.new_engine(**kw), self.replicas, self.router, self.seed)
