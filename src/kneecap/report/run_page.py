"""The worksheet of a load-plan run (`kneecap run`): candidates and why each was accepted or rejected,
the capacity region per candidate/class/state, the cells with their verdicts (offered load apart
from completed throughput), plots, handoff, glossary; the worksheet parts (ledgers, workloads,
budgets, cost) come from run_worksheet. Pure: Results in, Document out.

The run's summary.json is read typed (kneecap.metrics.run_model.RunDocument): cells are {candidate, class,
state, load: {dimension: x}, repetition, verdict, metrics, limit, breaches} (kneecap.loadplan), a cell's
metrics a LevelSummary; anything missing renders as a dash.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, Cell, Code, Document, Figure, Heading, KeyValues, Paragraph, Table, drawn
from kneecap.report.glossary import PLAN_TERMS, RUN_TERMS, SWEEP_TERMS, glossary
from kneecap.report.levels import level_panels
from kneecap.report.load import Results
from kneecap.report.provenance import manifest_blocks, missing_block, source_banner
from kneecap.report.run_worksheet import candidate_plans, classes_table, cost_table, ledger_section, settings_block

if TYPE_CHECKING:
    from kneecap.metrics.run_model import CandidateResult, Capacity, CapacityInfo, RunCell, RunDocument
    from kneecap.metrics.summary_model import Distribution

UNITS = {"concurrency": "concurrent requests", "rate": "req/s"}


def _load(cell: RunCell) -> tuple[str, float | None]:
    if cell.load is not None and len(cell.load) == 1:
        ((dim, value),) = cell.load.items()
        return str(dim), float(value) if fmt.is_number(value) else None
    for dim, value in (("concurrency", cell.concurrency), ("rate", cell.rate)):  # older documents
        if fmt.is_number(value):
            return dim, float(value)
    return "load", None


def _load_text(cell: RunCell) -> str:
    dim, value = _load(cell)
    if value is None:
        return fmt.MISSING
    return f"C={value:g}" if dim == "concurrency" else f"{value:g} {UNITS.get(dim, '')}".strip()


def _pct(dist: Distribution | None, pct: str) -> float | None:
    """A percentile ('p50', 'p99', ...) of a distribution that may be absent."""
    value = getattr(dist, pct) if dist is not None else None
    return float(value) if fmt.is_number(value) else None


def _metric(cell: RunCell, key: str, pct: str | None = None) -> float | None:
    """A cell's output rate (pct None) or a percentile of one of its latency distributions ('ttft_ms', ...)."""
    if cell.metrics is None:
        return None
    if pct is not None:
        return _pct(cell.metrics.distribution(key), pct)
    value = getattr(cell.metrics, key)
    return float(value) if fmt.is_number(value) else None


def _samples(dist: Distribution | None) -> int | None:
    """A distribution's sample count, None where the document did not say (older runs)."""
    return dist.n if dist is not None and "n" in dist.model_fields_set else None


def _text(value: object) -> str:
    return str(value) if value is not None else fmt.MISSING


def _verdict_cell(verdict: object) -> Cell:
    text = str(verdict) if verdict is not None else fmt.MISSING
    tone = {
        "pass": "better",
        "accepted": "better",
        "slo_breach": "worse",
        "limit": "worse",
        "rejected": "worse",
        "not_run": "muted",
    }.get(text, "plain")
    return Cell(text, tone)


def candidates_table(candidates: list[CandidateResult], preferred: object = None) -> Table:
    rows = []
    for c in candidates:
        name = c.name or "?"
        rows.append(
            (
                name + (" (preferred)" if preferred == name else ""),
                c.target or fmt.MISSING,
                _verdict_cell(c.verdict),
                c.gate or fmt.MISSING,
                fmt.rate(c.peak_output_tok_s),
                c.reason or fmt.MISSING,
            )
        )
    return Table(
        ("candidate", "target", "verdict", "gate failed", "peak output (tok/s)", "reason"),
        tuple(rows),
        caption="Behaviour gate first, then SLO gate; cost is compared only between accepted candidates",
    )


def _failing_loads(info: CapacityInfo) -> str:
    """'256: rep0 (ttft_p99_ms 828.7 > 500), rep1 (...)' per failing load: the repetition of each failure
    (rep0 is the first, as cells are named); a summary without `failures` lists the reasons alone."""
    if info.failures is None:
        return "; ".join(f"{load}: {', '.join(map(str, why))}" for load, why in info.failed.items())
    parts = []
    for load, fails in info.failures.items():
        each = [f"rep{f.repetition} ({'; '.join(map(str, f.reasons)) or f.verdict})" for f in fails]
        parts.append(f"{load}: {', '.join(each)}")
    return "; ".join(parts)


