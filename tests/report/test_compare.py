"""Comparing two sweeps level by level: deltas, the better side per metric, ties, mismatches."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.report.compare import TIE_FRACTION, compare_document, compare_levels, metric_delta
from kneecap.report.html import to_html
from kneecap.report.load import load_results
from kneecap.report.markdown import to_markdown


def _level(c, tok_s, ttft_p99, failed=0):
    return {
        "concurrency": c,
        "output_tok_s": tok_s,
        "total_tok_s": tok_s * 2,
        "request_s": tok_s / 100,
        "ttft_ms": {"p50": ttft_p99 / 2, "p99": ttft_p99},
        "itl_ms": {"p99": 20.0},
        "tpot_ms": {"p99": 25.0},
        "e2e_ms": {"p99": 1000.0},
        "failed": failed,
    }


@pytest.mark.parametrize(
    "higher,a,b,better",
    [
        (True, 100.0, 120.0, "B"),  # more throughput: B
        (True, 100.0, 80.0, "A"),
        (False, 100.0, 80.0, "B"),  # less latency: B
        (False, 100.0, 150.0, "A"),
        (False, 100.0, 100.5, "tie"),  # within TIE_FRACTION
        (True, 0.0, 0.0, "tie"),
        (False, 0.0, 2.0, "A"),  # failures appearing in B
    ],
)
def test_metric_delta_direction(higher, a, b, better):
    d = metric_delta("m", "m", "u", higher, a, b)
    assert d.better == better
    assert d.delta == pytest.approx(b - a)
    if a:
        assert d.relative == pytest.approx((b - a) / a)


def test_missing_side_has_no_verdict():
    d = metric_delta("m", "m", "u", True, None, 5.0)
    assert d.better is None and d.delta is None


def test_compare_levels_matches_by_load():
    a = {"levels": [_level(1, 100, 200), _level(2, 180, 300), _level(4, 300, 500)]}
    b = {"levels": [_level(2, 198, 240), _level(4, 300, 800, failed=2), _level(8, 400, 900)]}
    matched, only_a, only_b = compare_levels(a, b)
    assert [m.load for m in matched] == [2.0, 4.0]
    assert only_a == ["C=1"] and only_b == ["C=8"]
    by = {d.metric: d for d in matched[0].deltas}
    assert by["output_tok_s"].delta == pytest.approx(18.0)
    assert by["output_tok_s"].relative == pytest.approx(0.10)
    assert by["output_tok_s"].better == "B"
    assert by["ttft_p99_ms"].delta == pytest.approx(-60.0) and by["ttft_p99_ms"].better == "B"
    by4 = {d.metric: d for d in matched[1].deltas}
    assert by4["output_tok_s"].better == "tie"
    assert by4["ttft_p99_ms"].better == "A"
    assert by4["failed"].better == "A"
    assert abs(by4["itl_p99_ms"].delta) <= TIE_FRACTION and by4["itl_p99_ms"].better == "tie"


def test_compare_rate_with_concurrency_is_an_error():
    a = {"levels": [_level(1, 100, 200)]}
    b = {"levels": [{"rate": 1.0, "output_tok_s": 5.0}]}
    with pytest.raises(KneecapError, match="concurrency sweep with a rate sweep"):
        compare_levels(a, b)


def test_compare_page_measured_vs_simulated(scripted_bench, sim_dir):
    """kneecap bench (against a server that does not say it is simulated) against kneecap simulate, level by level."""
    from kneecap.report import numbers as fmt

    a, b = load_results(scripted_bench), load_results(sim_dir)
    doc = compare_document(a, b)
    md, page = to_markdown(doc), to_html(doc)
    assert f"A ({a.name}): MEASURED" in md and f"B ({b.name}): SIMULATED" in md
    assert "one side was not measured on a real server" in md
    by_a = {lv["concurrency"]: lv for lv in a.summary["levels"]}
    by_b = {lv["concurrency"]: lv for lv in b.summary["levels"]}
    shared = sorted(set(by_a) & set(by_b))
    assert shared == [4, 16]
    wins = {"A": 0, "B": 0, "tie": 0}
    for c in shared:  # each row: A, B, B − A, (B − A)/A and the side with more tok/s (a tie within 1 %)
        x, y = by_a[c]["output_tok_s"], by_b[c]["output_tok_s"]
        better = "tie" if abs(y - x) <= TIE_FRACTION * max(x, y) else "B" if y > x else "A"
        wins[better] += 1
        verdict = "tie" if better == "tie" else f"**{better}**"
        sign = "+" if y > x else ""
        row = f"| C={c} | {fmt.rate(x)} | {fmt.rate(y)} | {sign}{fmt.rate(y - x)} | {fmt.pct((y - x) / x, signed=True)} | {verdict} |"
        assert row in md, row
    assert f"| output throughput (tok/s) | higher | {wins['A']} | {wins['B']} | {wins['tie']} |" in md
    assert {f.name for f in doc.figures} == {"throughput", "frontier"}
    if wins["A"] or wins["B"]:
        assert 'tone-better">' in page


def test_compare_names_levels_only_one_side_ran(bench_dir, sim_dir):
    doc = compare_document(load_results(bench_dir), load_results(sim_dir))
    md = to_markdown(doc)
    assert "Levels only in A: C=1; only in B: none (not compared)." in md  # bench ran C=1,4,16; simulate C=4,16


def test_compare_refuses_plan_or_run(bench_dir, plan_file):
    with pytest.raises(KneecapError, match="plan result"):
        compare_document(load_results(bench_dir), load_results(plan_file))
