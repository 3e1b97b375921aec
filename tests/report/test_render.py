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
    assert {Path(link).stem for link in links} == {"throughput", "latency", "frontier", "occupancy", "peaks", "chunks"}
    for link in links:
        assert (bench_dir / link).read_bytes().startswith(b"\x89PNG")


def test_bench_page_has_provenance_units_suspect_and_glossary(scripted_bench):
    """bench against a server that does not say it is simulated: the measured banner, the command line first,
    units, every suspect level marked (and only those), and the glossary."""
    results = load_results(scripted_bench)
    doc = build_document(results)
    md, page = to_markdown(doc), to_html(doc)
    for text in (md, page):
        assert "MEASURED on a real server" in text
        assert "SIMULATED" not in text
        assert "--concurrency 4,16" in text  # the exact command line near the top
        assert "TTFT p99 (ms)" in text and "output (tok/s)" in text  # units in headers
        assert "Glossary" in text
    # the command line comes before the first table of numbers
    assert md.index("kneecap bench --base-url") < md.index("Output throughput")
    # each level's row is marked exactly when the client judged it suspect (a busy machine may make any level so)
    for level in results.summary["levels"]:
        c = level["concurrency"]
        marked = re.search(rf"\| \*\*⚠ C={c}\*\* \|", md) is not None
        assert marked == bool(level["suspect"]), (c, level["suspect"])
        assert (re.search(rf'<tr class="row-warning"><td[^>]*>C={c}</td>', page) is not None) == bool(level["suspect"])
        for worker in level["client"]["per_worker"]:
            for reason in worker["suspect_reasons"]:
                assert reason.replace(">", "&gt;") in md and f"⚠ suspect: {reason.replace('>', '&gt;')}" in page
    assert "started_at" not in page  # client health shows the worst worker's lag and CPU, not raw fields
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


def test_simulate_past_the_kv_pool_shows_its_preemptions(sim_dir):
    """kneecap simulate with a 1,632-token KV pool: C=16 preempts, and the page's server table says how often."""
    from kneecap.report import numbers as fmt

    results = load_results(sim_dir)
    levels = results.summary["levels"]
    assert [lv["concurrency"] for lv in levels if lv["server_metrics"]["preemptions"]] == [16]  # C=4 fits the pool
    doc = build_document(results)
    md, page = to_markdown(doc), to_html(doc)
    assert "preemptions (count)" in md and "preemptions (count)" in page
    for lv in levels:
        sm = lv["server_metrics"]
        row = (
            f"| C={lv['concurrency']} | {fmt.pct(sm['kv_usage_max'])} | {fmt.pct(sm['kv_usage_mean'])} | "
            f"{sm['running_max']:,} | {sm['waiting_max']:,} | {sm['preemptions']:,} |"
        )
        assert row in md, row
    assert "the simulated engine's own counters" in md


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
    from kneecap.report import numbers as fmt

    results = load_results(run_dir)
    summary = results.summary
    doc = build_document(results)
    page, md = to_html(doc), to_markdown(doc)
    assert "SIMULATED" in page  # model_executed / benchmark_executed false
    assert "Load-plan worksheet — interactive-vs-throughput &lt;b&gt;bold&lt;/b&gt;" in md
    assert "Two scheduler configurations on one simulated H100" in md
    verdicts = {c["name"]: (c["verdict"], c["gate"]) for c in summary["candidates"]}
    # the large batch holds prompts back and breaches p99 TTFT in bursts: rejected at the SLO gate
    assert verdicts == {"interactive-small-batch": ("accepted", None), "throughput-large-batch": ("rejected", "slo")}
    assert summary["preferred"] == "interactive-small-batch"
    small, large = summary["candidates"]
    assert (
        f"| interactive-small-batch (preferred) | simulator | **accepted** | — | "
        f"{fmt.rate(small['peak_output_tok_s'])} |"
    ) in md
    assert f"| throughput-large-batch | simulator | **rejected** | slo | {fmt.rate(large['peak_output_tok_s'])} |" in md
    # cost: 2.5 $/GPU-hour over the output rate at capacity, per million output tokens
    cost = small["cost"]["short-message"]
    per_million = 2.5 / (cost["output_tok_s_at_capacity"] * 3600) * 1e6
    assert cost["usd_per_million_output_tokens"] == pytest.approx(per_million)
    assert (
        f"| interactive-small-batch | short-message | self-hosted | 2.5 $/GPU-hour × 1 GPUs | "
        f"{fmt.rate(cost['output_tok_s_at_capacity'])} | {per_million:.3f} |"
    ) in md
    assert "Capacity region" in page and "handoff/ (inside this results folder)" in page
    failed = summary["capacity"]["throughput-large-batch"]["short-message"]["warm"]["failed"]
    # each failing load missed its TTFT budget; a cell whose queue grew also names that (steady state)
    assert failed and all(any(r.startswith("ttft_p99_ms ") for r in reasons) for reasons in failed.values())
    assert all(r.startswith(("ttft_p99_ms ", "steady state: over capacity")) for rs in failed.values() for r in rs)
    for reasons in failed.values():
        for reason in reasons:
            assert reason.replace(">", "&gt;") in page  # failing loads and why
    # one ledger table, a column per candidate
    assert "| per GPU | interactive-small-batch | throughput-large-batch |" in md
    ledger = summary["worksheet"]["ledger"]["interactive-small-batch"]
    pool = (
        f"{fmt.gib(ledger['kv_pool_bytes'])} GiB ({ledger['kv_pool_bytes'] / ledger['hbm_bytes'] * 100:.1f} % of HBM)"
    )
    assert f"| KV-cache pool | {pool} | {pool} |" in md
    # offered load apart from completed throughput, Little's law, workload classes with budgets
    assert "offered (req/s)" in md and "dropped (requests)" in md
    for cell in summary["cells"]:  # Little's law: applied only over a stable interval, and said so
        little = cell["little"]
        assert little["applied"] or "interval not stable" in little["reason"]
    if not all(c["little"]["applied"] for c in summary["cells"]):
        assert "not applied (interval not stable)" in md
    assert "| short-message | fixed 512 tokens | fixed 64 tokens |" in md
    assert "ttft_p99_ms ≤ 300, itl_p99_ms ≤ 100, error_rate ≤ 0.01" in md
    names = {f.name for f in doc.figures}
    assert {"ttft_p99", "throughput", "frontier", "ledger", "chunks"} <= names