def capacity_table(capacity: Capacity) -> Table | None:
    from kneecap.metrics.run_model import AtCapacity

    rows = []
    for cand, by_class in capacity.items():
        for cls, by_state in by_class.items():
            for state, info in by_state.items():
                dim = info.dimension or "load"
                unit = UNITS.get(dim, "")
                at = info.at_capacity or AtCapacity()
                cap = info.capacity
                rows.append(
                    (
                        str(cand),
                        str(cls),
                        str(state),
                        f"{dim} ({unit})" if unit else dim,
                        Cell(_capacity(cap, info.offered_at_capacity), "better" if fmt.is_number(cap) else "worse"),
                        ", ".join(f"{x:g}" if fmt.is_number(x) else str(x) for x in info.region) or "empty",
                        fmt.ms(_pct(at.ttft_ms, "p99")),
                        fmt.ms(_pct(at.itl_ms, "p99")),
                        fmt.ms(_pct(at.e2e_ms, "p99")),
                        fmt.rate(at.output_tok_s),
                        _failing_loads(info) or fmt.MISSING,
                    )
                )
    if not rows:
        return None
    return Table(
        (
            "candidate",
            "class",
            "state",
            "dimension",
            "capacity",
            "region (loads passing every repetition)",
            "TTFT p99 at capacity (ms)",
            "ITL p99 (ms)",
            "E2E p99 (ms)",
            "output at capacity (tok/s)",
            "failing loads and why",
        ),
        tuple(rows),
        caption="Capacity = the highest load such that it and every lower step passed every repetition; "
        "for a rate, the lowest rate its repetitions were offered at beside it",
    )


def _capacity(cap, offered) -> str:
    """The capacity step; on the rate dimension the lowest rate its repetitions were offered at beside it."""
    if not fmt.is_number(cap):
        return "none"
    return f"{cap:g}" + (f" (offered {offered:.3g})" if fmt.is_number(offered) else "")


def _little_text(cell: RunCell) -> str:
    little = cell.little
    if little is None:
        return fmt.MISSING
    if not (little.applied if little.applied is not None else little.stable):  # older documents: `stable` alone
        return "not applied (interval not stable)"
    consistent = little.consistent
    err = little.relative_error
    text = "consistent" if consistent else "inconsistent" if consistent is False else "checked"
    return f"{text} ({fmt.pct(err)} off)" if fmt.is_number(err) else text


def cells_tables(cells: list[RunCell]) -> list[Table]:
    """Every cell in two tables that fit a page: its verdict and why, then what was measured."""
    from kneecap.metrics.run_model import OfferedLoad
    from kneecap.metrics.summary_model import LevelSummary

    verdicts, measured, tones = [], [], []
    for c in cells:
        m = c.metrics or LevelSummary()  # a cell that did not run: every measurement a dash
        offered = c.offered or OfferedLoad()
        key = " / ".join(_text(v) for v in (c.candidate, c.class_name, c.state))
        where = f"{key} / {_load_text(c)} / rep{c.repetition}"
        verdicts.append(
            (
                _text(c.candidate),
                _text(c.class_name),
                _text(c.state),
                _load_text(c),
                fmt.count(c.repetition),
                _verdict_cell(c.verdict),
                fmt.count(m.requests),
                fmt.count(m.completed),
                fmt.count(m.failed),
                _little_text(c),
                "; ".join(c.reasons()) or fmt.MISSING,
            )
        )
        measured.append(
            (
                where,
                fmt.rate(offered.offered_request_s),
                fmt.rate(offered.completed_request_s),
                fmt.count(offered.dropped),
                fmt.rate(m.output_tok_s),
                fmt.ms(_metric(c, "ttft_ms", "p50")),
                fmt.ms(_metric(c, "ttft_ms", "p95")),
                fmt.ms(_metric(c, "ttft_ms", "p99")),
                fmt.ms(_metric(c, "itl_ms", "p99")),
                fmt.ms(_metric(c, "e2e_ms", "p99")),
                fmt.count(_samples(m.ttft_ms)),
            )
        )
        tones.append("warning" if m.suspect else "plain")
    return [
        Table(
            (
                "candidate",
                "class",
                "state",
                "load",
                "repetition",
                "verdict",
                "requests",
                "completed",
                "failed",
                "Little's law",
                "limit crossed / budgets missed",
            ),
            tuple(verdicts),
            row_tones=tuple(tones),
            caption="Every cell run, per repetition (rep0 is the first): its verdict and why "
            "(suspect cells highlighted)",
        ),
        Table(
            (
                "cell",
                "offered (req/s)",
                "completed (req/s)",
                "dropped (requests)",
                "output (tok/s)",
                "TTFT p50 (ms)",
                "TTFT p95 (ms)",
                "TTFT p99 (ms)",
                "ITL p99 (ms)",
                "E2E p99 (ms)",
                "n (samples)",
            ),
            tuple(measured),
            row_tones=tuple(tones),
            caption="What each cell measured; offered load is shown apart from completed throughput",
        ),
    ]


