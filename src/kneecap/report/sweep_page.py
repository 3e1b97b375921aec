"""The page for one bench or simulate sweep: provenance, headline, plots, level and percentile
tables, errors (with the server's own words, escaped by the renderer), glossary.
Pure apart from drawing PNGs in memory: Results in, Document out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, Cell, Document, Figure, Heading, KeyValues, Paragraph, Table, drawn
from kneecap.report.glossary import SWEEP_TERMS, glossary
from kneecap.report.levels import (
    LATENCY_KEYS,
    LATENCY_LABELS,
    client_stats,
    frontier_points,
    is_suspect,
    knee_load,
    level_panels,
    load_axis,
    parse_slo,
    points_of,
    preflight_limit,
    preflight_verdict,
    slo_spec,
    suspect_reason,
)
from kneecap.report.load import RecordDigest, Results
from kneecap.report.provenance import facts_block, manifest_blocks, missing_block, source_banner

if TYPE_CHECKING:
    from kneecap.metrics.summary_model import Distribution, LevelSummary, MaxLoad, SloBreach, SweepSummary

PLOT_LATENCIES = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))
TABLE_LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")  # the latency table's p50 and p99 columns


def _stat(dist: Distribution | None, name: str) -> object:
    """A statistic of a level's distribution as the summary wrote it (None where it wrote none)."""
    return getattr(dist, name) if dist is not None and name in dist.model_fields_set else None


def _pct(dist: Distribution | None, name: str) -> str:
    return fmt.ms(_stat(dist, name)) if dist is not None else fmt.MISSING


def subject_of(summary: dict) -> str:
    """A short 'what was run' label: the model name and target, where the summary says."""
    manifest = summary.get("manifest") if isinstance(summary.get("manifest"), dict) else {}
    deployment = summary.get("deployment") if isinstance(summary.get("deployment"), dict) else {}
    server = summary.get("server") if isinstance(summary.get("server"), dict) else {}
    for source in (summary, manifest, deployment, server):
        for key in ("model", "model_name", "served_model", "model_id"):
            if isinstance(source.get(key), str):
                gpu = deployment.get("gpu") if source is deployment else None
                return f"{source[key]} on {gpu}" if isinstance(gpu, str) else source[key]
    return ""


def headline(summary: dict, doc: SweepSummary, limit: float | None) -> KeyValues:
    levels = doc.levels
    load_name, load_unit = load_axis(levels)
    items: list[tuple[str, str]] = [("levels run", f"{len(levels)}")]
    best = max((lv for lv in levels if fmt.is_number(lv.output_tok_s)), key=lambda lv: lv.output_tok_s, default=None)
    if best is not None:
        items.append(("peak output throughput", f"{fmt.rate(best.output_tok_s)} tok/s at {fmt.load_text(best)}"))
    knee = doc.knee
    if knee is not None:
        where = fmt.load_text(knee)
        items.append(("knee", f"{where}, {fmt.rate(knee.output_tok_s)} tok/s output"))
    else:
        items.append(("knee", "none found in the levels run (throughput still rising, or too few levels)"))
    stopped = doc.stopped
    if stopped is not None:
        at = stopped.at
        at_text = fmt.load_text(at) if isinstance(at, dict) else f"{load_name} {at}"
        detail = f" — {stopped.detail}" if isinstance(stopped.detail, str) else ""
        reason = stopped.reason if "reason" in stopped.model_fields_set else "no reason recorded"
        items.append(("stopped early", f"at {at_text}: {reason}{detail}"))
    else:
        items.append(("stopped early", "no: every planned level ran"))
    if limit is not None:
        items.append(("preflight KV limit", f"C={fmt.count(limit)} concurrent requests (worst case fits the KV pool)"))
    slo = slo_spec(summary)
    if slo:
        items.append(
            (
                "SLO",
                slo
                if isinstance(slo, str)
                else ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in slo.items()),
            )
        )
    suspects = [f"{fmt.load_text(lv)} ({suspect_reason(lv)})" for lv in levels if is_suspect(lv)]
    items.append(("suspect levels", "; ".join(suspects) if suspects else "none"))
    skipped = doc.skipped
    if skipped:
        reasons = (s.reason if "reason" in s.model_fields_set else "no reason recorded" for s in skipped)
        items.append(("skipped levels", "; ".join(f"{fmt.load_text(s)}: {r}" for s, r in zip(skipped, reasons))))
    failed = sum(int(lv.failed) for lv in levels if fmt.is_number(lv.failed))
    requests = sum(int(lv.requests) for lv in levels if fmt.is_number(lv.requests))
    items.append(("failed requests", f"{failed:,} of {requests:,} requests"))
    return KeyValues(tuple(items))


