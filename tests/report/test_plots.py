"""Plots: PNG bytes of the expected size, None when there is nothing to draw (never an empty frame), and
what each figure shows (series, labels, axes, limit lines), read from the matplotlib Figure itself."""

from __future__ import annotations

import struct

import pytest

from kneecap.report import plots
from kneecap.report.plots import LoadPoint


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


POINTS = [
    LoadPoint(
        load=c,
        output_tok_s=100.0 * c**0.5,
        suspect=c == 8,
        latency_ms={"ttft_ms": {"p50": 10.0 * c, "p90": 15.0 * c, "p99": 20.0 * c}},
        kv_usage_max=min(1.0, c / 16),
        waiting_max=max(0, c - 8),
        running_max=min(c, 8),
    )
    for c in (1, 2, 4, 8, 16, 32)
]


@pytest.mark.parametrize(
    "make",
    [
        lambda: plots.throughput_vs_load(POINTS, "concurrency", "requests", knee_load=8, preflight_limit=16),
        lambda: plots.latency_vs_load(
            POINTS, "concurrency", "requests", [("ttft_ms", "TTFT")], {"ttft_ms": {"p99": 300}}
        ),
        lambda: plots.frontier([("a", [(10.0, 100.0, "C=1"), (20.0, 150.0, "C=2")]), ("b", [(12.0, 90.0, "C=1")])]),
        lambda: plots.ledger_bars(
            [
                ("levers", [("base", {"weights_bytes": 5e9, "kv_pool_bytes": 3e9}, "max seqs 3")]),
                ("tp", [("TP=2", {"kv_pool_bytes": 5e9, "other_bytes": 3e9}, "")]),
            ],
            8e9,
        ),
        lambda: plots.occupancy_over_time(
            [
                {
                    "label": "C=1",
                    "t": [0.0, 1.0, 2.0],
                    "kv_usage": [0.1, 0.5, None],
                    "queue": [0, 3, 1],
                    "running": [1, 2, 3],
                }
            ]
            * 5,
            "simulator trace",
        ),
        lambda: plots.peaks_vs_load(POINTS, "concurrency", "requests"),
        lambda: plots.tokens_per_chunk_histogram({1: 3, 2: 1, 3: 1}),
        lambda: plots.tokens_per_chunk_histogram({k: 1 for k in range(1, 200)}),
        lambda: plots.series_vs_load(
            [("x", [(1.0, 2.0), (2.0, 3.0)])], "rate", "req/s", "TTFT p99 (ms)", "t", [("budget", 2.5)]
        ),
    ],
)
def test_plots_render_pngs(make):
    width, height = _size(make())
    assert width >= 700 and height >= 350


@pytest.mark.parametrize(
    "make",
    [
        lambda: plots.throughput_vs_load([LoadPoint(load=1)], "concurrency", "requests"),
        lambda: plots.latency_vs_load([LoadPoint(load=1)], "concurrency", "requests", [("ttft_ms", "TTFT")]),
        lambda: plots.frontier([("a", [])]),
        lambda: plots.ledger_bars([("levers", [])], None),
        lambda: plots.occupancy_over_time([{"label": "C=1", "t": []}], "trace"),
        lambda: plots.peaks_vs_load([LoadPoint(load=1)], "concurrency", "requests"),
        lambda: plots.tokens_per_chunk_histogram({}),
    ],
)
def test_nothing_to_draw_is_none(make):
    assert make() is None


def test_keep_figures_collects_only_inside_its_block():
    with plots.keep_figures() as figures:
        plots.tokens_per_chunk_histogram({1: 3})
    plots.tokens_per_chunk_histogram({1: 3})
    assert len(figures) == 1 and plots._FIGURE_SINKS == []


def test_plots_are_deterministic():
    make = lambda: plots.throughput_vs_load(POINTS, "concurrency", "requests", knee_load=8)  # noqa: E731
    assert make() == make()


# -- what the plots show: the figure each one draws, caught on its way to PNG -----------------------------


@pytest.fixture
def drawn():
    """The matplotlib figures the plot functions render (in order), inspected instead of their pixels."""
    with plots.keep_figures() as figures:
        yield figures