def _group_series(cells: list[RunCell], y) -> tuple[list[tuple[str, list[tuple[float, float]]]], str]:
    """Per candidate/class/state: worst value over repetitions at each load (y(cell) -> float|None)."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    dims = set()
    for c in cells:
        dim, load = _load(c)
        value = y(c)
        if load is None or value is None:
            continue
        dims.add(dim)
        grouped[(c.candidate, c.class_name, c.state)][load].append(value)
    series = [
        (" / ".join(str(k) for k in key if k is not None), sorted((x, max(v)) for x, v in by_load.items()))
        for key, by_load in grouped.items()
    ]
    return series, (dims.pop() if len(dims) == 1 else "load")


def run_figures(results: Results, doc: RunDocument) -> list[Figure]:
    from kneecap.metrics.run_model import Worksheet

    out: list[Figure] = []
    cells = doc.cells
    ttft, dim = _group_series(cells, lambda c: _metric(c, "ttft_ms", "p99"))
    budgets = (doc.worksheet.budgets if isinstance(doc.worksheet, Worksheet) else None) or {}
    limits = [
        (f"{cls} budget: p99 TTFT ≤ {b.ttft_p99_ms:g} ms", float(b.ttft_p99_ms))
        for cls, b in budgets.items()
        if fmt.is_number(b.ttft_p99_ms)
    ]
    values = [y for _, pts in ttft for _, y in pts if y and y > 0] + [v for _, v in limits]
    out += drawn(
        "ttft_p99",
        "p99 TTFT per candidate",
        plots.series_vs_load(
            ttft,
            dim,
            UNITS.get(dim, ""),
            "TTFT p99 (ms)",
            f"p99 TTFT vs {dim} per candidate / class / state (worst repetition)",
            limits=limits,
            log_y=bool(values) and max(values) / min(values) >= 10,
        ),
    )
    thr, _ = _group_series(cells, lambda c: _metric(c, "output_tok_s"))
    out += drawn(
        "throughput",
        "Output throughput per candidate",
        plots.series_vs_load(
            thr,
            dim,
            UNITS.get(dim, ""),
            "output throughput (tok/s)",
            f"Output throughput vs {dim} per candidate / class / state",
        ),
    )
    # one point per load: the worst repetition (highest p99 TPOT, lowest throughput), in load order
    worst: dict = defaultdict(dict)
    for c in cells:
        tpot, tok_s = _metric(c, "tpot_ms", "p99"), _metric(c, "output_tok_s")
        _, load = _load(c)
        if tpot is None or tok_s is None or load is None:
            continue
        series = f"{c.candidate} / {c.class_name}" + (f" / {c.state}" if c.state else "")
        old = worst[series].get(load)
        worst[series][load] = (
            (max(tpot, old[0]), min(tok_s, old[1]), _load_text(c)) if old else (tpot, tok_s, _load_text(c))
        )
    out += drawn(
        "frontier",
        "Throughput–latency frontier per candidate",
        plots.frontier([(name, [by_load[x] for x in sorted(by_load)]) for name, by_load in worst.items()]),
        "Each point is one load step, at its worst repetition.",
    )
    panels = level_panels(results.trace, results.summary, []) if results.trace else []
    if panels:
        out += drawn(
            "occupancy", "KV occupancy and queue depth over time", plots.occupancy_over_time(panels, "simulator trace")
        )
    out += drawn(
        "chunks",
        "Tokens per streamed chunk",
        plots.tokens_per_chunk_histogram(results.records.chunk_token_counts if results.records else {}),
    )
    return out


def run_document(results: Results) -> Document:
    from kneecap.metrics.run_model import RunDocument, Worksheet

    summary = results.summary
    doc = RunDocument.read(summary, str(results.path))
    title = f"Load-plan worksheet — {doc.plan_name or doc.name or results.name}"
    blocks: list[Block] = [Heading(title, 1)]
    if doc.description is not None:
        blocks.append(Paragraph(doc.description))
    blocks.append(source_banner("run", summary))
    blocks += manifest_blocks(summary)
    blocks += missing_block(results.missing)
    cells, candidates = doc.cells, doc.candidates
    if candidates:
        blocks += [Heading("Candidates"), candidates_table(candidates, doc.preferred)]
        costs = cost_table(candidates)
        if costs:
            blocks.append(costs)
    cap_table = capacity_table(doc.capacity) if doc.capacity is not None else None
    blocks.append(Heading("Capacity region"))
    blocks.append(cap_table or Paragraph("No capacity region in this summary.", "warning"))
    handoff = doc.handoff
    blocks.append(
        KeyValues(
            (("handoff package", f"{handoff}/ (inside this results folder)" if handoff else "none: no limit failed"),),
            caption="Specialist handoff",
        )
    )
    plans = candidate_plans(doc, results.plan)
    if plans:
        blocks += [Heading("KV ledger")] + ledger_section(plans)
    figs = run_figures(results, doc)
    if figs:
        blocks += [Heading("Plots")] + figs
    if cells:
        blocks += [Heading("Cells"), *cells_tables(cells)]
    else:
        blocks.append(Paragraph("This summary holds no cells: nothing ran.", "warning"))
    worksheet = doc.worksheet
    if isinstance(worksheet, str):
        blocks += [Heading("Worksheet"), Code(worksheet)]
    elif isinstance(worksheet, Worksheet):
        parts = [b for b in (classes_table(worksheet), settings_block(worksheet)) if b is not None]
        if parts:
            blocks += [Heading("Workloads and budgets")] + parts
    blocks += [Heading("Glossary"), glossary(SWEEP_TERMS + PLAN_TERMS + RUN_TERMS)]
    return Document(title, tuple(blocks))