def _flags(lv: LevelSummary) -> Cell:
    return Cell("⚠ suspect (client lag)", "warning") if is_suspect(lv) else Cell("", "plain")


def level_table(levels: list[LevelSummary]) -> Table:
    """Counts and throughput per level."""
    columns = (
        "load",
        "requests",
        "completed",
        "failed",
        "duration (s)",
        "output (tok/s)",
        "input (tok/s)",
        "total (tok/s)",
        "requests (req/s)",
        "goodput (req/s)",
        "preflight",
        "flags",
    )
    rows, tones = [], []
    for lv in levels:
        goodput = lv.goodput
        if goodput is not None:  # older summaries named the rate req_s
            goodput = goodput.request_s if "request_s" in goodput.model_fields_set else getattr(goodput, "req_s", None)
        verdict = preflight_verdict(lv)
        failed = lv.failed
        rows.append(
            (
                fmt.load_text(lv),
                fmt.count(lv.requests),
                fmt.count(lv.completed),
                Cell(fmt.count(failed), "worse" if fmt.is_number(failed) and failed > 0 else "plain"),
                fmt.num(lv.duration_s, 2),
                fmt.rate(lv.output_tok_s),
                fmt.rate(lv.input_tok_s),
                fmt.rate(lv.total_tok_s),
                fmt.rate(lv.request_s),
                fmt.rate(goodput),
                Cell(
                    verdict or fmt.MISSING,
                    "worse" if verdict == "exceeds" else "warning" if verdict == "tight" else "plain",
                ),
                _flags(lv),
            )
        )
        tones.append("warning" if is_suspect(lv) else "plain")
    return Table(
        columns,
        tuple(rows),
        caption="Throughput counts completed requests only, over each level's wall "
        "time; failed requests are counted, never dropped.",
        row_tones=tuple(tones),
    )


def _slo_cell(lv: LevelSummary) -> Cell:
    verdict = lv.slo
    if verdict is None or "met" not in verdict.model_fields_set:
        return Cell(fmt.MISSING, "muted")
    if verdict.met:
        return Cell("met", "better")
    breaches = [b if isinstance(b, str) else _breach_text(b) for b in verdict.breaches]
    return Cell("missed: " + "; ".join(map(str, breaches)), "worse")


def _breach_text(b: SloBreach) -> str:
    """A missed SLO term in words: its message, else its key."""
    said = b.model_fields_set
    return str(b.message if "message" in said else b.key if "key" in said else "?")


def latency_table(levels: list[LevelSummary]) -> Table:
    """The latency headline per level, with the level's SLO verdict."""
    rows, tones = [], []
    for lv in levels:
        rows.append(
            (
                fmt.load_text(lv),
                _slo_cell(lv),
                *(_pct(lv.distribution(key), p) for key in TABLE_LATENCIES for p in ("p50", "p99")),
                _flags(lv),
            )
        )
        tones.append("warning" if is_suspect(lv) else "plain")
    return Table(
        (
            "load",
            "SLO verdict",
            "TTFT p50 (ms)",
            "TTFT p99 (ms)",
            "ITL p50 (ms)",
            "ITL p99 (ms)",
            "TPOT p50 (ms)",
            "TPOT p99 (ms)",
            "E2E p50 (ms)",
            "E2E p99 (ms)",
            "flags",
        ),
        tuple(rows),
        caption="Latency per level (full percentiles below)",
        row_tones=tuple(tones),
    )


def stability_table(levels: list[LevelSummary]) -> Table | None:
    """Steady state per level: offered, sent and served load, the waiting queue's and TTFT's trends, the verdict."""
    from kneecap.metrics.stability import stability_caption, verdict_text

    judged = [lv for lv in levels if lv.stability is not None]
    if not judged:
        return None
    rows = []
    for lv in judged:
        st = lv.stability
        verdict = verdict_text(lv)
        rows.append(
            (
                fmt.load_text(lv),
                Cell(verdict, "better" if verdict == "stable" else "worse"),
                fmt.num(st.offered_rps, 2),
                fmt.num(st.sent_rps, 2),
                fmt.num(st.served_rps, 2),
                fmt.rate(st.offered_output_tok_s),
                fmt.rate(st.output_tok_s),
                fmt.num(st.queue_trend, 2),
                fmt.num(st.ttft_trend, 2),
                fmt.num(st.in_flight_mean, 1),
                st.client_behind or st.rule or fmt.MISSING,
            )
        )
    caption = "Steady state per level (the rule: docs/metrics.md, Steady state). " + (
        stability_caption(judged) or "Every level reached steady state."
    )
    return Table(
        (
            "load",
            "steady",
            "offered (req/s)",
            "sent (req/s)",
            "served (req/s)",
            "offered output (tok/s)",
            "served output (tok/s)",
            "waiting queue trend (req/s)",
            "TTFT trend (last/first third)",
            "in flight (requests)",
            "why",
        ),
        tuple(rows),
        caption=caption,
    )


