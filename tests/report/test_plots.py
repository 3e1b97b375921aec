"""Plots: PNG bytes of the expected size, or None when there is nothing to draw (never an empty frame)."""

from __future__ import annotations

import struct

import pytest

from kneecap.report import plots
from kneecap.report.plots import LoadPoint


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


POINTS = [LoadPoint(load=c, output_tok_s=100.0 * c ** 0.5, suspect=c == 8,
                    latency_ms={"ttft_ms": {"p50": 10.0 * c, "p90": 15.0 * c, "p99": 20.0 * c}},
                    kv_usage_max=min(1.0, c / 16), waiting_max=max(0, c - 8), running_max=min(c, 8))
          for c in (1, 2, 4, 8, 16, 32)]


@pytest.mark.parametrize("make", [
    lambda: plots.throughput_vs_load(POINTS, "concurrency", "requests", knee_load=8, preflight_limit=16),
    lambda: plots.latency_vs_load(POINTS, "concurrency", "requests", [("ttft_ms", "TTFT")], {"ttft_ms": {"p99": 300}}),
    lambda: plots.frontier([("a", [(10.0, 100.0, "C=1"), (20.0, 150.0, "C=2")]), ("b", [(12.0, 90.0, "C=1")])]),
    lambda: plots.ledger_bars([("levers", [("base", {"weights_bytes": 5e9, "kv_pool_bytes": 3e9}, "max seqs 3")]),
                               ("tp", [("TP=2", {"kv_pool_bytes": 5e9, "other_bytes": 3e9}, "")])], 8e9),
    lambda: plots.occupancy_over_time([{"label": "C=1", "t": [0.0, 1.0, 2.0], "kv_usage": [0.1, 0.5, None],
                                        "queue": [0, 3, 1], "running": [1, 2, 3]}] * 5, "simulator trace"),
    lambda: plots.peaks_vs_load(POINTS, "concurrency", "requests"),
    lambda: plots.tokens_per_chunk_histogram({1: 3, 2: 1, 3: 1}),
    lambda: plots.tokens_per_chunk_histogram({k: 1 for k in range(1, 200)}),
    lambda: plots.series_vs_load([("x", [(1.0, 2.0), (2.0, 3.0)])], "rate", "req/s", "TTFT p99 (ms)", "t",
                                 [("budget", 2.5)]),
])
def test_plots_render_pngs(make):
    width, height = _size(make())
    assert width >= 700 and height >= 350


@pytest.mark.parametrize("make", [
    lambda: plots.throughput_vs_load([LoadPoint(load=1)], "concurrency", "requests"),
    lambda: plots.latency_vs_load([LoadPoint(load=1)], "concurrency", "requests", [("ttft_ms", "TTFT")]),
    lambda: plots.frontier([("a", [])]),
    lambda: plots.ledger_bars([("levers", [])], None),
    lambda: plots.occupancy_over_time([{"label": "C=1", "t": []}], "trace"),
    lambda: plots.peaks_vs_load([LoadPoint(load=1)], "concurrency", "requests"),
    lambda: plots.tokens_per_chunk_histogram({}),
])
def test_nothing_to_draw_is_none(make):
    assert make() is None


def test_plots_are_deterministic():
    make = lambda: plots.throughput_vs_load(POINTS, "concurrency", "requests", knee_load=8)  # noqa: E731
    assert make() == make()
