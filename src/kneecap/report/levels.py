"""Reading sweep levels for a report: load points, SLO limits, preflight limit, suspect flags, and the
time series of a simulator trace or server-metrics timeline. Pure: typed levels (LevelSummary) and the
summary in, plain values out.

A level's keys are typed by kneecap.metrics.summary_model; every field is optional there, so a summary an
older version wrote (without stability, goodput, client stats ...) still renders, with those cells empty.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kneecap.report.numbers import is_number, load_label, load_text
from kneecap.report.plots import LoadPoint

if TYPE_CHECKING:
    from kneecap.metrics.summary_model import LevelSummary, SweepSummary

LATENCY_KEYS = (
    "ttft_ms",
    "ttft_answer_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "ttft_from_scheduled_ms",
    "e2e_from_scheduled_ms",
    "schedule_lag_ms",
    "chunk_gap_ms",
)
LATENCY_LABELS = {
    "ttft_ms": "TTFT",
    "ttft_answer_ms": "TTFT (answer)",
    "itl_ms": "ITL",
    "tpot_ms": "TPOT",
    "e2e_ms": "E2E",
    "ttft_from_scheduled_ms": "TTFT from scheduled",
    "e2e_from_scheduled_ms": "E2E from scheduled",
    "schedule_lag_ms": "Schedule lag",
    "chunk_gap_ms": "Chunk gap",
}


def levels_of(summary: dict) -> list[LevelSummary]:
    """The summary's levels, typed; a document that is not a summary is the one-line error SweepSummary.read gives."""
    from kneecap.metrics.summary_model import SweepSummary

    return SweepSummary.read(summary).levels


def load_axis(levels: list[LevelSummary]) -> tuple[str, str]:
    """(name, unit) of the load axis: concurrency or rate."""
    for lv in levels:
        name, value, unit = load_label(lv)
        if value is not None:
            return name, unit
    return "level", ""


def load_value(level: LevelSummary, index: int) -> float:
    """The level's load as a number: its concurrency or rate; `--concurrency max` (every request at
    once) is plotted at its request count; a level with neither at its position (1, 2, ...)."""
    _, value, _ = load_label(level)
    if value is not None:
        return value
    if level.concurrency == "max" and is_number(level.requests):
        return float(level.requests)
    return float(index + 1)


def is_suspect(level: LevelSummary) -> bool:
    return bool(level.suspect)


def client_stats(level: LevelSummary) -> dict:
    """The client's self-measurement of a level, one flat dict: a single driver's stats as they are;
    several workers' (client.per_worker) merged as the worst (max) of each number, reasons pooled."""
    client = level.client
    if client is None:
        return {}
    workers = [w for w in client.get("per_worker") or [] if isinstance(w, dict)]
    if not workers:
        return client
    merged: dict = {"workers": len(workers)}
    for w in workers:
        for key, value in w.items():
            if is_number(value):
                merged[key] = max(merged.get(key, value), value)
    merged["suspect_reasons"] = worst_reasons([str(r) for w in workers for r in w.get("suspect_reasons") or []])
    return merged


def worst_reasons(reasons: list[str]) -> list[str]:
    """One reason per kind ("event-loop lag p99 ...", "client CPU ..."), the worst figure of each, and how many
    of the reports gave it: the reports of several workers or rounds say the same thing with their own numbers."""
    by_kind: dict[str, list[tuple[float, str]]] = {}
    for reason in reasons:
        number = re.search(r"(?<![A-Za-z\d.])\d[\d,]*\.?\d*", reason)  # a figure, not "p99"
        kind = reason[: number.start()] if number else reason
        by_kind.setdefault(kind, []).append((float(number.group().replace(",", "")) if number else 0.0, reason))
    out = []
    for seen in by_kind.values():
        worst = max(seen)[1]
        out.append(worst if len(seen) == 1 else f"{worst} (the worst of {len(seen)} reports)")
    return out


def suspect_reason(level: LevelSummary) -> str:
    """Why a level is suspect, in words (the client's own reasons, or its lag figures)."""
    flag = level.suspect
    if isinstance(flag, str):
        return flag
    if isinstance(flag, dict) and isinstance(flag.get("reason"), str):
        return flag["reason"]
    client = client_stats(level)
    reasons = [str(r) for r in client.get("suspect_reasons") or []]
    if reasons:
        return "; ".join(reasons)
    lags = [f"{k} = {v:,.1f}" for k, v in client.items() if "lag" in k and is_number(v)]
    if lags:
        return "client event-loop lag: " + ", ".join(lags)
    return "client saturated (latencies may measure the client, not the server)"