def percentile_table(levels: list[LevelSummary], key: str) -> Table | None:
    if not any(lv.distribution(key) is not None for lv in levels):
        return None
    label = LATENCY_LABELS[key]
    rows = []
    for lv in levels:
        st = lv.distribution(key)
        rows.append(
            (
                fmt.load_text(lv),
                *(fmt.ms(_stat(st, p)) for p in ("mean", "p50", "p90", "p95", "p99", "max")),
                fmt.count(_stat(st, "n")),
            )
        )
    return Table(
        ("load", f"{label} mean (ms)", "p50 (ms)", "p90 (ms)", "p95 (ms)", "p99 (ms)", "max (ms)", "n (samples)"),
        tuple(rows),
        caption=f"{label} per level",
    )


def error_table(levels: list[LevelSummary], digest: RecordDigest | None) -> Table | None:
    """Error counts per level and kind, with a few distinct messages from the records."""
    samples = digest.error_samples if digest is not None else {}
    rows = []
    for i, lv in enumerate(levels):
        for kind, n in sorted((lv.errors or {}).items()):
            index = lv.level if lv.level is not None else i  # records carry the sweep's index
            rows.append(
                (
                    fmt.load_text(lv),
                    str(kind),
                    fmt.count(n),
                    " • ".join(samples.get((index, str(kind)), [])) or fmt.MISSING,
                )
            )
    if not rows:
        return None
    return Table(
        ("load", "error kind", "count (requests)", "sample messages (as the server sent them)"),
        tuple(rows),
        caption="Failed requests by kind",
    )


def server_table(levels: list[LevelSummary]) -> Table | None:
    measured = [lv.server_metrics for lv in levels if lv.server_metrics is not None]
    if not measured:
        return None
    rows = []
    for lv in levels:
        sm = lv.server_metrics
        if sm is None:
            rows.append((fmt.load_text(lv), *(fmt.MISSING,) * 6))
            continue
        kv = sm.kv_usage_max
        kv_pct = fmt.pct(kv / 100 if fmt.is_number(kv) and kv > 1 else kv)
        rows.append(
            (
                fmt.load_text(lv),
                kv_pct,
                fmt.pct(sm.kv_usage_mean),
                fmt.count(sm.running_max),
                fmt.count(sm.waiting_max),
                fmt.count(sm.preemptions),
                fmt.pct(sm.prefix_cache_hit_rate),
            )
        )
    sources = {sm.source for sm in measured}
    origin = {
        "simulator": "the simulated engine's own counters",
        "prometheus": "scraped from the server's /metrics",
        "usage": "the prefix-cache hit rate from the responses' cached-token counts (the server exposed no /metrics)",
        "none": "the server exposed none",
    }
    said = "; ".join(origin.get(s, str(s)) for s in sorted(sources, key=str))
    return Table(
        (
            "load",
            "peak KV usage (% of blocks)",
            "mean KV usage (% of blocks)",
            "peak running (requests)",
            "peak waiting (requests)",
            "preemptions (count)",
            "prefix-cache hit rate (% of prompt tokens)",
        ),
        tuple(rows),
        caption=f"Server metrics per level ({said})",
    )


def spec_table(levels: list[LevelSummary]) -> Table | None:
    """Speculative decoding per level, as the server counted it (vLLM's spec_decode counters, SGLang's gauges, or
    the simulated engine's draws); None when no level speculated."""
    if not any(lv.spec is not None for lv in levels):
        return None
    rows = []
    for lv in levels:
        sp = lv.spec
        if sp is None:
            rows.append((fmt.load_text(lv), *(fmt.MISSING,) * 5))
            continue
        mean = sp.mean_accepted_length
        rows.append(
            (
                fmt.load_text(lv),
                fmt.count(sp.draft_tokens),
                fmt.count(sp.accepted_tokens),
                fmt.pct(sp.acceptance_rate),
                fmt.MISSING if mean is None else f"{mean:.2f}",
                str(sp.source or fmt.MISSING),
            )
        )
    return Table(
        (
            "load",
            "draft tokens (tokens)",
            "accepted (tokens)",
            "acceptance rate (% of draft tokens)",
            "mean accepted length (tokens per step, bonus token included)",
            "source",
        ),
        tuple(rows),
        caption="Speculative decoding per level",
    )


