"""The report's plots: data in, PNG bytes out (matplotlib, Agg backend, no pyplot global state).

The only module of kneecap that imports matplotlib. Every plot has a title saying what it shows
and units on both axes; a function returns None when it has nothing to draw, never an empty
frame. Times in s, latencies in ms, sizes in GiB (2^30 bytes) at the axis only.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Mapping, Sequence

from kneecap.units import GiB

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.2, 100  # 800x420 px per plot
PALETTE = ("#1f6feb", "#d1242f", "#1a7f37", "#8250df", "#bc4c00", "#0a7b83", "#6e7781")
PCT_STYLES = (("p50", "-", "o"), ("p90", "--", "s"), ("p99", ":", "^"))
SLO_COLOR = "#24292f"  # limits drawn in near-black so they never share a colour with a data line


@dataclass(frozen=True)
class LoadPoint:
    """One sweep level as the plots see it: load on x, everything else optional."""

    load: float
    output_tok_s: float | None = None
    latency_ms: dict | None = None  # metric -> {p50, p90, p99, ...} in ms
    suspect: bool = False
    kv_usage_max: float | None = None  # fraction 0..1
    waiting_max: float | None = None
    running_max: float | None = None


def _plain_text(plot):
    """Run a plot with mathtext off: model names and server strings may hold '$', shown as typed."""
    import functools

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return plot(*args, **kwargs)

    return wrapper


def _figure(nrows: int = 1, ncols: int = 1, height_in: float = HEIGHT_IN, width_in: float = WIDTH_IN):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # a renderer, so label placement can measure text
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _one_panel():
    fig, axes = _figure()
    return fig, axes[0][0]


_FIGURE_SINKS: list[list] = []  # the lists keep_figures() handed out, while their blocks run


@contextlib.contextmanager
def keep_figures():
    """Within this block every plot function also appends the matplotlib Figure it drew to the list this
    yields, in drawing order, as it was when it became PNG bytes: to read what a plot shows (its lines,
    labels, axes) rather than its pixels."""
    sink: list = []
    _FIGURE_SINKS.append(sink)
    try:
        yield sink
    finally:
        _FIGURE_SINKS.remove(sink)


def _png(fig) -> bytes:
    for sink in _FIGURE_SINKS:
        sink.append(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _legend(ax, **kwargs) -> None:
    """ax.legend(**kwargs) when the axes hold a labelled artist; with none, matplotlib would print a
    UserWarning ("No artists with labels found to put in legend") on the user's terminal."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _has_percentile(latency_ms: dict | None, key: str) -> bool:
    """True when latency_ms[key] holds a number for at least one of p50/p90/p99 (all failed: none)."""
    pcts = latency_ms.get(key) if latency_ms else None
    return isinstance(pcts, dict) and any(isinstance(pcts.get(name), (int, float)) for name, _, _ in PCT_STYLES)


