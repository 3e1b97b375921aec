"""The worksheet of a load-plan run (`kneecap run`): candidates and why each was accepted or rejected,
the capacity region per candidate/class/state, the cells with their verdicts (offered load apart
from completed throughput), plots, handoff, glossary; the worksheet parts (ledgers, workloads,
budgets, cost) come from run_worksheet. Pure: Results in, Document out.

Cells are {candidate, class, state, load: {dimension: x}, repetition, verdict, metrics, limit,
breaches} (kneecap.loadplan); anything missing renders as a dash.
"""

from __future__ import annotations

from collections import defaultdict

from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, Cell, Code, Document, Figure, Heading, KeyValues, Paragraph, Table, drawn
from kneecap.report.glossary import PLAN_TERMS, RUN_TERMS, SWEEP_TERMS, glossary
from kneecap.report.levels import level_panels
from kneecap.report.load import Results
from kneecap.report.provenance import manifest_blocks, missing_block, source_banner
from kneecap.report.run_worksheet import candidate_plans, classes_table, cost_table, ledger_section, settings_block

UNITS = {"concurrency": "concurrent requests", "rate": "req/s"}


def _load(cell: dict) -> tuple[str, float | None]:
    load = cell.get("load")
    if isinstance(load, dict) and len(load) == 1:
        ((dim, value),) = load.items()
        return str(dim), float(value) if fmt.is_number(value) else None
    for dim in ("concurrency", "rate"):
        if fmt.is_number(cell.get(dim)):
            return dim, float(cell[dim])
    return "load", None


def _load_text(cell: dict) -> str:
    dim, value = _load(cell)
    if value is None:
        return fmt.MISSING
    return f"C={value:g}" if dim == "concurrency" else f"{value:g} {UNITS.get(dim, '')}".strip()


def _metric(cell: dict, key: str, pct: str | None = None) -> float | None:
    metrics = cell.get("metrics") if isinstance(cell.get("metrics"), dict) else {}
    value = metrics.get(key)
    if pct is not None:
        value = value.get(pct) if isinstance(value, dict) else None
    return float(value) if fmt.is_number(value) else None


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


def candidates_table(candidates: list[dict], preferred: object = None) -> Table:
    rows = []
    for c in candidates:
        name = str(c.get("name", "?"))
        gate = c.get("gate")
        rows.append(
            (
                name + (" (preferred)" if preferred == name else ""),
                str(c.get("target") or fmt.MISSING),
                _verdict_cell(c.get("verdict")),
                str(gate) if gate else fmt.MISSING,
                fmt.rate(c.get("peak_output_tok_s")),
                str(c.get("reason") or fmt.MISSING),
            )
        )
    return Table(
        ("candidate", "target", "verdict", "gate failed", "peak output (tok/s)", "reason"),
        tuple(rows),
        caption="Behaviour gate first, then SLO gate; cost is compared only between accepted candidates",
    )


def _failing_loads(info: dict, failed: dict) -> str:
    """'256: rep0 (ttft_p99_ms 828.7 > 500), rep1 (...)' per failing load: the repetition of each failure
    (rep0 is the first, as cells are named); a summary without `failures` lists the reasons alone."""
    failures = info.get("failures") if isinstance(info.get("failures"), dict) else None
    if failures is None:
        return "; ".join(f"{load}: {', '.join(map(str, why))}" for load, why in failed.items())
    parts = []
    for load, fails in failures.items():
        each = [
            f"rep{f.get('repetition')} ({'; '.join(map(str, f.get('reasons') or [])) or f.get('verdict')})"
            for f in fails
            if isinstance(f, dict)
        ]
        parts.append(f"{load}: {', '.join(each)}")
    return "; ".join(parts)


