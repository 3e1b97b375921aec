"""The example plans ship runnable, and the seed-004 fixture shows what it claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.loadplan.schema import load_plan_file

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path):
    spec, _ = load_plan_file(path)
    assert spec.candidates


def test_interactive_vs_throughput_fixture(cli, tmp_path):
    """The shipped plan as shipped (3 repetitions of 1,000 requests a cell): the larger batch completes more
    tokens, breaches p99 TTFT during bursts, and is rejected for interactive routing; the small batch is
    accepted at the required 8 req/s, its bursty arrivals offered near enough to that rate in every repetition."""
    plan = next(p for p in EXAMPLES if p.name == "interactive_vs_throughput.yaml")
    r = cli("run", str(plan), "--out", str(tmp_path / "out"), "--json", "--no-report", timeout=600)
    assert r.code == 0, r.stderr
    s = json.loads(r.stdout)
    cands = {c["name"]: c for c in s["candidates"]}
    small, large = cands["interactive-small-batch"], cands["throughput-large-batch"]
    assert small["verdict"] == "accepted"
    assert large["verdict"] == "rejected" and large["gate"] == "slo"
    assert "ttft_p99_ms" in large["reason"] and "interactive routing" in large["reason"]
    assert large["peak_output_tok_s"] > 1.15 * small["peak_output_tok_s"]
    assert s["capacity"]["interactive-small-batch"]["short-message"]["warm"]["capacity"] >= 8
