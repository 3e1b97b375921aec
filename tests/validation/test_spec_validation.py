"""Speculative decoding against published speedups (kneecap.spec_validation): the table in
docs/speculative-and-routing.md is what the module prints, each row's two `kneecap simulate` commands give its
ratio, and the median error does not grow."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from clitools import run_cli
from kneecap.errors import KneecapError
from kneecap.spec_validation import error_rows, load_points, median_abs_error_pct, position_rate, render_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "speculative-and-routing.md"
MEDIAN_BASELINE_PCT = 17.6  # today's median absolute error; a change may not worsen it by more than 2 points


@pytest.fixture(scope="module")
def rows():
    return error_rows()


def test_the_docs_table_is_what_the_module_prints(rows):
    sources, _ = load_points()
    text = DOC.read_text()
    block = re.search(r"<!-- spec-validation:begin -->\n(.*?)<!-- spec-validation:end -->", text, re.S).group(1)
    assert block == render_markdown(rows, sources)


def test_at_least_ten_published_points_within_the_baseline(rows):
    assert len(rows) >= 10
    assert len({r["point"].method for r in rows}) >= 3  # MTP, EAGLE and EAGLE-3
    assert median_abs_error_pct(rows) <= MEDIAN_BASELINE_PCT + 2.0


def test_a_speedup_given_as_two_tpots_is_their_ratio():
    _, points = load_points()
    timed = [p for p in points if p.tpot_ms]
    assert timed and all(p.speedup == p.tpot_ms[0] / p.tpot_ms[1] for p in timed)


def _tpot_p50(cmd: str, tmp_path: Path, name: str) -> float:
    r = run_cli(*shlex.split(cmd)[1:], "--out", str(tmp_path / name), "--json", "--no-report", "--quiet")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["levels"][0]["tpot_ms"]["p50"]


def test_each_rows_commands_give_its_ratio(rows, tmp_path):
    tpot = {}  # rows share their baseline command: each distinct command runs once
    for i, row in enumerate(rows):
        for j, cmd in enumerate(row["commands"]):
            if cmd not in tpot:
                tpot[cmd] = _tpot_p50(cmd, tmp_path, f"r{i}c{j}")
        base_cmd, spec_cmd = row["commands"]
        ratio = tpot[base_cmd] / tpot[spec_cmd]
        assert ratio == pytest.approx(row["simulated"], rel=1e-9), (i, ratio, row["simulated"])


@pytest.mark.parametrize("length,k,rate", [(1.92, 1, 0.92), (3.99, 3, 0.9983), (1.0, 5, 0.0)])
def test_the_per_position_rate_gives_the_published_length(length, k, rate):
    a = position_rate(length, k)
    assert a == pytest.approx(rate, abs=1e-3)
    assert sum(a**i for i in range(k + 1)) == pytest.approx(length, abs=1e-3)


def test_an_impossible_length_is_one_line():
    with pytest.raises(KneecapError, match="impossible with 3 draft tokens"):
        position_rate(4.5, 3)
