"""recommend --router / --shared-prefix: the sizing check runs the candidate's replicas behind the router at the
whole load (kneecap.sim.fleet), and recommend.json reports the fleet's prefix-cache hit rate."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.metrics.slo import parse_slo
from kneecap.recommend.evaluate import fleet_level, simulated, size_replicas
from kneecap.recommend.prices import load_prices
from kneecap.recommend.search import recommend
from kneecap.recommend.space import Knobs, RecommendRequest

K = Knobs("h100-sxm", 1, 1, "bf16", "bf16", 256, 8192)


def req(**kw) -> RecommendRequest:
    base = dict(
        model="llama-3.1-8b",
        kind="rate",
        load=8.0,
        isl=3000,
        osl=200,
        slo=parse_slo("ttft_p99_ms=300,tpot_p99_ms=40"),
        gpus=("h100-sxm",),
        weight_dtypes=("bf16",),
        kv_dtypes=("bf16",),
        tp_choices=(1,),
        pp_choices=(1,),
        max_num_seqs_choices=(256,),
        max_num_batched_tokens_choices=(8192,),
        shared_prefix_tokens=2000,
        num_prefix_groups=16,
    )
    base.update(kw)
    return RecommendRequest(**base)


def test_prefix_router_hits_the_cache_more_than_round_robin():
    """16 groups of 2000-token prefixes over 4 replicas at 8 requests/s: round-robin sends each group to every
    replica (each misses it once), the prefix picker keeps a group where its blocks are."""
    hit = {
        rt: fleet_level(simulated(req(router=rt), K), req(router=rt), 4, 200).prefix_hit_rate
        for rt in ("round-robin", "prefix")
    }
    assert hit["prefix"] > hit["round-robin"] + 0.05
    words = (
        f"prefix cache {hit['prefix']:.2f} of the time behind `prefix` and {hit['round-robin']:.2f} behind round-robin"
    )
    assert words in _recommend_doc(), words  # docs/recommend.md quotes this run


def test_sizing_check_runs_the_fleet_and_reports_its_hit_rate():
    r = req(router="prefix", load=16.0)
    s = size_replicas(r, K, 8.0)
    assert s.replicas is not None and s.at_load.prefix_hit_rate is not None and s.at_load.prefix_hit_rate > 0.5
    assert s.at_load.load == 16.0  # the whole load, not a replica's share
    doc = recommend(req(router="prefix"), load_prices(), workers=1)
    assert doc["router"]["policy"] == "prefix" and "through the router" in doc["router"]["sizing_check"]
    assert doc["best"]["predicted"]["prefix_cache_hit_rate"] > 0.5


@pytest.mark.parametrize(
    "kw,needle",
    [({"router": "random"}, "unknown --router"), ({"shared_prefix_tokens": 3000}, "not shorter than --isl")],
)
def test_bad_router_input_is_named(kw, needle):
    with pytest.raises(KneecapError, match=needle):
        req(**kw)


def test_cli_router_flags(tmp_path):
    from clitools import run_cli

    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "8",
        "--isl",
        "3000",
        "--osl",
        "200",
        "--gpus",
        "h100-sxm",
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--workers",
        "1",
        "--slo",
        "ttft_p99_ms=300,tpot_p99_ms=40",
        "--router",
        "prefix",
        "--shared-prefix",
        "2000x16",
        "--out",
        str(tmp_path),
    )
    assert r.code == 0, r.stderr
    assert "behind a prefix router" in (tmp_path / "report.md").read_text()
    bad = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "8",
        "--isl",
        "3000",
        "--osl",
        "200",
        "--slo",
        "tpot_p99_ms=40",
        "--router",
        "random",
    )
    assert bad.code != 0 and "unknown --router" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_prefix_router_needs_fewer_replicas_where_prefixes_crowd_the_pool():
    """64 groups of 5000-token prefixes (6000-token prompts) at 24 requests/s on H100s: round-robin makes every
    replica hold every group's prefix and evicts them; the prefix picker keeps each group on one replica, hits its
    cache more and meets the SLO with fewer replicas."""
    base = dict(load=24.0, isl=6000, osl=100, shared_prefix_tokens=5000, num_prefix_groups=64)
    rr, px = (size_replicas(req(router=rt, **base), K, 8.0) for rt in ("round-robin", "prefix"))
    assert px.replicas is not None and rr.replicas is not None
    assert px.replicas < rr.replicas
    assert px.at_load.prefix_hit_rate > rr.at_load.prefix_hit_rate
    words = (
        f"round-robin needs {rr.replicas} replicas (hit rate {rr.at_load.prefix_hit_rate:.2f}: every replica holds "
        f"every group and evicts) and `prefix` {px.replicas} (hit rate {px.at_load.prefix_hit_rate:.2f})"
    )
    assert words in _recommend_doc(), words  # docs/recommend.md quotes this run


def _recommend_doc() -> str:
    from pathlib import Path

    return " ".join((Path(__file__).parents[2] / "docs" / "recommend.md").read_text().split())
