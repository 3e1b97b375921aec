"""What the report's plots show, read from the matplotlib figures themselves (series, labels, budget lines,
axes), for pages built from real runs: kneecap simulate with a trace, and kneecap run of the quick example."""

from __future__ import annotations

import pytest

from kneecap.report import plots
from kneecap.report.load import load_results
from kneecap.report.render import build_document


@pytest.fixture
def figures(monkeypatch):
    """build(folder) -> {figure title: matplotlib Figure} for every plot the page drew."""
    real_png = plots._png

    def build(folder):
        drawn = []

        def keep(fig):
            drawn.append(fig)
            return real_png(fig)

        monkeypatch.setattr(plots, "_png", keep)
        build_document(load_results(folder))
        return {(fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()): fig for fig in drawn}

    return build


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
    horizontal = {line.get_label(): line.get_ydata()[0] for line in ax.lines
                  if len(set(line.get_ydata())) == 1 and "budget" in line.get_label()}
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
            for b in boxes[i + 1:]:
                assert not a.overlaps(b)