def capacity_table(capacity: dict) -> Table | None:
    rows = []
    for cand, by_class in capacity.items():
        for cls, by_state in (by_class or {}).items() if isinstance(by_class, dict) else ():
            for state, info in (by_state or {}).items() if isinstance(by_state, dict) else ():
                if not isinstance(info, dict):
                    continue
                dim = str(info.get("dimension", "load"))
                unit = UNITS.get(dim, "")
                at = info.get("at_capacity") if isinstance(info.get("at_capacity"), dict) else {}
                failed = info.get("failed") if isinstance(info.get("failed"), dict) else {}
                cap = info.get("capacity")
                rows.append(
                    (
                        str(cand),
                        str(cls),
                        str(state),
                        f"{dim} ({unit})" if unit else dim,
                        Cell(
                            _capacity(cap, info.get("offered_at_capacity")), "better" if fmt.is_number(cap) else "worse"
                        ),
                        ", ".join(f"{x:g}" if fmt.is_number(x) else str(x) for x in info.get("region") or [])
                        or "empty",
                        fmt.ms((at.get("ttft_ms") or {}).get("p99")),
                        fmt.ms((at.get("itl_ms") or {}).get("p99")),
                        fmt.ms((at.get("e2e_ms") or {}).get("p99")),
                        fmt.rate(at.get("output_tok_s")),
                        _failing_loads(info, failed) or fmt.MISSING,
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


def _little_text(cell: dict) -> str:
    little = cell.get("little")
    if not isinstance(little, dict):
        return fmt.MISSING
    if not little.get("applied", little.get("stable")):
        return "not applied (interval not stable)"
    consistent = little.get("consistent")
    err = little.get("relative_error")
    text = "consistent" if consistent else "inconsistent" if consistent is False else "checked"
    return f"{text} ({fmt.pct(err)} off)" if fmt.is_number(err) else text


def cells_tables(cells: list[dict]) -> list[Table]:
    """Every cell in two tables that fit a page: its verdict and why, then what was measured."""
    verdicts, measured, tones = [], [], []
    for c in cells:
        m = c.get("metrics") if isinstance(c.get("metrics"), dict) else {}
        offered = c.get("offered") if isinstance(c.get("offered"), dict) else {}
        key = " / ".join(str(c.get(k, fmt.MISSING)) for k in ("candidate", "class", "state"))
        where = f"{key} / {_load_text(c)} / rep{c.get('repetition')}"
        verdicts.append(
            (
                str(c.get("candidate", fmt.MISSING)),
                str(c.get("class", fmt.MISSING)),
                str(c.get("state", fmt.MISSING)),
                _load_text(c),
                fmt.count(c.get("repetition")),
                _verdict_cell(c.get("verdict")),
                fmt.count(m.get("requests")),
                fmt.count(m.get("completed")),
                fmt.count(m.get("failed")),
                _little_text(c),
                "; ".join(fmt.limit_and_breaches(c)) or fmt.MISSING,
            )
        )
        measured.append(
            (
                where,
                fmt.rate(offered.get("offered_request_s")),
                fmt.rate(offered.get("completed_request_s")),
                fmt.count(offered.get("dropped")),
                fmt.rate(m.get("output_tok_s")),
                fmt.ms(_metric(c, "ttft_ms", "p50")),
                fmt.ms(_metric(c, "ttft_ms", "p95")),
                fmt.ms(_metric(c, "ttft_ms", "p99")),
                fmt.ms(_metric(c, "itl_ms", "p99")),
                fmt.ms(_metric(c, "e2e_ms", "p99")),
                fmt.count((m.get("ttft_ms") or {}).get("n") if isinstance(m.get("ttft_ms"), dict) else None),
            )
        )
        tones.append("warning" if m.get("suspect") else "plain")
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


def _group_series(cells: list[dict], y) -> tuple[list[tuple[str, list[tuple[float, float]]]], str]:
    """Per candidate/class/state: worst value over repetitions at each load (y(cell) -> float|None)."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    dims = set()
    for c in cells:
        dim, load = _load(c)
        value = y(c)
        if load is None or value is None:
            continue
        dims.add(dim)
        grouped[(c.get("candidate"), c.get("class"), c.get("state"))][load].append(value)
    series = [
        (" / ".join(str(k) for k in key if k is not None), sorted((x, max(v)) for x, v in by_load.items()))
        for key, by_load in grouped.items()
    ]
    return series, (dims.pop() if len(dims) == 1 else "load")


def run_figures(results: Results, cells: list[dict]) -> list[Figure]:
    out: list[Figure] = []
    ttft, dim = _group_series(cells, lambda c: _metric(c, "ttft_ms", "p99"))
    worksheet = results.summary.get("worksheet") if isinstance(results.summary.get("worksheet"), dict) else {}
    budgets = worksheet.get("budgets") if isinstance(worksheet.get("budgets"), dict) else {}
    limits = [
        (f"{cls} budget: p99 TTFT ≤ {b['ttft_p99_ms']:g} ms", float(b["ttft_p99_ms"]))
        for cls, b in budgets.items()
        if isinstance(b, dict) and fmt.is_number(b.get("ttft_p99_ms"))
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
        series = f"{c.get('candidate')} / {c.get('class')}" + (f" / {c['state']}" if c.get("state") else "")
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
    summary = results.summary
    name = summary.get("plan_name") or summary.get("name") or results.name
    title = f"Load-plan worksheet — {name}"
    blocks: list[Block] = [Heading(title, 1)]
    if isinstance(summary.get("description"), str):
        blocks.append(Paragraph(summary["description"]))
    blocks.append(source_banner("run", summary))
    blocks += manifest_blocks(summary)
    blocks += missing_block(results.missing)
    cells = [c for c in summary.get("cells") or [] if isinstance(c, dict)]
    candidates = [c for c in summary.get("candidates") or [] if isinstance(c, dict)]
    if candidates:
        blocks += [Heading("Candidates"), candidates_table(candidates, summary.get("preferred"))]
        costs = cost_table(candidates)
        if costs:
            blocks.append(costs)
    capacity = summary.get("capacity")
    cap_table = capacity_table(capacity) if isinstance(capacity, dict) else None
    blocks.append(Heading("Capacity region"))
    blocks.append(cap_table or Paragraph("No capacity region in this summary.", "warning"))
    handoff = summary.get("handoff")
    blocks.append(
        KeyValues(
            (("handoff package", f"{handoff}/ (inside this results folder)" if handoff else "none: no limit failed"),),
            caption="Specialist handoff",
        )
    )
    plans = candidate_plans(summary, results.plan)
    if plans:
        blocks += [Heading("KV ledger")] + ledger_section(plans)
    figs = run_figures(results, cells)
    if figs:
        blocks += [Heading("Plots")] + figs
    if cells:
        blocks += [Heading("Cells"), *cells_tables(cells)]
    else:
        blocks.append(Paragraph("This summary holds no cells: nothing ran.", "warning"))
    worksheet = summary.get("worksheet")
    if isinstance(worksheet, str):
        blocks += [Heading("Worksheet"), Code(worksheet)]
    elif isinstance(worksheet, dict):
        parts = [b for b in (classes_table(worksheet), settings_block(worksheet)) if b is not None]
        if parts:
            blocks += [Heading("Workloads and budgets")] + parts
    blocks += [Heading("Glossary"), glossary(SWEEP_TERMS + PLAN_TERMS + RUN_TERMS)]
    return Document(title, tuple(blocks))