def _load_axis(ax, loads: Sequence[float], load_name: str, load_unit: str) -> None:
    """x axis of a load sweep: log2 when loads span 16x or more; ticks at the loads actually run."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    positive = sorted({x for x in loads if x > 0})
    if len(positive) == len(set(loads)) and len(positive) >= 2 and positive[-1] / positive[0] >= 16:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(FixedLocator([]))
    if 0 < len(set(loads)) <= 16:
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(loads))))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(f"{load_name} ({load_unit})" if load_unit else load_name)
    ax.grid(True, alpha=0.3)


@_plain_text
def throughput_vs_load(
    points: Sequence[LoadPoint],
    load_name: str,
    load_unit: str,
    knee_load: float | None = None,
    preflight_limit: float | None = None,
    subject: str = "",
) -> bytes | None:
    """Output tok/s vs concurrency (or rate), knee marked, preflight limit as a vertical line."""
    pts = [p for p in points if p.output_tok_s is not None]
    if not pts:
        return None
    fig, ax = _one_panel()
    xs = [p.load for p in pts]
    ax.plot(xs, [p.output_tok_s for p in pts], marker="o", color=PALETTE[0], label="output throughput")
    bad = [p for p in pts if p.suspect]
    if bad:
        ax.scatter(
            [p.load for p in bad],
            [p.output_tok_s for p in bad],
            s=160,
            facecolors="none",
            edgecolors=PALETTE[4],
            linewidths=2,
            label="suspect level (client lag)",
            zorder=3,
        )
    if knee_load is not None:
        knee_y = next((p.output_tok_s for p in pts if p.load == knee_load), None)
        if knee_y is not None:
            ax.scatter(
                [knee_load],
                [knee_y],
                s=220,
                marker="*",
                color=PALETTE[1],
                zorder=4,
                label=f"knee ({load_name} {knee_load:g})",
            )
        else:
            ax.axvline(knee_load, color=PALETTE[1], linestyle="-.", label=f"knee ({load_name} {knee_load:g})")
    if preflight_limit is not None:
        ax.axvline(
            preflight_limit,
            color=PALETTE[2],
            linestyle="--",
            linewidth=1.5,
            label=f"preflight KV limit ({load_name} {preflight_limit:g})",
        )
    _load_axis(ax, xs + ([preflight_limit] if preflight_limit else []), load_name, load_unit)
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Output throughput vs {load_name}{' — ' + subject if subject else ''}")
    _legend(ax, loc="best", fontsize=8)
    return _png(fig)


@_plain_text
def latency_vs_load(
    points: Sequence[LoadPoint],
    load_name: str,
    load_unit: str,
    metrics: Sequence[tuple[str, str]],
    slo_ms: dict | None = None,
) -> bytes | None:
    """One panel per metric (key, label): p50/p90/p99 in ms vs load, SLO lines dashed red.

    slo_ms maps metric key -> {percentile name: limit ms}, e.g. {"ttft_ms": {"p99": 500}}.
    """
    shown = [(k, label) for k, label in metrics if any(_has_percentile(p.latency_ms, k) for p in points)]
    if not shown:
        return None
    fig, axes = _figure(1, len(shown), height_in=3.8, width_in=max(WIDTH_IN, 3.6 * len(shown)))
    slo_ms = slo_ms or {}
    for ax, (key, label) in zip(axes[0], shown):
        pts = [p for p in points if _has_percentile(p.latency_ms, key)]
        xs = [p.load for p in pts]
        for i, (pname, style, marker) in enumerate(PCT_STYLES):
            ys = [p.latency_ms[key].get(pname) for p in pts]
            pairs = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float))]
            if pairs:
                ax.plot(
                    [x for x, _ in pairs],
                    [y for _, y in pairs],
                    linestyle=style,
                    marker=marker,
                    color=PALETTE[i],
                    label=pname,
                )
        for pname, limit in sorted((slo_ms.get(key) or {}).items()):
            ax.axhline(limit, color=SLO_COLOR, linestyle="-.", linewidth=1.4, label=f"SLO {pname} ≤ {limit:g} ms")
        _load_axis(ax, xs, load_name, load_unit)
        ax.set_ylabel(f"{label} (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{label} percentiles vs {load_name}", fontsize=10)
        _legend(ax, loc="best", fontsize=7)
    return _png(fig)


@_plain_text
def frontier(series: Sequence[tuple[str, Sequence[tuple[float, float, str]]]]) -> bytes | None:
    """Throughput-latency frontier: output tok/s vs p99 TPOT (ms), one line per run or candidate.

    series: (name, [(p99_tpot_ms, output_tok_s, point label), ...]) in load order.
    """
    usable = [(name, pts) for name, pts in series if pts]
    if not usable:
        return None
    fig, ax = _one_panel()
    labels = []
    for i, (name, pts) in enumerate(usable):
        color = PALETTE[i % len(PALETTE)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=name)
        labels += [(x, y, label, color) for x, y, label in pts]
    ax.margins(x=0.1, y=0.08)
    ax.set_xlabel("p99 time per output token, TPOT (ms)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("Throughput–latency frontier: output tok/s vs p99 TPOT (up and left is better)")
    _legend(ax, loc="best", fontsize=8)
    _place_point_labels(fig, ax, labels)
    return _png(fig)


LABEL_OFFSETS = ((5, 5), (5, -11), (-5, 5), (-5, -11), (8, 14), (8, -20), (-8, 14), (-8, -20))  # points


def _place_point_labels(fig, ax, labels) -> None:
    """Annotate each point with the first offset whose text stays inside the axes and clear of the labels
    placed before it (so labels neither overlap nor get clipped at the frame)."""
    fig.canvas.draw()
    frame = ax.get_window_extent()
    placed = []
    for x, y, text, color in labels:
        chosen = None
        for dx, dy in LABEL_OFFSETS:
            note = ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                fontsize=7,
                color=color,
                ha="left" if dx > 0 else "right",
                annotation_clip=False,
            )
            box = note.get_window_extent(fig.canvas.get_renderer())
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in placed):
                chosen = box
                break
            note.remove()
        if chosen is None:  # no clear spot: keep the first offset rather than drop the label
            note = ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=LABEL_OFFSETS[0],
                fontsize=7,
                color=color,
                annotation_clip=False,
            )
            chosen = note.get_window_extent(fig.canvas.get_renderer())
        placed.append(chosen)


# bottom to top: the KV pool always sits on top, so bars of full and partial ledgers line up
LEDGER_PARTS = (
    ("weights_bytes", "weights"),
    ("overhead_bytes", "overhead"),
    ("fragmentation_bytes", "fragmentation headroom"),
    ("other_bytes", "weights + overhead + fragmentation"),
    ("kv_pool_bytes", "KV pool"),
)
LEDGER_COLORS = {
    "weights_bytes": "#6e7781",
    "overhead_bytes": "#bc4c00",
    "fragmentation_bytes": "#d4a72c",
    "kv_pool_bytes": "#1a7f37",
    "other_bytes": "#8c959f",
}


@_plain_text
def ledger_bars(groups: Sequence[tuple[str, Sequence[tuple[str, dict, str]]]], hbm_bytes: float | None) -> bytes | None:
    """The per-GPU HBM ledger as stacked bars (GiB), one panel per group (levers, TP degrees).

    groups: (panel title, [(bar label, {part_bytes: value}, annotation such as 'max seqs 120')]).
    """
    usable = [(title, bars) for title, bars in groups if bars]
    if not usable:
        return None
    fig, axes = _figure(1, len(usable), height_in=4.4, width_in=max(WIDTH_IN, 5.0 * len(usable)))
    labelled: set[str] = set()
    for ax, (title, bars) in zip(axes[0], usable):
        xs = list(range(len(bars)))
        bottoms = [0.0] * len(bars)
        for key, part_label in LEDGER_PARTS:
            heights = [float(parts.get(key) or 0) / GiB for _, parts, _ in bars]
            if not any(heights):
                continue
            label = part_label if part_label not in labelled else None
            labelled.add(part_label)
            ax.bar(xs, heights, bottom=bottoms, color=LEDGER_COLORS[key], label=label, width=0.6)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        for x, (_, _, note), top in zip(xs, bars, bottoms):
            if note:
                ax.annotate(note, (x, top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
        if hbm_bytes:
            ax.axhline(
                hbm_bytes / GiB,
                color=PALETTE[1],
                linestyle="--",
                linewidth=1,
                label="HBM per GPU" if "HBM" not in labelled else None,
            )
            labelled.add("HBM")
        top_gib = max(bottoms + [float(hbm_bytes or 0) / GiB])
        ax.set_ylim(0, top_gib * 1.12 if top_gib > 0 else 1.0)  # (0, 0) is a singular range: matplotlib warns
        pad = max(0.0, (3 - len(bars)) / 2)  # keep one or two bars bar-shaped, not a wall
        ax.set_xlim(-0.5 - pad, len(bars) - 0.5 + pad)
        ax.set_xticks(xs, [label for label, _, _ in bars], rotation=15, fontsize=8)
        ax.set_ylabel("memory per GPU (GiB)")
        ax.set_xlabel("configuration")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    if any(a.get_legend_handles_labels()[0] for a in fig.axes):  # all parts zero and no HBM line: no legend
        fig.legend(loc="outside lower center", ncols=6, fontsize=8)
    fig.suptitle("HBM ledger per GPU: where the memory goes (GiB)")
    return _png(fig)


@_plain_text
def occupancy_over_time(panels: Sequence[dict], source: str) -> bytes | None:
    """KV usage (% of blocks) and queue depth (requests) over time (s), one small panel per level.

    panels: [{'label', 't' (s), 'kv_usage' (fraction or None), 'queue' (requests or None),
    'running' (requests or None)}], e.g. from kneecap.report.levels.level_panels.
    """
    panels = [p for p in panels if p.get("t")]
    if not panels:
        return None
    ncols = min(len(panels), 2)
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = _figure(nrows, ncols, height_in=3.0 * nrows + 1.0, width_in=max(WIDTH_IN, 5.6 * ncols))
    queue_top = (
        max([v for p in panels for key in ("queue", "running") for v in (p.get(key) or []) if v is not None] + [1.0])
        * 1.05
    )
    handles: dict = {}
    for index, panel in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        kv = [(t, v * 100) for t, v in zip(panel["t"], panel["kv_usage"]) if v is not None]
        if kv:
            (handles["kv"],) = ax.plot(
                [t for t, _ in kv],
                [v for _, v in kv],
                color=PALETTE[2],
                label="KV cache usage (% of blocks, left axis)",
            )
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
        ax.set_title(panel["label"], fontsize=10)
        ax.tick_params(labelsize=8)
        ax2 = ax.twinx()
        ax2.tick_params(labelsize=8)
        for key, color, label in (
            ("queue", PALETTE[1], "queue depth: waiting requests (right axis)"),
            ("running", PALETTE[0], "running requests (right axis)"),
        ):
            pts = [(t, v) for t, v in zip(panel["t"], panel.get(key) or []) if v is not None]
            if pts:
                (handles[key],) = ax2.step(
                    [t for t, _ in pts],
                    [v for _, v in pts],
                    where="post",
                    color=color,
                    alpha=0.8 if key == "queue" else 0.5,
                    label=label,
                )
        ax2.set_ylim(0, queue_top)
        if index % ncols == 0:
            ax.set_ylabel("KV usage (%)", fontsize=9)
        if index % ncols == ncols - 1 or index == len(panels) - 1:
            ax2.set_ylabel("requests", fontsize=9)
        ax.set_xlabel(panel.get("time_label") or "time (s)", fontsize=9)
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    fig.suptitle(f"KV occupancy and queue depth over time, per level ({source})")
    if handles:  # an empty legend box otherwise
        fig.legend(handles=list(handles.values()), loc="outside lower center", ncols=3, fontsize=8)
    return _png(fig)


@_plain_text
def peaks_vs_load(points: Sequence[LoadPoint], load_name: str, load_unit: str) -> bytes | None:
    """Per level peak KV usage (%) and peak queue depth (requests), from server metrics."""
    pts = [p for p in points if p.kv_usage_max is not None or p.waiting_max is not None]
    if not any(v for p in pts for v in (p.kv_usage_max, p.waiting_max, p.running_max)):
        return None  # nothing but zeros: the server's metrics saw no load, a chart would only mislead
    fig, ax = _one_panel()
    handles = []
    kv = [(p.load, p.kv_usage_max * 100) for p in pts if p.kv_usage_max is not None]
    if kv:
        handles += ax.plot(
            [x for x, _ in kv], [y for _, y in kv], marker="o", color=PALETTE[2], label="peak KV usage (%)"
        )
    ax.set_ylabel("peak KV cache usage (% of blocks)")
    ax.set_ylim(0, 105)
    _load_axis(ax, [p.load for p in pts], load_name, load_unit)
    ax2 = ax.twinx()
    for i, (attr, label) in enumerate((("waiting_max", "peak queue depth"), ("running_max", "peak running"))):
        ys = [(p.load, getattr(p, attr)) for p in pts if getattr(p, attr) is not None]
        if ys:
            handles += ax2.plot(
                [x for x, _ in ys],
                [y for _, y in ys],
                marker="s",
                linestyle="--",
                color=PALETTE[1 if i == 0 else 0],
                label=f"{label} (requests)",
            )
    ax2.set_ylabel("requests")
    ax2.set_ylim(bottom=0)
    ax.set_title(f"Peak KV occupancy and queue depth per level (server metrics) vs {load_name}")
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    return _png(fig)


@_plain_text
def tokens_per_chunk_histogram(chunk_token_counts: Mapping[int, int]) -> bytes | None:
    """How many tokens each streamed chunk carried: {tokens in a chunk: number of chunks}."""
    counts = sorted((int(k), int(n)) for k, n in chunk_token_counts.items() if k > 0 and n > 0)
    if not counts:
        return None
    fig, ax = _one_panel()
    total = sum(n for _, n in counts)
    top = counts[-1][0]
    if top <= 64:
        ax.bar([k for k, _ in counts], [n for _, n in counts], width=0.7, color=PALETTE[0])
        from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

        if top <= 16:  # a tick at every whole size from 1 to the largest seen (one token: one tick, "1")
            ax.xaxis.set_major_locator(FixedLocator(list(range(1, top + 1))))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}"))
        ax.set_xlim(0.5, max(top, 3) + 0.5)
    else:  # long tails: 50 bins over the sizes seen, weighted by their counts
        ax.hist([k for k, _ in counts], weights=[n for _, n in counts], bins=50, color=PALETTE[0], edgecolor="white")
    ax.set_xlabel("tokens carried by one streamed chunk (tokens)")
    ax.set_ylabel("chunks (count)")
    ax.grid(True, axis="y", alpha=0.3)
    single = dict(counts).get(1, 0) / total
    ax.set_title(f"Tokens per chunk: {total:,} chunks, {single * 100:.0f} % carried one token")
    return _png(fig)


@_plain_text
def series_vs_load(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    load_name: str,
    load_unit: str,
    y_label: str,
    title: str,
    limits: Sequence[tuple[str, float]] = (),
    log_y: bool = False,
) -> bytes | None:
    """Several runs or candidates on one axis: series = (name, [(load, y), ...]); limits = horizontal lines
    (budgets); log_y: a log10 y axis (latencies spanning orders of magnitude, with the budget in view)."""
    usable = [(name, pts) for name, pts in series if pts]
    if not usable:
        return None
    fig, ax = _one_panel()
    loads: list[float] = []
    for i, (name, pts) in enumerate(usable):
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=PALETTE[i % len(PALETTE)], label=name)
        loads += [x for x, _ in pts]
    for label, value in limits:
        ax.axhline(value, color=SLO_COLOR, linestyle="-.", linewidth=1.4, label=label)
    _load_axis(ax, loads, load_name, load_unit)
    ax.set_ylabel(y_label)
    if log_y:
        ax.set_yscale("log")
        ax.grid(True, which="both", axis="y", alpha=0.2)
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(title)
    _legend(ax, loc="best", fontsize=8)
    return _png(fig)


@_plain_text
def recommend_pareto(
    points: Sequence[tuple[float, float, str]],
    frontier_points: Sequence[tuple[float, float, str]],
    xlabel: str,
    ylabel: str,
    title: str,
    *,
    log_x: bool = False,
) -> bytes | None:
    """kneecap recommend: every evaluated candidate as a grey dot, the Pareto frontier as a labelled line.

    points / frontier_points: (x, y, label); only the frontier's points are labelled (hundreds of labels
    would hide the plot).
    """
    pts = [p for p in points if p[0] is not None and p[1] is not None]
    if not pts:
        return None
    fig, ax = _one_panel()
    ax.scatter(
        [p[0] for p in pts], [p[1] for p in pts], s=12, color="#8c959f", label=f"evaluated candidates ({len(pts)})"
    )
    fr = sorted(p for p in frontier_points if p[0] is not None and p[1] is not None)
    if fr:
        ax.plot([p[0] for p in fr], [p[1] for p in fr], marker="o", color=PALETTE[0], label="Pareto frontier")
    if log_x and min(p[0] for p in pts) > 0 and max(p[0] for p in pts) > 10 * min(p[0] for p in pts):
        ax.set_xscale("log")
    ax.margins(x=0.1, y=0.08)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    _legend(ax, loc="best", fontsize=8)
    _place_point_labels(fig, ax, [(x, y, label, PALETTE[0]) for x, y, label in fr])
    return _png(fig)


@dataclass(frozen=True)
class SearchProbe:
    """One level of a highest-load-under-SLO search: its load, whether it met every SLO term, and the value
    of the SLO statistic drawn (None when the level had no data for it)."""

    load: float
    met: bool
    value: float | None


@_plain_text
def find_max_search(
    probes: Sequence[SearchProbe],
    stat_key: str,
    limit: float,
    load_name: str,
    load_unit: str,
    answer: float | None,
    failed_at: float | None,
) -> bytes | None:
    """The search for the highest load meeting the SLO: each probe's SLO statistic vs its load (green met,
    red failed, numbered in the order run), the budget as a horizontal line, the answer and the next step
    up that failed as vertical lines."""
    drawn = [p for p in probes if isinstance(p.value, (int, float))]
    if not drawn:
        return None
    fig, ax = _one_panel()
    for met, color, label in ((True, PALETTE[2], "met the SLO"), (False, PALETTE[1], "failed the SLO")):
        pts = [p for p in drawn if p.met is met]
        if pts:
            ax.scatter(
                [p.load for p in pts],
                [p.value for p in pts],
                color=color,
                marker="o" if met else "x",
                s=36,
                zorder=3,
                label=label,
            )
    for order, p in enumerate(probes, start=1):
        if isinstance(p.value, (int, float)):
            ax.annotate(str(order), (p.load, p.value), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(limit, color=SLO_COLOR, linestyle="-.", linewidth=1.4, label=f"SLO {stat_key} ≤ {limit:g}")
    if answer is not None:
        ax.axvline(answer, color=PALETTE[2], linestyle="--", linewidth=1.2, label=f"answer: {answer:g}")
    if failed_at is not None:
        ax.axvline(
            failed_at, color=PALETTE[1], linestyle=":", linewidth=1.2, label=f"next step up failed: {failed_at:g}"
        )
    _load_axis(ax, [p.load for p in probes], load_name, load_unit)
    ticks: list[float] = []  # bisection probes crowd together: a tick only where its label has room
    for x in sorted({p.load for p in probes if p.load > 0}):
        if not ticks or x / ticks[-1] >= 1.25 or x in (answer, failed_at) and x / ticks[-1] >= 1.12:
            ticks.append(x)
    if ticks:
        from matplotlib.ticker import FixedLocator

        ax.xaxis.set_major_locator(FixedLocator(ticks))
    unit = "ms" if stat_key.endswith("_ms") else "fraction"
    ax.set_ylabel(f"{stat_key} ({unit})")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Highest {load_name} under the SLO: {len(probes)} probes", fontsize=10)
    _legend(ax, loc="best", fontsize=7)
    return _png(fig)
