"""Reports and terminal tables of real runs (kneecap simulate, kneecap plan, kneecap bench against
kneecap serve): what a reader sees about provenance, SLO verdicts and capacity."""

from __future__ import annotations

import json

from kneecap.report.html import to_html
from kneecap.report.load import load_results
from kneecap.report.markdown import to_markdown
from kneecap.report.render import build_document


def _pages(folder):
    doc = build_document(load_results(folder))
    return to_markdown(doc), to_html(doc)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_bench_against_kneecap_serve_says_the_server_is_simulated(real_bench):
    folder, _ = real_bench
    summary = json.loads((folder / "summary.json").read_text())
    assert "(simulated engine)" in summary["server"]["version"]  # what the server said about itself
    for page in _pages(folder):
        assert "MEASURED against a simulated engine — no model ran" in page
        assert "MEASURED on a real server" not in page


def test_bench_table_shows_the_slo_verdict_of_every_level(real_bench):
    folder, stdout = real_bench
    summary = json.loads((folder / "summary.json").read_text())
    levels = summary["levels"]
    assert levels and all(lv["slo"]["met"] is False for lv in levels)
    text = _flat(stdout)
    assert text.count("BREACH itl_p99_ms") == len(levels)
    breached = ", ".join(str(lv["concurrency"]) for lv in levels)
    assert f"SLO BREACHED at C={breached} ({len(levels)} of {len(levels)} levels)" in text


def test_plan_report_without_mean_context_does_not_headline_the_worst_case(real_plan):
    plan = json.loads(real_plan.read_text())
    assert plan["worst_case"] and plan["max_concurrency"] == 11
    md, page = _pages(real_plan)
    assert "max concurrency if every sequence holds the full 131,072 tokens (worst case)" in md
    assert "2,000 tokens → 772" in md and "2,000 tokens → 772" in page
    assert "| max concurrency | 11" not in md


def test_plan_report_shows_the_kv_derivation_step_by_step(real_plan):
    plan = json.loads(real_plan.read_text())
    md, page = _pages(real_plan)
    for text in (md, page):
        assert "KV bytes per token, step by step" in text
        assert "2 (K and V) × 80 layers × 8 kv_heads × 128 head_dim × 2 B (bf16) = 327,680 B" in text
        assert f"= {plan['kv_bytes_per_token']:,} B per token per sequence" in text
        assert "→ 40,960 B per token" in text  # TP=8: one KV head per rank
