"""Replicas behind a router on one virtual clock (kneecap.sim.fleet): every request is served once, by the replica
the router picked; round-robin spreads evenly; the prefix scorer (llm-d's weights) keeps a shared prefix on the
replicas that already hold it, so the fleet finds more of its prompts cached."""

from __future__ import annotations

import pytest
import simkit

from kneecap.errors import KneecapError
from kneecap.metrics.summarize import summarize_level
from kneecap.sim.config import EngineConfig
from kneecap.sim.fleet import FleetDeployment
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload

CFG = EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192)


def shared(groups: int) -> Workload:
    return Workload(
        classes=(
            RequestClass(
                input=LengthDist.fixed(3000),
                output=LengthDist.fixed(200),
                shared_prefix_tokens=2000,
                num_prefix_groups=groups,
            ),
        )
    )


def llama_8b():
    from kneecap.model import load_model

    return simkit.deployment(model=load_model("llama-3.1-8b"))  # on one H100: 27,018 blocks of 16 tokens


def level(router: str, workload: Workload, n: int, rate: float = 30.0, replicas: int = 4):
    sim = FleetDeployment(simkit.sim_of(llama_8b(), CFG, 27018), replicas, router)
    res = simulate_level(sim, workload, LevelSpec(rate=rate, num_requests=n))
    return res, summarize_level(res.records, rate=rate)


def test_every_request_is_served_once_and_round_robin_spreads_evenly():
    res, summary = level("round-robin", Workload.fixed(500, 50), 200)
    assert summary["completed"] == 200 and len({r.request_id for r in res.records}) == 200
    sm = res.server_metrics
    assert sm["routed"] == [50, 50, 50, 50] and len(sm["replicas"]) == 4
    assert sm["num_kv_blocks"] == 4 * sm["replicas"][0]["num_kv_blocks"]


def test_one_replica_fleet_is_the_engine():
    one, _ = level("round-robin", Workload.fixed(500, 50), 100, replicas=1)
    plain = simulate_level(
        simkit.sim_of(llama_8b(), CFG, 27018), Workload.fixed(500, 50), LevelSpec(rate=30.0, num_requests=100)
    )
    key = lambda r: (r.request_id, r.first_token_at, r.end_at)
    assert sorted(map(key, one.records)) == sorted(map(key, plain.records))


def test_prefix_router_finds_more_of_the_shared_prefix_cached():
    """2000-token prefixes in 200 groups over 4 replicas: round-robin sends each group to every replica (4 cold
    prefills a group); the prefix scorer keeps a group where its blocks are, so more tokens hit and, the prefill
    saved, the median TTFT falls."""
    rr, rr_s = level("round-robin", shared(200), 2000)
    px, px_s = level("prefix", shared(200), 2000)
    assert px.server_metrics["prefix_cache_hit_rate"] > rr.server_metrics["prefix_cache_hit_rate"] + 0.15
    assert px_s["ttft_ms"]["p50"] < 0.8 * rr_s["ttft_ms"]["p50"]


def test_few_hot_prefixes_gain_little_from_the_router():
    """2000-token prefixes in only 8 groups: every replica's cache holds all 8 after their first requests, so the
    prefix scorer saves only those first prefills: a higher hit rate, the same median TTFT within 5%."""
    rr, rr_s = level("round-robin", shared(8), 800)
    px, px_s = level("prefix", shared(8), 800)
    assert px.server_metrics["prefix_cache_hit_rate"] > rr.server_metrics["prefix_cache_hit_rate"]
    assert px_s["ttft_ms"]["p50"] == pytest.approx(rr_s["ttft_ms"]["p50"], rel=0.05)


@pytest.mark.parametrize("replicas,router", [(0, "prefix"), (2, "random")])
def test_bad_fleet_settings_are_errors(replicas, router):
    with pytest.raises(KneecapError):
        FleetDeployment(simkit.sim_of(simkit.deployment(), CFG, 1000), replicas, router)
