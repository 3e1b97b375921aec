"""kneecap recommend --ray on a real two-node Ray cluster on this machine's loopback (two `ray start` processes):
the candidate evaluations run as Ray tasks on both nodes and the answer is byte for byte the one without Ray."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

from localnodes import LocalNodes  # noqa: E402
from kneecap.recommend.prices import load_prices  # noqa: E402
from kneecap.recommend.search import recommend  # noqa: E402

from test_recommend import small  # noqa: E402
from clitools import run_cli  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    nodes = LocalNodes(num_nodes=2, cpus_per_node=1)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.cleanup()


def _answer(doc: dict) -> str:
    return json.dumps({k: v for k, v in doc.items() if k not in ("seconds", "ray")}, sort_keys=True)


def test_ray_gives_the_same_answer(cluster):
    prices = load_prices()
    here = recommend(small(), prices, workers=1)
    there = recommend(small(), prices, workers=1, ray=cluster.address)
    assert there["ray"] == {"address": cluster.address, "nodes": {"alive": 2, "ran_tasks": 2}}
    assert _answer(there) == _answer(here)


def test_cli_ray_json_matches_without(cluster, tmp_path):
    args = [
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "50",
        "--slo",
        "ttft_p99_ms=1000,tpot_p99_ms=60",
        "--gpus",
        "a100-80",
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--json",
    ]
    a = run_cli(*args, "--workers", "2", timeout=600)
    b = run_cli(*args, "--ray", cluster.address, timeout=600)
    assert a.code == 0 and b.code == 0, (a.stderr, b.stderr)
    assert _answer(json.loads(a.stdout)) == _answer(json.loads(b.stdout))
    bad = run_cli(*args, "--ray", "127.0.0.1:1", timeout=120)
    assert bad.code != 0 and "does not answer" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