def test_missing_optional_inputs_are_named_not_fatal(bench_dir):
    """A bench folder copied without its requests.jsonl and manifest.json (summary.json alone)."""
    (bench_dir / "requests.jsonl").unlink()
    (bench_dir / "manifest.json").unlink()
    results = load_results(bench_dir)
    assert any("requests.jsonl" in m for m in results.missing)
    assert any("manifest" in m for m in results.missing)
    doc = build_document(results)
    md = to_markdown(doc)
    assert "No environment manifest" in md
    assert "Not in this results folder" in md
    assert "chunks" not in {f.name for f in doc.figures}  # no records: no tokens-per-chunk histogram


def test_empty_levels_render_a_warning(tmp_path):
    import json

    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"kind": "simulate", "levels": []}))
    md = to_markdown(build_document(load_results(folder)))
    assert "holds no levels" in md


def test_a_summary_holding_what_older_runs_wrote_still_renders(rate_sim, tmp_path):
    """The typed read keeps the forms older bench runs wrote: suspect as a reason or {reason}, the preflight
    verdict as a word, goodput as req_s, a distribution without n, a breach as a string, a skipped level
    without a reason, a level without server metrics."""
    import json
    import shutil

    folder = shutil.copytree(rate_sim, tmp_path / "older")
    doc = json.loads((folder / "summary.json").read_text())
    first, second = doc["levels"][0], doc["levels"][1]
    first.update(suspect="client CPU 99% of a core", goodput={"req_s": 0.25}, preflight="fits")
    first["ttft_ms"].pop("n")
    second.update(suspect={"reason": "event-loop lag"}, preflight="tight")
    second["slo"] = {"met": False, "breaches": ["error_rate 0.2 > 0.1", {"key": "tpot_p99_ms", "limit": 50}]}
    second.pop("server_metrics")
    doc["skipped"] = [{"rate": 8.0, "index": 4, "reason": "preflight_exceeds"}, {"rate": 16.0, "index": 5}]
    (folder / "summary.json").write_text(json.dumps(doc))
    md = to_markdown(build_document(load_results(folder)))
    assert "| suspect levels | 0.50 req/s (client CPU 99% of a core); 1.00 req/s (event-loop lag) |" in md
    assert "| skipped levels | 8.00 req/s: preflight_exceeds; 16.00 req/s: no reason recorded |" in md
    assert "missed: error_rate 0.2 &gt; 0.1; tpot_p99_ms" in md
    level_rows = md.split("requests (req/s) | goodput (req/s)")[1]
    assert "| 0.25 | fits |" in level_rows and "| **tight** |" in level_rows
    ttft = md.split("TTFT mean (ms)")[1].split("\n\n")[0]
    assert ttft.splitlines()[2].endswith("| — |")  # the first level's n, not written: a dash, not 0
    server = md.split("peak KV usage (% of blocks)")[1].split("\n\n")[0]
    assert "| 1.00 req/s | — | — | — | — | — | — |" in server


