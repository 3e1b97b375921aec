"""--prefix-hit-rate F: synthetic prompts sharing their first F of --isl tokens, primed by a warmup request, so a
prefix cache finds about F of every measured prompt cached; the same flag on the simulator and over HTTP."""

from __future__ import annotations

import json

import pytest

from tests.clitools import run_cli

ARGS = ("--isl", "2000", "--osl", "50", "--rate", "4", "--requests", "60")


@pytest.mark.parametrize("rate", ["0.25", "0.75"])
def test_simulated_hit_rate_is_the_one_asked_for(tmp_path, rate):
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        *ARGS,
        "--prefix-hit-rate",
        rate,
        "--out",
        str(tmp_path / "s"),
        "--json",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    (lv,) = doc["levels"]
    assert doc["workload"]["shared_prefix_tokens"] == round(float(rate) * 2000)
    # the cache holds whole 16-token blocks: at most 15 tokens of the prefix go uncounted
    assert float(rate) - 16 / 2000 <= lv["server_metrics"]["prefix_cache_hit_rate"] <= float(rate)


def test_bench_against_serve_sees_the_hit_rate(tmp_path):
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.1"])
    try:
        r = run_cli(
            "bench",
            "--base-url",
            url,
            *ARGS,
            "--prefix-hit-rate",
            "0.5",
            "--out",
            str(tmp_path / "b"),
            "--json",
            "--no-report",
            "--quiet",
        )
    finally:
        stop_server(proc)
    assert r.code == 0, r.stderr
    (lv,) = json.loads(r.stdout)["levels"]
    assert 0.5 - 16 / 2000 <= lv["server_metrics"]["prefix_cache_hit_rate"] <= 0.5 + 1e-9


@pytest.mark.parametrize(
    "extra,needle",
    [
        (("--prefix-hit-rate", "1.5"), "between 0 and 1"),
        (("--prefix-hit-rate", "0.5", "--shared-prefix", "100"), "both given"),
    ],
)
def test_bad_prefix_hit_rate_is_one_line(tmp_path, extra, needle):
    r = run_cli("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *ARGS, *extra, "--out", str(tmp_path / "x"))
    assert r.code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
