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
    accepted at the required 7 req/s, as its capacity step (named 8) was really offered in every repetition."""
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
    info = s["capacity"]["interactive-small-batch"]["short-message"]["warm"]
    assert info["capacity"] >= 8 and info["offered_at_capacity"] >= 7


def test_a_step_offered_below_the_required_rate_is_not_accepted(cli, tmp_path):
    """The same plan asking for 8 req/s: its capacity step is named 8, but its bursty arrivals went out below 8
    req/s in a repetition, so nothing shows it carries 8: rejected, saying the rate that went out."""
    plan = next(p for p in EXAMPLES if p.name == "interactive_vs_throughput.yaml")
    text = plan.read_text()
    assert "required: 7\n" in text
    strict = tmp_path / "strict.yaml"
    strict.write_text(text.replace("required: 7\n", "required: 8\n"))
    r = cli("run", str(strict), "--out", str(tmp_path / "out"), "--json", "--no-report", timeout=600)
    assert r.code == 0, r.stderr
    s = json.loads(r.stdout)
    small = next(c for c in s["candidates"] if c["name"] == "interactive-small-batch")
    info = s["capacity"]["interactive-small-batch"]["short-message"]["warm"]
    assert info["capacity"] == 8 and info["offered_at_capacity"] < 8
    assert small["verdict"] == "rejected" and small["gate"] == "slo"
    assert f"(required 8; its capacity step went out at {info['offered_at_capacity']:.3g} req/s)" in small["reason"]