def _lines(ax) -> dict:
    """label -> (xs, ys) of every labelled line on the axes."""
    return {
        line.get_label(): (list(map(float, line.get_xdata())), list(map(float, line.get_ydata())))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_throughput_plot_shows_the_series_the_knee_and_the_preflight_limit(drawn):
    plots.throughput_vs_load(POINTS, "concurrency", "requests", knee_load=8, preflight_limit=16)
    (fig,) = drawn
    (ax,) = fig.axes
    lines = _lines(ax)
    assert lines["output throughput"] == ([1, 2, 4, 8, 16, 32], [100.0 * c**0.5 for c in (1, 2, 4, 8, 16, 32)])
    assert lines["preflight KV limit (concurrency 16)"][0] == [16, 16]  # a vertical line at the limit
    assert ax.get_xlabel() == "concurrency (requests)" and ax.get_ylabel() == "output throughput (tok/s)"
    assert ax.get_xscale() == "log"  # loads span 32x
    labels = ax.get_legend_handles_labels()[1]
    assert "knee (concurrency 8)" in labels and "suspect level (client lag)" in labels
    knee = next(c for c in ax.collections if c.get_label() == "knee (concurrency 8)")
    assert [list(map(float, xy)) for xy in knee.get_offsets()] == [[8.0, 100.0 * 8**0.5]]


def test_latency_plot_shows_each_percentile_and_the_slo_line(drawn):
    plots.latency_vs_load(POINTS, "concurrency", "requests", [("ttft_ms", "TTFT")], {"ttft_ms": {"p99": 300}})
    (fig,) = drawn
    (ax,) = fig.axes
    lines = _lines(ax)
    loads = [1, 2, 4, 8, 16, 32]
    for name, scale in (("p50", 10.0), ("p90", 15.0), ("p99", 20.0)):
        assert lines[name] == (loads, [scale * c for c in loads])
    assert lines["SLO p99 ≤ 300 ms"][1] == [300.0, 300.0]  # a horizontal budget line
    assert ax.get_ylabel() == "TTFT (ms)" and ax.get_xlabel() == "concurrency (requests)"


def test_series_plot_shows_each_series_and_the_budget(drawn):
    plots.series_vs_load(
        [("run A", [(1.0, 2.0), (2.0, 3.0)]), ("run B", [(1.0, 1.5)])],
        "rate",
        "req/s",
        "TTFT p99 (ms)",
        "TTFT p99 by run",
        [("budget 2.5 ms", 2.5)],
    )
    (fig,) = drawn
    (ax,) = fig.axes
    lines = _lines(ax)
    assert lines["run A"] == ([1.0, 2.0], [2.0, 3.0]) and lines["run B"] == ([1.0], [1.5])
    assert lines["budget 2.5 ms"][1] == [2.5, 2.5]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("rate (req/s)", "TTFT p99 (ms)", "TTFT p99 by run")


def test_ledger_plot_stacks_each_part_and_draws_the_hbm_line(drawn):
    from kneecap.units import GiB

    plots.ledger_bars(
        [("levers", [("base", {"weights_bytes": 5 * GiB, "kv_pool_bytes": 3 * GiB}, "max seqs 3")])], 8 * GiB
    )
    (fig,) = drawn
    (ax,) = fig.axes
    heights = sorted(round(bar.get_height(), 6) for bar in ax.patches)
    assert heights == [3.0, 5.0]  # GiB: the two parts of one stacked bar
    assert _lines(ax)["HBM per GPU"][1] == [8.0, 8.0]
    assert ax.get_ylabel() == "memory per GPU (GiB)"


def test_histogram_shows_the_counts(drawn):
    plots.tokens_per_chunk_histogram({1: 3, 2: 1, 3: 1})
    (fig,) = drawn
    (ax,) = fig.axes
    assert sorted((round(b.get_x() + b.get_width() / 2), b.get_height()) for b in ax.patches) == [
        (1, 3),
        (2, 1),
        (3, 1),
    ]
    assert "5 chunks, 60 % carried one token" in ax.get_title()
    assert ax.get_xlabel() == "tokens carried by one streamed chunk (tokens)"
