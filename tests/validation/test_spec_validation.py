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
MEDIAN_BASELINE_PCT = 4.4  # today's median absolute error; a change may not worsen it by more than 2 points


@pytest.fixture(scope="module")
def rows():
    return error_rows()


def test_the_docs_table_is_what_the_module_prints(rows):
    sources, _ = load_points()
    text = DOC.read_text()
    block = re.search(r"<!-- spec-validation:begin -->\n(.*?)<!-- spec-validation:end -->", text, re.S).group(1)
    assert block == render_markdown(rows, sources)


def test_at_least_eight_published_points_within_the_baseline(rows):
    assert len(rows) >= 8
    assert median_abs_error_pct(rows) <= MEDIAN_BASELINE_PCT + 2.0


def _tpot_p50(cmd: str, tmp_path: Path, name: str) -> float:
    r = run_cli(*shlex.split(cmd)[1:], "--out", str(tmp_path / name), "--json", "--no-report", "--quiet")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["levels"][0]["tpot_ms"]["p50"]


def test_each_rows_commands_give_its_ratio(rows, tmp_path):
    for i, row in enumerate(rows):
        base_cmd, spec_cmd = row["commands"]
        ratio = _tpot_p50(base_cmd, tmp_path, f"b{i}") / _tpot_p50(spec_cmd, tmp_path, f"s{i}")
        assert ratio == pytest.approx(row["simulated"], rel=1e-9), (i, ratio, row["simulated"])


@pytest.mark.parametrize("length,k,rate", [(1.92, 1, 0.92), (3.99, 3, 0.9983), (1.0, 5, 0.0)])
def test_the_per_position_rate_gives_the_published_length(length, k, rate):
    a = position_rate(length, k)
    assert a == pytest.approx(rate, abs=1e-3)
    assert sum(a**i for i in range(k + 1)) == pytest.approx(length, abs=1e-3)


def test_an_impossible_length_is_one_line():
    with pytest.raises(KneecapError, match="impossible with 3 draft tokens"):
        position_rate(4.5, 3)