CLIENT_KEY_PARTS = ("lag", "cpu")  # the client-health numbers worth a column (not timestamps)


def client_table(levels: list[LevelSummary]) -> Table | None:
    stats = [client_stats(lv) for lv in levels]
    keys: list[str] = []
    for st in stats:
        for k, v in st.items():
            if fmt.is_number(v) and any(p in k for p in CLIENT_KEY_PARTS) and k not in keys:
                keys.append(k)
    if not keys:
        return None
    rows, tones = [], []
    for lv, st in zip(levels, stats):
        rows.append(
            (
                fmt.load_text(lv),
                *(fmt.num(st.get(k), 2) for k in keys),
                Cell("⚠ suspect: " + suspect_reason(lv), "warning") if is_suspect(lv) else "ok",
            )
        )
        tones.append("warning" if is_suspect(lv) else "plain")

    def unit(k: str) -> str:
        return (
            "ms"
            if k.endswith("_ms")
            else "s"
            if k.endswith("_s")
            else "fraction of one core"
            if k.endswith("fraction")
            else "count"
            if k.endswith("_n")
            else "as named"
        )

    return Table(
        ("load", *(f"{k.replace('_', ' ')} ({unit(k)})" for k in keys), "verdict"),
        tuple(rows),
        row_tones=tuple(tones),
        caption="The client's own health per level (worst worker): a lagging client measures itself, not the server",
    )


def figures(results: Results, doc: SweepSummary, limit: float | None) -> list[Figure]:
    summary, levels = results.summary, doc.levels
    load_name, load_unit = load_axis(levels)
    points = points_of(levels)
    subject = subject_of(summary)
    out: list[Figure] = []
    out += drawn(
        "throughput",
        f"Output throughput vs {load_name}",
        plots.throughput_vs_load(points, load_name, load_unit, knee_load(doc), limit, subject),
        " ".join(
            filter(
                None,
                (
                    "The star marks the knee." if knee_load(doc) is not None else "No knee was found in these levels.",
                    "The dashed green line is the memory preflight limit (worst-case KV fits)."
                    if limit is not None
                    else "",
                    "Circled points are suspect levels (client lag)." if any(p.suspect for p in points) else "",
                ),
            )
        ),
    )
    out += drawn(
        "latency",
        f"Latency percentiles vs {load_name}",
        plots.latency_vs_load(points, load_name, load_unit, PLOT_LATENCIES, parse_slo(slo_spec(summary))),
        "Black dash-dot lines are the SLO limits declared for the run."
        if parse_slo(slo_spec(summary))
        else "No latency SLO was declared for this run.",
    )
    out += drawn(
        "frontier", "Throughput–latency frontier", plots.frontier([(subject or results.name, frontier_points(levels))])
    )
    panels = level_panels(results.trace, summary, levels) if results.trace else []
    source = "simulator trace"
    if not panels and results.timeline:
        panels, source = level_panels(results.timeline, summary, levels), "server metrics"
    if panels:
        out += drawn("occupancy", "KV occupancy and queue depth over time", plots.occupancy_over_time(panels, source))
    out += drawn(
        "peaks", f"Peak KV occupancy and queue depth vs {load_name}", plots.peaks_vs_load(points, load_name, load_unit)
    )
    out += find_max_figure(summary, doc, load_name, load_unit)
    out += drawn(
        "chunks",
        "Tokens per streamed chunk",
        plots.tokens_per_chunk_histogram(results.records.chunk_token_counts if results.records else {}),
        "A chunk carrying k tokens counts as k tokens in ITL; many multi-token chunks mean per-token timing is coarse.",
    )
    return out


def _search_key(summary: dict, m: MaxLoad) -> tuple[str, float] | None:
    """The SLO term the search plot draws: the one the failing step broke, else the first declared."""
    from kneecap.metrics.slo import parse_slo as slo_terms

    slo = slo_terms(slo_spec(summary))  # {'ttft_p99_ms': 200.0, ...}
    if not slo:
        return None
    because = str(m.failed_because or "")
    key = next((k for k in slo if because.startswith(k)), next(iter(slo)))
    return key, slo[key]


