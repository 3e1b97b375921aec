"""Validation table: published points with sources; docs/validation.md's table is exactly what the simulator
produces today; the median absolute error stays under the bound measured when the table was generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneecap.validation import (TABLE_BEGIN, TABLE_END, error_table, load_points, median_abs_error_pct, predict,
                                render_markdown)

DOC = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
# Measured: 18.8% over the 21 points when the table was generated (default step-time factors). The bound
# leaves only rounding room: a change that worsens the median must be looked at, not absorbed.
MEDIAN_ABS_ERROR_BOUND_PCT = 20.0


def doc_table() -> str:
    text = DOC.read_text()
    return text[text.index(TABLE_BEGIN): text.index(TABLE_END) + len(TABLE_END)]


def test_at_least_ten_published_points_each_with_a_source():
    points = load_points()
    assert len(points) >= 10
    assert len({p.id for p in points}) == len(points)
    for p in points:
        assert p.source_url.startswith("https://") and p.source_title and p.published > 0
        assert p.sim_requests <= p.requests
    assert {p.engine for p in points} == {"vllm", "tensorrt-llm"}
    assert len({p.source_url for p in points}) >= 3


def test_fast_points_match_the_documented_rows():
    """The cheap closed-loop points, re-simulated, give exactly the documented predictions."""
    points = [p for p in load_points() if p.concurrency != "max"]
    table = doc_table()
    for p in points:
        row = error_table([p])[0]
        assert f"| {row['published']:,.1f} | {row['predicted']:,.1f} | {row['error_pct']:+.1f}% |" in table, p.id


@pytest.mark.slow
def test_documented_table_is_regenerated_by_the_code_and_error_bound_holds():
    rows = error_table()  # runs the simulator on every point (about a minute on 2 cores)
    assert render_markdown(rows) == doc_table(), "docs/validation.md is stale: run `python -m kneecap.validation --write`"
    assert median_abs_error_pct(rows) <= MEDIAN_ABS_ERROR_BOUND_PCT


def test_prediction_is_deterministic():
    p = next(p for p in load_points() if p.concurrency != "max")
    assert predict(p) == predict(p)
