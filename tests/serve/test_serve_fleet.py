"""`kneecap serve --replicas N --router R`: one OpenAI endpoint over N simulated replicas; every request served once;
/metrics is the fleet's, /replicas/I/metrics each replica's; the prefix router (over HTTP it hashes the prompt's
token ids) finds more of a shared prefix cached than round-robin."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.clitools import run_cli


def _metric(text: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M).group(1))


def _bench(router: str, tmp_path):
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(
        ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.2", "--replicas", "4", "--router", router]
    )
    try:
        r = run_cli(
            "bench",
            "--base-url",
            url,
            "--isl",
            "3000",
            "--osl",
            "20",
            "--shared-prefix",
            "2000x16",
            "--rate",
            "8",
            "--requests",
            "120",
            "--out",
            str(tmp_path / router),
            "--quiet",
            "--json",
            "--no-report",
        )
        fleet = urllib.request.urlopen(url + "/metrics").read().decode()
        each = [urllib.request.urlopen(f"{url}/replicas/{i}/metrics").read().decode() for i in range(4)]
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "/replicas/4/metrics")
    finally:
        stop_server(proc)
    assert r.code == 0, r.stderr
    (lv,) = json.loads(r.stdout)["levels"]
    return lv, fleet, each


def test_fleet_serves_every_request_once_and_the_prefix_router_hits_more(tmp_path):
    rr, fleet, each = _bench("round-robin", tmp_path)
    assert rr["completed"] == 120
    done = [_metric(t, "vllm:request_success_total") for t in each]
    # bench's own check requests before the level come on top of its 120; round-robin spreads them all evenly
    assert sum(done) == _metric(fleet, "vllm:request_success_total") >= 120 and max(done) - min(done) <= 1
    px, _, _ = _bench("prefix", tmp_path)
    assert px["completed"] == 120
    assert px["server_metrics"]["prefix_cache_hit_rate"] > rr["server_metrics"]["prefix_cache_hit_rate"] + 0.1


def test_bad_router_is_one_line():
    r = run_cli("serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--replicas", "2", "--router", "random")
    assert r.code == 2 and "unknown --router 'random'" in r.stderr
