"""`kneecap serve --replicas N --router R`: N simulated replicas, each its own engine and KV pool in real time,
behind one OpenAI endpoint; the router (kneecap.sim.fleet.Router: round-robin, least-loaded, or llm-d's
prefix-cache-aware picker) sends each request to one of them. /metrics is the fleet's (counts summed, KV usage the
replicas' mean), /replicas/I/metrics each replica's.

The prefix router hashes a prompt's token ids in the engine's blocks, each block's hash chained to the one before
(a block matches only after the same prefix), as the endpoint picker hashes the prompts it forwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.serve.realtime import RealtimeEngine, RequestSlot
from kneecap.sim.fleet import Router
from kneecap.workload import RequestSpec


@dataclass
class FleetCounters:
    """The replicas' ServerCounters added up (what /metrics prints for the fleet)."""

    replicas: list

    def __getattr__(self, name):
        values = [getattr(r.counters, name) for r in self.replicas]
        return max(values) if name in ("max_lag_s", "lag_s") else sum(values)


class FleetRuntime:
    """The RealtimeEngine interface (submit, abort, gauges, counters, failure, start, stop) over N replicas."""

    def __init__(self, target, replicas: int, router: str, *, time_scale: float = 1.0, seed: int = 0):
        if not isinstance(replicas, int) or replicas < 1:
            raise KneecapError(f"--replicas must be a whole number >= 1, got {replicas!r}", "pass e.g. --replicas 4")
        self.replicas = [RealtimeEngine(target, time_scale=time_scale) for _ in range(replicas)]
        self.router = Router(router, [r.engine for r in self.replicas], seed)
        self.counters = FleetCounters(self.replicas)
        self._owner: dict[str, RealtimeEngine] = {}
        self._count = 0

    @property
    def failure(self) -> str | None:
        return next((r.failure for r in self.replicas if r.failure), None)

    def _hashes(self, prompt_ids) -> tuple:
        bs = self.replicas[0].engine.block_size
        out, h = [], 0
        for i in range(0, len(prompt_ids) - len(prompt_ids) % bs, bs):
            h = hash((h, tuple(prompt_ids[i : i + bs])))
            out.append(h)
        return tuple(out)

    def submit(self, prompt_tokens: int, max_tokens: int, prompt_ids=None) -> RequestSlot:
        spec = RequestSpec(
            index=self._count,
            request_id=f"route-{self._count}",
            class_name="serve",
            input_tokens=prompt_tokens,
            output_tokens=max_tokens,
        )
        self._count += 1
        hashes = self._hashes(prompt_ids) if (prompt_ids and self.router.policy == "prefix") else ()
        replica = self.replicas[self.router.pick(spec, hashes)]
        slot = replica.submit(prompt_tokens, max_tokens, prompt_ids)
        self._owner[id(slot)] = replica
        return slot

    def abort(self, slot: RequestSlot) -> None:
        replica = self._owner.pop(id(slot), None)
        if replica is not None:
            replica.abort(slot)

    def reset_prefix_cache(self) -> bool:
        return all([r.engine.blocks.reset_prefix_cache() for r in self.replicas])

    def gauges(self) -> dict:
        each = [r.gauges() for r in self.replicas]
        summed = {
            k: sum(g[k] for g in each)
            for k in (
                "num_running",
                "num_waiting",
                "num_preemptions",
                "num_kv_blocks",
                "prefix_cache_queries_tokens",
                "prefix_cache_hits_tokens",
                "spec_drafts",
                "spec_accepted",
            )
        }
        return {
            **each[0],
            **summed,
            "kv_usage": sum(g["kv_usage"] for g in each) / len(each),
            "virtual_s": max(g["virtual_s"] for g in each),
        }

    def start(self) -> None:
        for r in self.replicas:
            r.start()

    async def stop(self) -> None:
        for r in self.replicas:
            await r.stop()