def find_max_figure(summary: dict, doc: SweepSummary, load_name: str, load_unit: str) -> list[Figure]:
    """--find-max: every probe of the search against the SLO budget (probes and levels are in the same order)."""
    from kneecap.metrics.slo import slo_value

    m = doc.max_load
    if m is None:
        return []
    term = _search_key(summary, m)
    levels = [lv for lv in doc.levels if not (lv.find_max and lv.find_max.extended)]  # a probe's final level
    if not m.probes or term is None or len(m.probes) != len(levels):
        return []
    key, limit = term
    probes = [
        plots.SearchProbe(load=float(p.load), met=bool(p.met), value=slo_value(lv.to_dict(), key))
        for p, lv in zip(m.probes, levels)
    ]
    return drawn(
        "find_max",
        f"Highest {load_name} under the SLO",
        plots.find_max_search(probes, key, limit, load_name, load_unit, m.value, m.failed_at),
        find_max_text(m, load_name),
    )


def find_max_text(m: MaxLoad, load_name: str) -> str:
    """One sentence: the answer, the next step up that failed and why, how many probes and repetitions."""
    if m.answer:  # the answer is in the headline; the plot shows how the search got there
        return f"{len(m.probes)} probes, numbered in the order they ran."
    reps = m.repeats or 1
    every = f" in each of {reps} repetitions" if reps > 1 else ""
    if m.value is None:
        answer = f"No {load_name} probed met every SLO term{every}"
    else:
        answer = f"The highest {load_name} that met every SLO term{every}: {m.value:g}"
    nxt = (
        f"; the next step up, {m.failed_at:g}, failed ({m.failed_because or 'SLO'})"
        if m.failed_at is not None
        else "; no higher load was found to fail within the search bounds"
    )
    return f"{answer}{nxt}. {len(m.probes)} probes, numbered in the order they ran."


CONFIG_KEYS = (
    "deployment",
    "engine",
    "workload",
    "plan",
    "step_time",
    "load",
    "seed",
    "status",
    "base_url",
    "endpoint",
    "server",
    "workers",
)


def configuration(summary: dict) -> KeyValues | None:
    """What was run: deployment, engine limits, workload, KV plan figures, step-time constants, seed."""
    return facts_block(
        ((key, summary[key]) for key in CONFIG_KEYS if summary.get(key) is not None),
        "Deployment, engine, workload and seed as recorded (units in the names)",
    )


def sweep_document(results: Results) -> Document:
    from kneecap.metrics.summary_model import SweepSummary

    summary = results.summary
    doc = SweepSummary.read(summary, str(results.path))
    levels = doc.levels
    limit = preflight_limit(doc)
    kind_word = "Benchmark" if results.kind == "bench" else "Simulation"
    subject = subject_of(summary)
    title = f"{kind_word} report — {subject or results.name}"
    blocks: list[Block] = [Heading(title, 1), source_banner(results.kind, summary)]
    blocks += manifest_blocks(summary)
    blocks += missing_block(results.missing)
    if not levels:
        blocks.append(Paragraph("This summary holds no levels: nothing ran to completion.", "warning"))
    blocks += [Heading("Headline"), headline(summary, doc, limit)]
    if doc.max_load is not None and doc.max_load.answer:
        blocks.append(Paragraph(f"Find-max: {doc.max_load.answer}."))
    config = configuration(summary)
    if config:
        blocks += [Heading("Configuration"), config]
    figs = figures(results, doc, limit) if levels else []
    if figs:
        blocks.append(Heading("Plots"))
        blocks += figs
    if levels:
        blocks += [Heading("Levels"), level_table(levels), latency_table(levels)]
        blocks += [t for t in (stability_table(levels),) if t is not None]
        blocks.append(Heading("Latency percentiles"))
        blocks += [t for t in (percentile_table(levels, k) for k in LATENCY_KEYS) if t is not None]
        extra = [
            t
            for t in (
                error_table(levels, results.records),
                server_table(levels),
                spec_table(levels),
                client_table(levels),
            )
            if t
        ]
        if extra:
            blocks.append(Heading("Errors, server and client"))
            blocks += extra
        tpc = [lv.tokens_per_chunk for lv in levels]
        if any(s is not None for s in tpc):
            rows = tuple(
                (
                    fmt.load_text(lv),
                    fmt.num(_stat(s, "mean"), 2),
                    fmt.num(_stat(s, "p99"), 0),
                    fmt.num(_stat(s, "max"), 0),
                )
                for lv, s in zip(levels, tpc)
            )
            blocks.append(
                Table(
                    ("load", "tokens per chunk, mean (tokens)", "p99 (tokens)", "max (tokens)"),
                    rows,
                    caption="Tokens per streamed chunk",
                )
            )
    blocks += [
        Heading("Glossary"),
        Paragraph(
            "Each metric once, from the record's named timestamps (kneecap's docs/metrics.md has the full definitions)."
        ),
        glossary(SWEEP_TERMS),
    ]
    return Document(title, tuple(blocks))