def preflight_verdict(level: LevelSummary) -> str | None:
    """The memory preflight's verdict on the level (fits, tight, exceeds), or None where bench gave none."""
    value = level.preflight
    return value if isinstance(value, str) or value is None else value.verdict


def preflight_limit(doc: SweepSummary) -> float | None:
    """The largest concurrency the memory preflight says fits: from the summary, else from level verdicts."""
    pre = doc.preflight
    if pre is not None and is_number(pre.max_safe_concurrency):
        return float(pre.max_safe_concurrency)
    older = getattr(doc, "max_safe_concurrency", None)  # where older bench runs wrote it
    if is_number(older):
        return float(older)
    levels = doc.levels
    fits = [float(lv.concurrency) for lv in levels if is_number(lv.concurrency) and preflight_verdict(lv) == "fits"]
    if fits and any(preflight_verdict(lv) in ("tight", "exceeds") for lv in levels):
        return max(fits)
    return _derived_preflight_limit(doc)


def _derived_preflight_limit(doc: SweepSummary) -> float | None:
    """A simulate summary carries its plan's KV capacity and a fixed ISL/OSL: run the same pure preflight
    (kneecap.plan.preflight) on them. None when any input is missing or lengths are not fixed."""
    plan, workload = doc.plan, doc.workload
    load = doc.load if "load" in doc.model_fields_set else "concurrency"
    if plan is None or workload is None or load != "concurrency":
        return None
    capacity, isl, osl = plan.kv_capacity_tokens, workload.isl, workload.osl
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (capacity, isl, osl)):
        return None
    block_size = doc.deployment.block_size if doc.deployment and doc.deployment.block_size is not None else 16
    from kneecap.errors import KneecapError
    from kneecap.plan.preflight import preflight

    layout = plan.kv_layout
    if layout is not None and isinstance(plan.num_kv_blocks, int):
        # vLLM's layer groups: a request of ISL+OSL tokens takes the blocks of every group (a linear-attention
        # state's blocks too), the count plan and preflight give (kneecap.plan.ledger.sequences_at)
        from kneecap.plan.engines import VllmLayout

        try:
            groups = VllmLayout(**{**layout, "groups": tuple(tuple(g) for g in layout["groups"])})
            per_request = groups.blocks_per_request(isl + osl, in_flight=1)
        except (TypeError, ValueError, KeyError):
            return None
        return float(plan.num_kv_blocks // per_request) if per_request > 0 else None

    try:
        return float(
            preflight(capacity, isl=isl, osl=osl, concurrencies=[1], block_size=block_size).max_safe_concurrency
        )
    except KneecapError:
        return None


def knee_load(doc: SweepSummary) -> float | None:
    """The knee's load (its concurrency or rate), or None where the sweep found none."""
    knee = doc.knee
    if knee is None:
        return None
    return next((float(v) for v in (knee.concurrency, knee.rate) if is_number(v)), None)


def parse_slo(slo: object) -> dict[str, dict[str, float]]:
    """{'ttft_p99_ms': 500} or 'ttft_p99_ms=500,itl_p99_ms=50' -> {'ttft_ms': {'p99': 500.0}, ...}.

    Each budget is read by the one SLO parser (kneecap.metrics.slo.parse_slo); one it refuses (a key or
    value this version does not know) is left out and the others still draw; error_rate has no latency line.
    """
    from kneecap.errors import KneecapError
    from kneecap.metrics.slo import ERROR_RATE, split_key
    from kneecap.metrics.slo import parse_slo as parse_budgets

    if isinstance(slo, str):
        terms = [part.partition("=")[::2] for part in slo.replace(";", ",").split(",") if "=" in part]
    elif isinstance(slo, dict):
        terms = list(slo.items())
    else:
        return {}
    out: dict[str, dict[str, float]] = {}
    for key, value in terms:
        try:
            ((name, limit),) = parse_budgets({str(key).strip(): value}).items()
        except KneecapError:
            continue
        if name != ERROR_RATE:
            metric, stat = split_key(name)
            out.setdefault(f"{metric}_ms", {})[stat] = limit
    return out


def slo_spec(summary: dict) -> object:
    """The run's SLO: the summary's `slo`, else the `--slo` value on the recorded command line."""
    if summary.get("slo"):
        return summary["slo"]
    manifest = summary.get("manifest") if isinstance(summary.get("manifest"), dict) else {}
    argv = manifest.get("command")
    if isinstance(argv, list):
        for i, arg in enumerate(argv):
            if arg == "--slo" and i + 1 < len(argv) and isinstance(argv[i + 1], str):
                return argv[i + 1]
            if isinstance(arg, str) and arg.startswith("--slo="):
                return arg.split("=", 1)[1]
    return None


def points_of(levels: list[LevelSummary]) -> list[LoadPoint]:
    points = []
    for i, lv in enumerate(levels):
        sm = lv.server_metrics
        points.append(
            LoadPoint(
                load=load_value(lv, i),
                output_tok_s=float(lv.output_tok_s) if is_number(lv.output_tok_s) else None,
                latency_ms={k: d.to_dict() for k in LATENCY_KEYS if (d := lv.distribution(k)) is not None},
                suspect=is_suspect(lv),
                kv_usage_max=_fraction(sm.kv_usage_max) if sm else None,
                waiting_max=float(sm.waiting_max) if sm and is_number(sm.waiting_max) else None,
                running_max=float(sm.running_max) if sm and is_number(sm.running_max) else None,
            )
        )
    return points


def frontier_points(levels: list[LevelSummary]) -> list[tuple[float, float, str]]:
    """(p99 TPOT ms, output tok/s, load) of every level that has both: the throughput-latency frontier."""
    return [
        (float(lv.tpot_ms.p99), float(lv.output_tok_s), load_text(lv))
        for lv in levels
        if lv.tpot_ms is not None and is_number(lv.tpot_ms.p99) and is_number(lv.output_tok_s)
    ]


def _fraction(value: object) -> float | None:
    """KV usage as a fraction; a value above 1 is read as a percentage."""
    if not is_number(value):
        return None
    return float(value) / 100 if value > 1 else float(value)


def _first_number(row: dict, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if is_number(row.get(key)):
            return float(row[key])
    return None


def time_series(rows: tuple | list, kv_blocks_total: float | None = None) -> dict | None:
    """Trace or timeline rows -> {'t', 'kv_usage' (fraction), 'queue', 'running'} lists, or None.

    The two shapes the commands write, with 't' in seconds: the simulator's trace.jsonl (kv_blocks_used of
    the pool's kv_blocks_total blocks, num_waiting, num_running) and bench's server_metrics.jsonl (the
    server's kv_usage fraction, waiting, running).
    """
    t, kv, queue, running = [], [], [], []
    for row in rows:
        when = _first_number(row, ("t",))
        if when is None:
            continue
        usage = _fraction(_first_number(row, ("kv_usage",)))
        if usage is None:
            used = _first_number(row, ("kv_blocks_used",))
            usage = used / kv_blocks_total if used is not None and kv_blocks_total else None
        t.append(when)
        kv.append(usage)
        queue.append(_first_number(row, ("waiting", "num_waiting")))
        running.append(_first_number(row, ("running", "num_running")))
    if not t or (all(v is None for v in kv) and all(v is None for v in queue)):
        return None
    return {"t": t, "kv_usage": kv, "queue": queue, "running": running}


def kv_blocks_total(summary: dict, level: LevelSummary | None) -> float | None:
    """The KV pool in blocks: the level's server metrics, else the summary's (plan) figure."""
    sm = level.server_metrics if level is not None else None
    if sm is not None and is_number(sm.num_kv_blocks):
        return float(sm.num_kv_blocks)
    for source, key in ((summary, "kv_blocks_total"), (summary.get("plan"), "num_kv_blocks")):
        if isinstance(source, dict) and is_number(source.get(key)):
            return float(source[key])
    return None


def level_panels(rows: tuple | list, summary: dict, levels: list[LevelSummary], max_panels: int = 8) -> list[dict]:
    """Trace/timeline rows split per level (each level's clock may restart at 0): one series per panel.

    Rows without a 'level' key form one panel. Each panel is a time_series dict plus 'label'.
    With more than max_panels levels, panels are picked evenly, always keeping the first and last.
    """
    groups: dict = {}
    for row in rows:
        key = row.get("level") if isinstance(row.get("level"), int) else None
        groups.setdefault(key, []).append(row)
    panels = []
    for key in sorted(groups, key=lambda k: (k is None, k if k is not None else 0)):
        level = levels[key] if key is not None and 0 <= key < len(levels) else None
        series = time_series(groups[key], kv_blocks_total(summary, level))
        if series is None:
            continue
        if level is not None:
            label = load_text(level)
        else:
            label = f"level {key}" if key is not None else "whole run"
        t0 = series["t"][0]  # a level's clock may start where the previous level ended: count from its own start
        panels.append(
            {
                **series,
                "t": [t - t0 for t in series["t"]],
                "label": label,
                "time_label": "time since the level's first step (s)"
                if key is not None
                else "time since the first step (s)",
            }
        )
    if len(panels) > max_panels:
        step = (len(panels) - 1) / (max_panels - 1)
        panels = [panels[round(i * step)] for i in range(max_panels)]
    return panels
