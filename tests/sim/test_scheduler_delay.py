"""vLLM V0's --scheduler-delay-factor in the simulated scheduler: prompts wait to batch while others run."""

from __future__ import annotations

import json


def _sim(cli, tmp_path, name, *extra):
    out = tmp_path / name
    r = cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "512",
        "--osl",
        "128",
        "--rate",
        "8",
        "--burstiness",
        "0.5",
        "--requests",
        "120",
        "--seed",
        "3",
        "--out",
        str(out),
        "--json",
        *extra,
    )
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_delay_factor_zero_is_the_default(cli, tmp_path):
    a = _sim(cli, tmp_path, "a")
    b = _sim(cli, tmp_path, "b", "--scheduler-delay-factor", "0")
    for s in (a, b):
        s.pop("engine"), s.pop("manifest", None)
    assert a == b


def test_delay_factor_raises_ttft_not_throughput(cli, tmp_path):
    base = _sim(cli, tmp_path, "base")["levels"][0]
    held = _sim(cli, tmp_path, "held", "--scheduler-delay-factor", "4")
    assert held["engine"]["scheduler_delay_factor"] == 4
    held = held["levels"][0]
    assert held["completed"] == base["completed"] == 120
    # prompts wait for the oldest to have waited 4 x the last prompt step: TTFT grows, not the token count
    assert held["ttft_ms"]["p50"] > 1.5 * base["ttft_ms"]["p50"]
    assert held["output_tokens"] == base["output_tokens"]


def test_negative_delay_factor_is_one_line(cli, tmp_path):
    r = cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--scheduler-delay-factor",
        "-1",
        "--out",
        str(tmp_path / "x"),
    )
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1 and "scheduler-delay-factor" in r.stderr
