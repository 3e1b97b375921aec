"""Markdown and HTML pages for synthetic bench / simulate / plan / run folders: what a reader must find."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kneecap.report.html import to_html
from kneecap.report.load import load_results
from kneecap.report.markdown import to_markdown
from kneecap.report.render import build_document, render_report


def _written(paths) -> dict[str, Path]:
    return {p.suffix: p for p in paths}


def test_bench_report_writes_markdown_plots_and_html(bench_dir):
    paths = _written(render_report(bench_dir))
    assert set(paths) == {".md", ".html"}
    md = paths[".md"].read_text()
    # every image the markdown links exists next to it, and is a PNG
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert {Path(link).stem for link in links} == {"throughput", "latency", "frontier", "peaks", "chunks"}
    for link in links:
        assert (bench_dir / link).read_bytes().startswith(b"\x89PNG")


def test_bench_page_has_provenance_units_suspect_and_glossary(bench_dir):
    doc = build_document(load_results(bench_dir))
    md, page = to_markdown(doc), to_html(doc)
    for text in (md, page):
        assert "MEASURED on a real server" in text
        assert "SIMULATED" not in text
        assert "--concurrency 1,2,4,8,16,32,64,128" in text  # the exact command line near the top
        assert "TTFT p99 (ms)" in text and "output (tok/s)" in text  # units in headers
        assert "Glossary" in text
    # the command line comes before the first table of numbers
    assert md.index("kneecap bench --base-url") < md.index("Output throughput")
    # the suspect level (C=64) is flagged in the level table, in both formats
    assert re.search(r"\| \*\*⚠ C=64\*\* \|", md), "suspect row marked in markdown"
    assert re.search(r'<tr class="row-warning"><td[^>]*>C=64</td>', page)
    assert "event-loop lag p99 80.0 ms &gt; 20 ms" in md
    assert re.search(r"\| \*\*⚠ C=64\*\* \| 80\.00 \| 0\.97 \|", md)  # worst worker's lag and CPU
    assert "⚠ suspect: event-loop lag p99 80.0 ms &gt; 20 ms" in page  # why it is suspect
    assert "loop lag p99 ms (ms)" in page and "started_at" not in page  # client health, worst worker
    # glossary formulas match DESIGN.md
    assert "first_token_at − sent_at" in md
    assert "(E2E − TTFT) / (output tokens − 1)" in page
    assert "counts as k tokens" in page


def test_simulate_page_is_unmistakably_simulated_and_plots_the_trace(real_sim):
    doc = build_document(load_results(real_sim[0]))
    page = to_html(doc)
    assert "SIMULATED — not measured on a real server" in page
    assert "tone-simulated" in page and "MEASURED" not in page
    names = [f.name for f in doc.figures]
    assert {"occupancy", "peaks"} <= set(names)
    occupancy = next(f for f in doc.figures if f.name == "occupancy")
    assert "over time" in occupancy.title  # from the trace, not the per-level peaks


def test_bench_flags_saying_nothing_ran_win_over_kind(tmp_path, bench_dir):
    import json

    summary = json.loads((bench_dir / "summary.json").read_text())
    summary["benchmark_executed"] = False
    summary["model_executed"] = False
    (bench_dir / "summary.json").write_text(json.dumps(summary))
    page = to_html(build_document(load_results(bench_dir)))
    assert "SIMULATED" in page and "kind says bench" in page


def test_plan_page_from_a_file_and_from_a_folder(plan_file, tmp_path):
    doc = build_document(load_results(plan_file))
    md = to_markdown(doc)
    assert "PLANNED" in md
    assert "KV-cache pool" in md
    assert "| fp8-weights+fp8-kv |" in md
    assert "TP (degree)" in md and "context (tokens)" in md and "gain (× max sequences)" in md
    assert [f.name for f in doc.figures] == ["ledger"]
    # the folder form
    folder = tmp_path / "planned"
    folder.mkdir()
    (folder / "plan.json").write_text(plan_file.read_text())
    paths = _written(render_report(folder))
    assert paths[".html"].parent == folder


def test_plan_ledger_lines_carry_gib_and_share_of_hbm(plan_file):
    md = to_markdown(build_document(load_results(plan_file)))
    # HBM 192e9 bytes = 178.81 GiB; weights 140e9 bytes = 130.39 GiB = 72.9 % of HBM
    assert "178.81 GiB" in md
    assert "130.39 GiB (72.9 % of HBM)" in md
    assert "327,680 bytes" in md


def test_run_worksheet_shows_candidates_capacity_cells_and_ledger(run_dir):
    doc = build_document(load_results(run_dir))
    page, md = to_html(doc), to_markdown(doc)
    assert "SIMULATED" in page  # model_executed / benchmark_executed false
    assert "Load-plan worksheet — interactive-vs-throughput" in md and "Two batch sizes on one GPU." in md
    assert "| interactive-small-batch (preferred) | simulator | **accepted** | — | 1,200 | met every budget |" in md
    assert "| throughput-large-batch | simulator | **rejected** | slo | 1,560 |" in md
    # cost: 2.5 $/GPU-hour / (1200 tok/s x 3600 s) x 1e6 = 0.579 $ per 1M output tokens
    assert "| interactive-small-batch | short-message | self-hosted | 2.5 $/GPU-hour × 1 GPUs | 1,200 | 0.579 |" in md
    assert "Capacity region" in page and "handoff/ (inside this results folder)" in page
    assert "ttft_p99_ms 600.0 &gt; 500" in page  # failing loads and why
    # one ledger table, a column per candidate
    assert "| per GPU | interactive-small-batch | throughput-large-batch |" in md
    # 192e9 − 140e9 − 4 GiB − 5 % of the rest = 45,319,781,069 bytes = 42.21 GiB, 23.6 % of HBM
    assert "| KV-cache pool | 42.21 GiB (23.6 % of HBM) | 42.21 GiB (23.6 % of HBM) |" in md
    # offered load apart from completed throughput, Little's law, workload classes with budgets
    assert "offered (req/s)" in md and "dropped (requests)" in md and "consistent (3.0 % off)" in md
    assert "lognormal mean 400.0, std 200.0 (clipped to 1..4,000) tokens" in md
    assert "ttft_p99_ms ≤ 500, itl_p99_ms ≤ 60, error_rate ≤ 0.01" in md
    names = {f.name for f in doc.figures}
    assert {"ttft_p99", "throughput", "frontier", "ledger", "chunks"} <= names


def test_missing_optional_inputs_are_named_not_fatal(tmp_path):
    import json

    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"kind": "bench", "levels": [
        {"concurrency": 1, "requests": 3, "completed": 3, "failed": 0, "output_tok_s": 10.0}]}))
    results = load_results(folder)
    assert any("requests.jsonl" in m for m in results.missing)
    assert any("manifest" in m for m in results.missing)
    md = to_markdown(build_document(results))
    assert "No environment manifest" in md
    assert "Not in this results folder" in md
    assert "| C=1 | 3 | 3 | 0 | — |" in md  # absent values are a dash, never a fake zero


def test_empty_levels_render_a_warning(tmp_path):
    import json

    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"kind": "simulate", "levels": []}))
    md = to_markdown(build_document(load_results(folder)))
    assert "holds no levels" in md


def test_rate_sweep_uses_rate_axis(make_sweep):
    folder = make_sweep("open-loop", kind="bench", loads=(0.5, 1.0, 2.0, 4.0), axis="rate")
    doc = build_document(load_results(folder))
    md = to_markdown(doc)
    assert "| 0.50 req/s |" in md and "C=" not in md.split("## Levels")[1].split("## Glossary")[0]
    assert any(f.title == "Output throughput vs rate" for f in doc.figures)


@pytest.mark.parametrize("fmt,suffixes", [("md", {".md"}), ("html", {".html"}), ("both", {".md", ".html"})])
def test_formats(bench_dir, tmp_path, fmt, suffixes):
    paths = render_report(bench_dir, out=tmp_path / "out", formats=fmt)
    assert {p.suffix for p in paths} == suffixes
    assert all(p.parent == tmp_path / "out" for p in paths)


def test_out_as_file_name(bench_dir, tmp_path):
    paths = render_report(bench_dir, out=tmp_path / "x" / "mine.html", formats="html")
    assert paths == [tmp_path / "x" / "mine.html"]


def test_rerender_removes_plots_the_new_page_no_longer_has(bench_dir):
    import json

    render_report(bench_dir, formats="md")
    assert (bench_dir / "report-plots" / "peaks.png").is_file()
    summary = json.loads((bench_dir / "summary.json").read_text())
    for level in summary["levels"]:
        level.pop("server_metrics")
    (bench_dir / "summary.json").write_text(json.dumps(summary))
    render_report(bench_dir, formats="md")
    assert not (bench_dir / "report-plots" / "peaks.png").exists()
    assert (bench_dir / "report-plots" / "throughput.png").is_file()


def test_end_to_end_on_a_real_simulate_folder(cli, tmp_path):
    """kneecap simulate (the real simulator) writes a folder; kneecap report renders it."""
    out = tmp_path / "sim"
    r = cli("simulate", "--preset", "gqa-70b", "--gpu", "mi300x", "--isl", "500", "--osl", "50",
            "--concurrency", "1,8,64", "--requests", "16", "--trace", "--slo", "ttft_p99_ms=3000",
            "--out", str(out), "--quiet")
    assert r.code == 0, r.stderr
    doc = build_document(load_results(out))
    names = {f.name for f in doc.figures}
    assert {"throughput", "latency", "frontier", "occupancy", "chunks"} <= names
    md = to_markdown(doc)
    assert "SIMULATED" in md and "gqa-70b on mi300x" in md
    assert "| SLO | ttft_p99_ms=3000 |" in md  # recovered from the recorded command line
