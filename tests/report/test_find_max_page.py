"""A --find-max sweep's report shows the search: every probe against the SLO budget, the answer and the next
step up that failed, from a real `kneecap simulate --find-max` run."""

from __future__ import annotations

import html
import json

from clitools import run_cli
from kneecap.report import plots
from kneecap.report.load import load_results
from kneecap.report.markdown import to_markdown
from kneecap.report.render import build_document


def test_the_report_plots_the_search_for_the_highest_load_under_the_slo(tmp_path):
    out = tmp_path / "fm"
    r = run_cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "512",
        "--osl",
        "64",
        "--concurrency",
        "1,256",
        "--requests",
        "64",
        "--find-max",
        "concurrency",
        "--slo",
        "ttft_p99_ms=200",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
    )
    assert r.code == 0, r.stderr
    m = json.loads((out / "summary.json").read_text())["max_load"]
    assert m["value"] is not None and m["failed_at"] is not None  # the search has both ends at this size
    with plots.keep_figures() as figures:
        doc = build_document(load_results(out))
    (fig,) = [f for f in figures if "under the SLO" in f.axes[0].get_title()]
    ax = fig.axes[0]
    assert ax.get_title() == f"Highest concurrency under the SLO: {len(m['probes'])} probes"
    met, failed = ax.collections  # green circles, red crosses: one point per probe
    assert len(met.get_offsets()) == sum(p["met"] for p in m["probes"])
    assert len(failed.get_offsets()) == sum(not p["met"] for p in m["probes"])
    assert sorted(x for x, _ in failed.get_offsets()) == sorted(p["load"] for p in m["probes"] if not p["met"])
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["SLO ttft_p99_ms ≤ 200"].get_ydata()) == [200, 200]
    assert lines[f"answer: {m['value']:g}"].get_xdata()[0] == m["value"]
    assert lines[f"next step up failed: {m['failed_at']:g}"].get_xdata()[0] == m["failed_at"]
    assert ax.get_ylabel() == "ttft_p99_ms (ms)"
    text = html.unescape(" ".join(to_markdown(doc).split()))
    assert (
        f"Find-max: {m['value']:g} streams: the highest load meeting every SLO at steady state "
        f"(bracket: met at {m['value']:g}, failed at {m['failed_at']:g}; binding: "
    ) in text


def test_a_sweep_without_a_search_has_no_search_plot(real_sim):
    folder, _ = real_sim
    with plots.keep_figures() as figures:
        build_document(load_results(folder))
    assert not [f for f in figures if "under the SLO" in f.axes[0].get_title()]
