"""Errors of the load flags name the flag the user gave: --replay-speed is not --rate, an empty trace file is not
a CSV without a header."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.workload import parse_rates
from kneecap.workload.traces import parse_trace
from tests.clitools import run_cli


@pytest.mark.parametrize("spec", ["0", "1,x", ","])
def test_replay_speed_errors_name_replay_speed(spec):
    with pytest.raises(KneecapError) as exc:
        parse_rates(spec, "--replay-speed")
    line = exc.value.one_line()
    assert "--replay-speed" in line and "--rate" not in line and "requests/s" not in line, line


def test_rate_errors_still_name_rate():
    with pytest.raises(KneecapError, match="request rates must be numbers > 0"):
        parse_rates("0")


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_trace_is_named_empty_whatever_its_format(text):
    with pytest.raises(KneecapError) as exc:
        parse_trace(text, "t.jsonl")
    assert exc.value.message == "trace t.jsonl is empty" and "Mooncake" in exc.value.hint


def test_simulate_replay_speed_zero_is_named(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n')
    r = run_cli(
        "simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--replay", str(trace), "--replay-speed", "0"
    )
    assert r.code == 2 and r.stderr.startswith("error: replay speeds must be numbers > 0"), r.stderr
