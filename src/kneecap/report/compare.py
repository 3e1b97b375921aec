"""Compare two sweeps (bench or simulate, in any pairing) level by level: deltas and which is better.

Levels are matched by their load (same concurrency, or same rate). Higher is better for
throughput, lower for latency and failures; differences under TIE_FRACTION of A are a tie.
What the two runs were (model, GPU, engine, lengths, dataset, load dimension, seed) is read from
each summary (`run_facts`) and every difference is stated on the page (`differences`): a level-by-level
delta between different workloads is not a comparison of servers. `compare_levels` is pure data;
`compare_document` builds the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kneecap.errors import KneecapError
from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, Cell, Document, Heading, KeyValues, Paragraph, Table, drawn
from kneecap.report.glossary import COMPARE_TERMS, glossary
from kneecap.report.levels import frontier_points, levels_of, load_axis, load_value
from kneecap.report.load import SWEEP_KINDS, Results
from kneecap.report.provenance import command_text, source_banner

if TYPE_CHECKING:
    from kneecap.metrics.summary_model import LevelSummary, WorkloadFields

TIE_FRACTION = 0.01  # |B − A| below 1 % of |A| counts as a tie

# (key, label, unit, higher_is_better, path into the level dict)
METRICS: tuple[tuple[str, str, str, bool, tuple[str, ...]], ...] = (
    ("output_tok_s", "output throughput", "tok/s", True, ("output_tok_s",)),
    ("total_tok_s", "total throughput", "tok/s", True, ("total_tok_s",)),
    ("request_s", "request throughput", "req/s", True, ("request_s",)),
    ("ttft_p50_ms", "TTFT p50", "ms", False, ("ttft_ms", "p50")),
    ("ttft_p99_ms", "TTFT p99", "ms", False, ("ttft_ms", "p99")),
    ("itl_p99_ms", "ITL p99", "ms", False, ("itl_ms", "p99")),
    ("tpot_p99_ms", "TPOT p99", "ms", False, ("tpot_ms", "p99")),
    ("e2e_p99_ms", "E2E p99", "ms", False, ("e2e_ms", "p99")),
    ("failed", "failed requests", "requests", False, ("failed",)),
)


@dataclass(frozen=True)
class MetricDelta:
    """One metric at one load: A, B, B − A, (B − A)/A, and the better side ('A', 'B', 'tie' or None)."""

    metric: str
    label: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    relative: float | None
    better: str | None


@dataclass(frozen=True)
class LevelComparison:
    load: float
    load_text: str
    deltas: tuple[MetricDelta, ...]


def _flag(command: list | None, flag: str) -> str | None:
    """The value given to `flag` on a recorded command line (`--flag V` or `--flag=V`), else None."""
    args = [str(a) for a in command or ()]
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _lengths(work: WorkloadFields, command: list | None) -> str | None:
    isl = work.isl_dist or work.isl or _flag(command, "--isl")
    osl = work.osl_dist or work.osl or _flag(command, "--osl")
    text = f"ISL {isl if isl is not None else 'from the data'} / OSL {osl if osl is not None else 'from the data'}"
    if work.shared_prefix_tokens:
        text += f", shared prefix {work.shared_prefix_tokens} x {work.num_prefix_groups or 1}"
    if work.turns:
        text += f", {work.turns} turns"
    return text


def run_facts(summary: dict) -> dict[str, str | None]:
    """What a sweep was, fact by fact, as comparable text (None: not recorded): model, GPU, engine, lengths,
    dataset, load dimension, seed."""
    from kneecap.metrics.summary_model import DeploymentFields, EngineFields, ServerFields, SweepSummary, WorkloadFields

    doc = SweepSummary.read(summary)
    dep, server = doc.deployment or DeploymentFields(), doc.server or ServerFields()
    manifest = doc.manifest if isinstance(doc.manifest, dict) else {}
    command = manifest.get("command")
    gpu = f"{dep.num_gpus}x {dep.gpu} (TP {dep.tp}, PP {dep.pp})" if dep.gpu else _flag(command, "--gpu")
    engine_text = (
        f"kneecap's simulated engine ({(doc.engine or EngineFields()).defaults or 'vllm'} defaults)"
        if doc.kind == "simulate"
        else " ".join(str(x) for x in (server.engine, server.version) if x) or None
    )
    dataset = _flag(command, "--replay") or _flag(command, "--dataset") or "random (synthetic prompts)"
    levels = levels_of(summary)
    seed = doc.sweep.seed if doc.sweep is not None and "seed" in doc.sweep.model_fields_set else doc.seed
    return {
        "model": dep.model or server.model_id or manifest.get("model") or _flag(command, "--model"),
        "GPU": gpu,
        "engine": engine_text,
        "lengths": _lengths(doc.workload or WorkloadFields(), command),
        "dataset": dataset,
        "load dimension": load_axis(levels)[0] if levels else None,
        "seed": None if seed is None else str(seed),
    }


def differences(a_summary: dict, b_summary: dict) -> list[tuple[str, str, str]]:
    """(fact, A's, B's) for every fact both runs recorded and on which they differ."""
    fa, fb = run_facts(a_summary), run_facts(b_summary)
    return [(k, fa[k], fb[k]) for k in fa if fa[k] is not None and fb[k] is not None and fa[k] != fb[k]]


def _get(level: LevelSummary, path: tuple[str, ...]) -> float | None:
    """A number of a typed level by its summary keys, ('ttft_ms', 'p99'): None where the level has none."""
    value: object = level
    for key in path:
        value = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
    return float(value) if fmt.is_number(value) else None


def metric_delta(
    metric: str, label: str, unit: str, higher_is_better: bool, a: float | None, b: float | None
) -> MetricDelta:
    if a is None or b is None:
        return MetricDelta(metric, label, unit, a, b, None, None, None)
    delta = b - a
    relative = delta / abs(a) if a else None
    scale = max(abs(a), abs(b))
    if scale == 0 or abs(delta) <= TIE_FRACTION * scale:
        better = "tie"
    else:
        better = "B" if (delta > 0) == higher_is_better else "A"
    return MetricDelta(metric, label, unit, a, b, delta, relative, better)


def compare_levels(
    a_summary: dict, b_summary: dict, force: bool = False
) -> tuple[list[LevelComparison], list[str], list[str]]:
    """(matched levels in load order, loads only in A, loads only in B). Sweeps of different load dimensions
    (concurrency vs rate) are refused; with `force` their levels are all unmatched."""
    a_levels, b_levels = levels_of(a_summary), levels_of(b_summary)
    a_axis, b_axis = load_axis(a_levels)[0], load_axis(b_levels)[0]
    if a_levels and b_levels and a_axis != b_axis:
        if not force:
            raise KneecapError(
                f"cannot compare a {a_axis} sweep with a {b_axis} sweep level by level",
                "compare two concurrency sweeps or two rate sweeps, or pass --force to see both "
                "runs' plots side by side",
            )
        return [], [fmt.load_text(lv) for lv in a_levels], [fmt.load_text(lv) for lv in b_levels]
    a_by = {load_value(lv, i): lv for i, lv in enumerate(a_levels)}
    b_by = {load_value(lv, i): lv for i, lv in enumerate(b_levels)}
    matched = []
    for load in sorted(set(a_by) & set(b_by)):
        la, lb = a_by[load], b_by[load]
        deltas = tuple(
            metric_delta(key, label, unit, hib, _get(la, path), _get(lb, path))
            for key, label, unit, hib, path in METRICS
        )
        matched.append(LevelComparison(load, fmt.load_text(la), deltas))
    only_a = [fmt.load_text(a_by[x]) for x in sorted(set(a_by) - set(b_by))]
    only_b = [fmt.load_text(b_by[x]) for x in sorted(set(b_by) - set(a_by))]
    return matched, only_a, only_b


def _value(value: float | None, unit: str) -> str:
    if unit == "ms":
        return fmt.ms(value)
    if unit == "requests":
        return fmt.count(value)
    return fmt.rate(value)


def _better_cell(better: str | None) -> Cell:
    if better is None:
        return Cell(fmt.MISSING, "muted")
    if better == "tie":
        return Cell("tie", "muted")
    return Cell(better, "better")  # the winning side's letter, in green


def metric_table(matched: list[LevelComparison], index: int) -> Table:
    first = matched[0].deltas[index]
    unit = first.unit
    rows = []
    for level in matched:
        d = level.deltas[index]
        sign = "+" if d.delta is not None and d.delta > 0 else ""
        rows.append(
            (
                level.load_text,
                _value(d.a, unit),
                _value(d.b, unit),
                sign + _value(d.delta, unit) if d.delta is not None else fmt.MISSING,
                fmt.pct(d.relative, signed=True),
                _better_cell(d.better),
            )
        )
    direction = "higher is better" if METRICS[index][3] else "lower is better"
    return Table(
        ("load", f"A ({unit})", f"B ({unit})", f"Δ B − A ({unit})", "Δ (%)", "better"),
        tuple(rows),
        caption=f"{first.label} ({direction})",
    )


def _scoreboard(matched: list[LevelComparison]) -> Table:
    rows = []
    for i, (key, label, unit, hib, _) in enumerate(METRICS):
        verdicts = [lv.deltas[i].better for lv in matched]
        a, b, tie = verdicts.count("A"), verdicts.count("B"), verdicts.count("tie")
        overall = "B" if b > a else "A" if a > b else "even"
        rows.append(
            (
                f"{label} ({unit})",
                "higher" if hib else "lower",
                str(a),
                str(b),
                str(tie),
                Cell(overall, "muted" if overall == "even" else "better"),
            )
        )
    return Table(
        ("metric", "better when", "A better (levels)", "B better (levels)", "ties (levels)", "overall"),
        tuple(rows),
        caption=f"Levels where each run wins (a tie is within {fmt.pct(TIE_FRACTION, 0)})",
    )


def _series(results: Results) -> tuple[list[tuple[float, float]], list[tuple[float, float, str]]]:
    levels = levels_of(results.summary)
    thr = [(load_value(lv, i), float(lv.output_tok_s)) for i, lv in enumerate(levels) if fmt.is_number(lv.output_tok_s)]
    return thr, frontier_points(levels)


def differences_table(diff: list[tuple[str, str, str]]) -> Table:
    return Table(
        ("what", "A", "B"),
        tuple(diff),
        caption="What differs between the two runs: a level's delta "
        "then measures these differences as well as the servers",
    )


def compare_document(a: Results, b: Results, force: bool = False) -> Document:
    for side, res in (("A", a), ("B", b)):
        if res.kind not in SWEEP_KINDS:
            raise KneecapError(
                f"{side} ({res.path}) is a {res.kind} result; comparison is level by level",
                "compare two bench or simulate folders (render a plan or run on its own)",
            )
    matched, only_a, only_b = compare_levels(a.summary, b.summary, force)
    diff = differences(a.summary, b.summary)
    title = f"Comparison — A: {a.name} vs B: {b.name}"
    blocks: list[Block] = [Heading(title, 1)]
    for side, res in (("A", a), ("B", b)):
        banner = source_banner(res.kind, res.summary)
        blocks.append(type(banner)(f"{side} ({res.name}): {banner.title}", banner.text, banner.tone))
    commands = [
        (f"{side} command", command_text((r.summary.get("manifest") or {}).get("command")) or "not recorded")
        for side, r in (("A", a), ("B", b))
        if isinstance(r.summary, dict)
    ]
    blocks.append(
        KeyValues(
            tuple([(f"{s} folder", str(r.path)) for s, r in (("A", a), ("B", b))] + commands),
            caption="What is compared",
        )
    )
    if a.kind != b.kind:
        blocks.append(
            Paragraph(f"A is {a.kind} and B is {b.kind}: one side was not measured on a real server.", "warning")
        )
    if diff:
        blocks.append(Paragraph("The runs differ in " + ", ".join(k for k, _, _ in diff) + ".", "warning"))
        blocks.append(differences_table(diff))
    else:
        blocks.append(
            Paragraph(
                "Same "
                + ", ".join(k for k, v in run_facts(a.summary).items() if v is not None)
                + " in both runs (as each summary records them).",
                "muted",
            )
        )
    if only_a or only_b:
        blocks.append(
            Paragraph(
                f"Levels only in A: {', '.join(only_a) or 'none'}; only in B: "
                f"{', '.join(only_b) or 'none'} (not compared).",
                "muted",
            )
        )
    if not matched:
        blocks.append(Paragraph("No load level appears in both runs: nothing to compare level by level.", "warning"))
    load_name, load_unit = load_axis(levels_of(a.summary) or levels_of(b.summary))
    (thr_a, front_a), (thr_b, front_b) = _series(a), _series(b)
    figs = drawn(
        "throughput",
        f"Output throughput vs {load_name}: A and B",
        plots.series_vs_load(
            [(f"A: {a.name}", thr_a), (f"B: {b.name}", thr_b)],
            load_name,
            load_unit,
            "output throughput (tok/s)",
            f"Output throughput vs {load_name}, run by run",
        ),
    )
    figs += drawn(
        "frontier",
        "Throughput–latency frontier: A and B",
        plots.frontier([(f"A: {a.name}", front_a), (f"B: {b.name}", front_b)]),
    )
    if figs:
        blocks += [Heading("Plots")] + figs
    if matched:
        blocks += [Heading("Scoreboard"), _scoreboard(matched), Heading("Level by level")]
        blocks += [metric_table(matched, i) for i in range(len(METRICS))]
    blocks += [Heading("Glossary"), glossary(COMPARE_TERMS)]
    return Document(title, tuple(blocks))
