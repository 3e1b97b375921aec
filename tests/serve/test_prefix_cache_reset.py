"""bench --reset-prefix-cache: before each level the server drops its prefix cache (kneecap serve answers vLLM's
POST /reset_prefix_cache), so a level's first request with a shared prefix misses it again; without the flag the
second level finds the first level's prefix cached."""

from __future__ import annotations

import json

import pytest

from kneecap.sim.blocks import BlockManager
from tests.clitools import run_cli


@pytest.fixture(scope="module")
def server():
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.1"])
    yield url
    stop_server(proc)


def _hit_rates(url: str, tmp_path, name: str, *extra: str) -> list:
    r = run_cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "1500",
        "--osl",
        "10",
        "--shared-prefix",
        "1000",
        "--concurrency",
        "1,1",
        "--requests",
        "4",
        *extra,
        "--out",
        str(tmp_path / name),
        "--quiet",
        "--json",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["levels"]


def test_reset_makes_every_level_start_cold(server, tmp_path):
    # 4 requests of 1,500 tokens sharing 1,000 (62 whole blocks): cold, the first misses: 3 x 992 / 6,000 = 0.496
    levels = _hit_rates(server, tmp_path, "reset", "--reset-prefix-cache")
    assert [lv["server_metrics"]["prefix_cache_hit_rate"] for lv in levels] == [0.496, 0.496]
    assert all(lv["prefix_cache_reset"] == ["/reset_prefix_cache"] for lv in levels)
    warm = _hit_rates(server, tmp_path, "warm")  # (each run's prompts are its own) the second level finds the first's
    assert [lv["server_metrics"]["prefix_cache_hit_rate"] for lv in warm] == [0.496, pytest.approx(4 * 992 / 6000)]
    assert all("prefix_cache_reset" not in lv for lv in warm)


def test_block_manager_refuses_a_reset_while_blocks_are_held():
    bm = BlockManager(16, 16)
    bm.allocate("a", 32)
    bm.register("a", 0, "h0")
    assert bm.reset_prefix_cache() is False and "h0" in bm.cached
    bm.free_seq("a", ["h0"])
    assert bm.reset_prefix_cache() is True and not bm.cached and bm.lookup_prefix(["h0"]) == 0
