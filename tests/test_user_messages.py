"""Messages a careful reader trips on: a breach that reads '300.0 > 300', an error that starts with a blank line
or names the same thing twice."""

from __future__ import annotations

import socket

import pytest

from kneecap.loadplan.schema import Budget
from kneecap.loadplan.verdicts import budget_breaches
from kneecap.metrics.slo import level_meets_slo
from kneecap.units import fmt_over
from tests.clitools import run_cli


@pytest.mark.parametrize(
    "value,limit,text",
    [
        (300.04, 300, "300.04 > 300"),
        (300.0000001, 300, "300.0000001 > 300"),
        (812.4, 500, "812.4 > 500"),
        (0.0100001, 0.01, "0.0100001 > 0.01"),
    ],
)
def test_over_text_never_reads_equal(value, limit, text):
    assert fmt_over(value, limit) == text


@pytest.mark.parametrize("value,limit,text", [(0.21, 0.2, "0.210 > 0.2"), (0.2000004, 0.2, "0.2000004 > 0.2")])
def test_rates_keep_their_decimals(value, limit, text):
    assert fmt_over(value, limit, decimals=3) == text


def test_breaches_show_the_digits_that_differ():
    level = {"ttft_ms": {"p99": 300.04}, "requests": 10, "failed": 0}
    assert budget_breaches(level, Budget(ttft_p99_ms=300)) == ["ttft_p99_ms 300.04 > 300"]
    ok, breaches = level_meets_slo(level, {"ttft_p99_ms": 300})
    assert not ok and breaches[0]["message"] == "ttft_p99_ms 300.04 > 300"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_line_naming_it_once():
    url = f"http://127.0.0.1:{_closed_port()}"
    r = run_cli("bench", "--base-url", url, "--concurrency", "1", "--isl", "10", "--osl", "10", "--requests", "2")
    assert r.code == 2
    assert r.stderr.startswith("error: cannot reach the server at"), repr(r.stderr)
    assert len(r.stderr.strip("\n").splitlines()) == 1, repr(r.stderr)
    assert r.stderr.count(url) == 2  # the error names it once; the hint's curl line once


def test_replay_rates_print_with_four_significant_digits(tmp_path):
    """A replayed trace's levels are its mean rate x each speed: 1.6666666666666667 req/s reads 1.667."""
    from pathlib import Path

    trace = Path(__file__).parent / "workload" / "data" / "mooncake_conversation_head.jsonl"
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--replay",
        str(trace),
        "--replay-speed",
        "1,2.5",
        "--out",
        str(tmp_path / "r"),
        "--no-report",
    )
    assert r.code == 0, r.stderr
    import re

    assert re.search(r"│\s+1\.667 │", r.stdout) and re.search(r"│\s+4\.167 │", r.stdout), r.stdout
    assert "1.6666666" not in r.stdout and "4.1666666" not in r.stdout


@pytest.mark.parametrize(
    "value, hint",
    [
        ("1", "pass --find-max rate"),  # not a dimension: no "--1 LOW,HIGH" in the hint
        ("concurrency", "pass --find-max rate, or give --concurrency LOW,HIGH"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "bench"])
def test_find_max_on_another_dimension_says_which_to_pass(command, value, hint):
    target = (
        ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
        if command == "simulate"
        else ["--base-url", "http://127.0.0.1:9"]
    )
    r = run_cli(command, *target, "--isl", "10", "--osl", "10", "--rate", "1,64", "--find-max", value)
    assert r.code != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.strip().endswith(hint), r.stderr
