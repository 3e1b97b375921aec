"""What the report's plots show, read from the matplotlib figures themselves (series, labels, budget lines,
axes), for pages built from real runs: kneecap simulate with a trace and an SLO, kneecap bench against
kneecap serve, and kneecap run of the quick example."""

from __future__ import annotations

import pytest

from kneecap.report import plots
from kneecap.report.load import load_results
from kneecap.report.render import build_document


@pytest.fixture
def figures():
    """build(folder) -> {figure title: matplotlib Figure} for every plot the page drew."""

    def build(folder):
        with plots.keep_figures() as drawn:
            build_document(load_results(folder))
        return {(fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()): fig for fig in drawn}

    return build


def _lines(ax) -> dict:
    """label -> (xs, ys) of every labelled line on the axes."""
    return {
        line.get_label(): (list(map(float, line.get_xdata())), list(map(float, line.get_ydata())))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def _one(figs: dict, starts: str):
    (fig,) = [f for title, f in figs.items() if title.startswith(starts)]
    return fig


def test_tokens_per_chunk_axis_shows_the_sizes_seen(real_sim, figures):
    folder, _ = real_sim
    counts = load_results(folder).records.chunk_token_counts
    assert set(counts) == {1}  # the simulated engine streams one token per chunk
    ax = _one(figures(folder), "Tokens per chunk").axes[0]
    assert list(ax.get_xticks()) == [1.0]
    low, high = ax.get_xlim()
    assert low == 0.5 and high >= 1.5
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1"]


def test_occupancy_panels_are_large_and_count_time_from_each_level_start(real_sim, figures):
    folder, _ = real_sim
    fig = _one(figures(folder), "KV occupancy and queue depth over time")
    panels = [ax for ax in fig.axes if ax.get_title().startswith("C=")]
    assert len(panels) == 3  # one per level
    width_in = fig.get_size_inches()[0]
    columns = len({round(ax.get_position().x0, 2) for ax in panels})
    assert width_in / columns >= 5.0  # each panel at least 5 inches wide
    for ax in panels:
        assert ax.get_xlabel() == "time since the level's first step (s)"
        starts = [min(line.get_xdata()) for line in ax.lines if len(line.get_xdata())]
        assert starts and min(starts) == 0.0


def test_run_ttft_plot_has_the_budget_line_and_a_log_axis(real_run, figures):
    import json

    summary = json.loads((real_run / "summary.json").read_text())
    budgets = {cls: b["ttft_p99_ms"] for cls, b in summary["worksheet"]["budgets"].items()}
    ax = _one(figures(real_run), "p99 TTFT vs").axes[0]
    horizontal = {
        line.get_label(): line.get_ydata()[0]
        for line in ax.lines
        if len(set(line.get_ydata())) == 1 and "budget" in line.get_label()
    }
    assert sorted(horizontal.values()) == sorted(float(v) for v in budgets.values())
    for cls, value in budgets.items():
        assert f"{cls} budget: p99 TTFT ≤ {value:g} ms" in horizontal
    assert ax.get_yscale() == "log"


def test_frontier_labels_stay_inside_the_axes_and_do_not_overlap(real_run, real_sim, figures):
    for folder in (real_run, real_sim[0]):
        fig = _one(figures(folder), "Throughput–latency frontier")
        ax = fig.axes[0]
        if not hasattr(fig.canvas, "get_renderer"):
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            FigureCanvasAgg(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        frame = ax.get_window_extent()
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert boxes, "every point is labelled"
        for box in boxes:
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not a.overlaps(b)


def test_simulate_throughput_plot_draws_each_level_on_a_log_axis(real_sim, figures):
    import json

    folder, _ = real_sim
    levels = json.loads((folder / "summary.json").read_text())["levels"]
    ax = _one(figures(folder), "Output throughput vs concurrency").axes[0]
    lines = _lines(ax)
    assert [name for name in lines if not name.startswith("preflight")] == ["output throughput"]  # one series
    xs, ys = lines["output throughput"]
    assert xs == [1.0, 16.0, 64.0] and ys == [lv["output_tok_s"] for lv in levels]
    assert ax.get_xscale() == "log"  # the loads span 64x
    assert ax.get_xlabel() == "concurrency (concurrent requests)" and ax.get_ylabel() == "output throughput (tok/s)"


def test_simulate_latency_plot_draws_the_slo_budget(real_sim, figures):
    """--slo ttft_p99_ms=200,itl_p99_ms=15: a horizontal budget line on the TTFT and ITL panels, none elsewhere."""
    import json

    folder, _ = real_sim
    levels = json.loads((folder / "summary.json").read_text())["levels"]
    fig = _one(figures(folder), "TTFT percentiles vs concurrency")  # one panel per metric, TTFT first
    by_unit = {ax.get_ylabel(): ax for ax in fig.axes if ax.get_ylabel()}
    budgets = {}
    for ylabel, ax in by_unit.items():
        lines = _lines(ax)
        for name in ("p50", "p90", "p99"):
            metric = {"TTFT (ms)": "ttft_ms", "ITL (ms)": "itl_ms", "TPOT (ms)": "tpot_ms", "E2E (ms)": "e2e_ms"}.get(
                ylabel
            )
            if metric and name in lines:
                assert lines[name] == ([1.0, 16.0, 64.0], [lv[metric][name] for lv in levels]), (ylabel, name)
        budgets[ylabel] = [ys[0] for label, (xs, ys) in lines.items() if label.startswith("SLO")]
    assert budgets["TTFT (ms)"] == [200.0] and budgets["ITL (ms)"] == [15.0]
    assert all(not b for label, b in budgets.items() if label not in ("TTFT (ms)", "ITL (ms)"))


def test_bench_peaks_plot_shows_what_the_server_reported(bench_run, figures):
    """kneecap bench against kneecap serve: the peaks plot draws each level's scraped server_metrics."""
    import json

    levels = json.loads((bench_run / "summary.json").read_text())["levels"]
    loads = [float(lv["concurrency"]) for lv in levels]
    metrics = [lv["server_metrics"] for lv in levels]
    fig = _one(figures(bench_run), "Peak KV occupancy")
    left, right = fig.axes
    assert _lines(left) == {"peak KV usage (%)": (loads, pytest.approx([100 * m["kv_usage_max"] for m in metrics]))}
    assert _lines(right) == {
        "peak queue depth (requests)": (loads, [float(m["waiting_max"]) for m in metrics]),
        "peak running (requests)": (loads, [float(m["running_max"]) for m in metrics]),
    }
    assert left.get_ylabel() == "peak KV cache usage (% of blocks)" and right.get_ylabel() == "requests"
    assert left.get_ylim() == (0.0, 105.0)
