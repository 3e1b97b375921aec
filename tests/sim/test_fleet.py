"""Replicas behind a router on one virtual clock (kneecap.sim.fleet): every request is served once, by the replica
the router picked; round-robin spreads evenly; the prefix scorer (llm-d's weights) keeps a shared prefix on the
replicas that already hold it, so the fleet finds more of its prompts cached."""

from __future__ import annotations

from pathlib import Path

import json

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
    words = (
        f"hit rate {px.server_metrics['prefix_cache_hit_rate']:.2f} against "
        f"{rr.server_metrics['prefix_cache_hit_rate']:.2f}, p50 TTFT {px_s['ttft_ms']['p50']:.0f} ms against "
        f"{rr_s['ttft_ms']['p50']:.0f} ms"
    )
    doc = " ".join((Path(__file__).parents[2] / "docs" / "speculative-and-routing.md").read_text().split())
    assert words in doc, words  # the page quotes this run


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


L4_FLEET = (
    "simulate --model llama-3.1-8b --gpu l4 --isl 3000 --osl 300 --shared-prefix 2000x8 --replicas 4 --rate 1.5 "
    "--requests 800"
)


class PrefixRecomputes:
    """Counts, over every replica's pool in a run, the cached blocks of the shared prefix (the first 125 blocks of 16
    tokens of a 2000-token prefix) that the LRU free queue evicted to make room and a later request computed again."""

    def __init__(self, monkeypatch, prefix_blocks: int = 125):
        from kneecap.sim.blocks import BlockManager

        self.evicted: set = set()
        self.count = 0
        index_of: dict = {}
        register, set_hash = BlockManager.register, BlockManager._set_hash

        def counting_register(bm, seq_id, index, block_hash):
            index_of[block_hash] = index
            register(bm, seq_id, index, block_hash)

        def counting_set_hash(bm, block, block_hash):
            was = block_hash in bm.cached
            set_hash(bm, block, block_hash)
            if not was and block_hash in bm.cached and (id(bm), block_hash) in self.evicted:
                self.evicted.discard((id(bm), block_hash))
                self.count += index_of.get(block_hash, prefix_blocks) < prefix_blocks

        def counting(take):
            def taking(bm, *args):
                before = set(bm.cached)
                out = take(bm, *args)
                self.evicted.update((id(bm), h) for h in before - bm.cached.keys())
                return out

            return taking

        monkeypatch.setattr(BlockManager, "register", counting_register)
        monkeypatch.setattr(BlockManager, "_set_hash", counting_set_hash)
        monkeypatch.setattr(BlockManager, "_take_free", counting(BlockManager._take_free))
        monkeypatch.setattr(BlockManager, "_take_free_many", counting(BlockManager._take_free_many))


def _l4_level(router: str, tmp_path, capsys, monkeypatch) -> tuple[dict, int]:
    from kneecap.cli import main

    recomputes = PrefixRecomputes(monkeypatch)
    rc = main([*L4_FLEET.split(), "--router", router, "--out", str(tmp_path / router), "--json", "--no-report"])
    out = capsys.readouterr().out
    assert rc == 0
    monkeypatch.undo()
    (lv,) = json.loads(out)["levels"]
    return lv, recomputes.count


def test_few_prefixes_on_a_full_pool_gain_from_the_router(tmp_path, capsys, monkeypatch):
    """8 prefix groups on 4 L4s, 1,650 blocks of 16 tokens each: under round-robin every replica caches all 8
    prefixes (1,000 blocks) beside its ~12 running sequences (~82 blocks of their own each), which does not fit, so
    the LRU free queue evicts the prefixes of the groups not running and later requests compute them again; the
    prefix scorer keeps each group on the replicas that already hold it, so each pool caches fewer prefixes and they
    stay. Both levels are stable; the hit rate rises and the median TTFT falls far more than the 24 cold first
    prefills the router saves would give."""
    rr, rr_recomputed = _l4_level("round-robin", tmp_path, capsys, monkeypatch)
    px, px_recomputed = _l4_level("prefix", tmp_path, capsys, monkeypatch)
    with capsys.disabled():  # `pytest -s` shows the figures docs/speculative-and-routing.md quotes
        for name, lv, n in (("round-robin", rr, rr_recomputed), ("prefix", px, px_recomputed)):
            sm = lv["server_metrics"]
            print(f"\n{name}: hit rate {sm['prefix_cache_hit_rate']:.3f}, p50 TTFT {lv['ttft_ms']['p50']:,.0f} ms, "
                  f"{lv['stability']['verdict']}, preemptions {sm['preemptions']}, KV usage mean "
                  f"{sm['kv_usage_mean']:.2f}, prefix blocks evicted and computed again {n:,}")  # fmt: skip
    assert rr["stability"]["verdict"] == px["stability"]["verdict"] == "stable"
    rr_hit, px_hit = (lv["server_metrics"]["prefix_cache_hit_rate"] for lv in (rr, px))
    assert px_hit > rr_hit + 0.05, (rr_hit, px_hit)
    assert px["ttft_ms"]["p50"] < 0.5 * rr["ttft_ms"]["p50"], (rr["ttft_ms"]["p50"], px["ttft_ms"]["p50"])
    # the mechanism: round-robin computes evicted prefix blocks again, many times more than the prefix router does
    assert rr_recomputed > 5 * max(px_recomputed, 1) and rr_recomputed > 100 * 125 / 2, (rr_recomputed, px_recomputed)