def test_rate_sweep_uses_rate_axis(rate_sim):
    doc = build_document(load_results(rate_sim))
    md = to_markdown(doc)
    levels = md.split("## Levels")[1].split("## Glossary")[0]
    for rate in ("0.50", "1.00", "2.00", "4.00"):
        assert f"| {rate} req/s |" in levels
    assert "C=" not in levels
    assert any(f.title == "Output throughput vs rate" for f in doc.figures)


@pytest.mark.parametrize("fmt,suffixes", [("md", {".md"}), ("html", {".html"}), ("both", {".md", ".html"})])
def test_formats(bench_dir, tmp_path, fmt, suffixes):
    paths = render_report(bench_dir, out=tmp_path / "out", formats=fmt)
    assert {p.suffix for p in paths} == suffixes
    assert all(p.parent == tmp_path / "out" for p in paths)


def test_out_as_file_name(bench_dir, tmp_path):
    paths = render_report(bench_dir, out=tmp_path / "x" / "mine.html", formats="html")
    assert paths == [tmp_path / "x" / "mine.html"]


def test_rerender_removes_plots_the_new_page_no_longer_has(bench_dir, plan_file, tmp_path):
    """A bench page, then a plan page into the same place: only the plan's plot is left beside it."""
    out = tmp_path / "page"
    render_report(bench_dir, out=out, formats="md")
    assert {"peaks.png", "throughput.png"} <= {p.name for p in (out / "report-plots").iterdir()}
    render_report(plan_file, out=out, formats="md")
    assert sorted(p.name for p in (out / "report-plots").iterdir()) == ["ledger.png"]


def test_end_to_end_on_a_real_simulate_folder(cli, tmp_path):
    """kneecap simulate (the real simulator) writes a folder; kneecap report renders it."""
    out = tmp_path / "sim"
    r = cli(
        "simulate",
        "--preset",
        "gqa-70b",
        "--gpu",
        "mi300x",
        "--isl",
        "500",
        "--osl",
        "50",
        "--concurrency",
        "1,8,64",
        "--requests",
        "16",
        "--trace",
        "--slo",
        "ttft_p99_ms=3000",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.code == 0, r.stderr
    doc = build_document(load_results(out))
    names = {f.name for f in doc.figures}
    assert {"throughput", "latency", "frontier", "occupancy", "chunks"} <= names
    md = to_markdown(doc)
    assert "SIMULATED" in md and "gqa-70b on mi300x" in md
    assert "| SLO | ttft_p99_ms=3000 |" in md  # recovered from the recorded command line


def test_the_reports_of_several_workers_give_each_reason_once_with_its_worst_figure():
    from kneecap.report.levels import suspect_reason

    per_worker = [
        {"loop_lag_p99_ms": lag, "suspect_reasons": [f"event-loop lag p99 {lag} ms > 5 ms"]} for lag in (7.8, 11.9, 6.1)
    ]
    per_worker[1]["suspect_reasons"].append("client CPU 97% of a core > 90%")
    from kneecap.metrics.summary_model import LevelSummary

    text = suspect_reason(LevelSummary.model_validate({"suspect": True, "client": {"per_worker": per_worker}}))
    assert text == "event-loop lag p99 11.9 ms > 5 ms (the worst of 3 reports); client CPU 97% of a core > 90%"
