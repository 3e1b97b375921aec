"""The terminal table printed at the end of `kneecap bench`: summary.json in, a rich Table out.

Pure: takes the summary dict, returns a renderable; the CLI decides where to print it.
Every column header carries its unit. A dash means "no data", never a fake zero.
"""

from __future__ import annotations

import math

from kneecap.metrics.stability import stability_caption, verdict_text

MISSING = "—"

# (header, path into a level dict, format); stats are {mean, p50, p90, p95, p99, max, n}.
COLUMNS = (
    ("ok", ("completed",), "int"),
    ("failed", ("failed",), "int"),
    ("out tok/s", ("output_tok_s",), "num"),
    ("total tok/s", ("total_tok_s",), "num"),
    ("req/s", ("request_s",), "num2"),
    ("TTFT p50 (ms)", ("ttft_ms", "p50"), "ms"),
    ("TTFT p99 (ms)", ("ttft_ms", "p99"), "ms"),
    ("ITL p50 (ms)", ("itl_ms", "p50"), "ms"),
    ("ITL p99 (ms)", ("itl_ms", "p99"), "ms"),
    ("TPOT p50 (ms)", ("tpot_ms", "p50"), "ms"),
    ("E2E p99 (s)", ("e2e_ms", "p99"), "s_from_ms"),
)


def _get(level: dict, path: tuple[str, ...]):
    value = level
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value, style: str) -> str:
    """One cell: whole numbers with separators, ms with 1 decimal under 100, a dash when absent."""
    if not _is_number(value):
        return MISSING
    if style == "int":
        return f"{int(value):,}"
    if style == "num2":
        return f"{value:,.2f}"
    if style == "s_from_ms":
        return f"{value / 1000:,.2f}"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def level_value_label(kind: str, value) -> str:
    if kind == "rate":
        return "inf" if value in ("inf", float("inf")) else f"{value:g}"
    return f"{value}"


def spec_text(level: dict) -> str:
    """'spec 51% accepted, 2.53 tok/step' for a speculating level ('' when the server reported none)."""
    spec = level.get("spec") or {}
    rate, length = spec.get("acceptance_rate"), spec.get("mean_accepted_length")
    parts = ([f"{rate:.0%} accepted"] if _is_number(rate) else []) + (
        [f"{length:.2f} tok/step"] if _is_number(length) else []
    )
    return ("spec " + ", ".join(parts)) if parts else ""


def level_notes(level: dict, knee_value) -> str:
    """Flags worth a glance: the knee, a suspect client, a tight preflight, server-side facts."""
    notes = []
    key = "concurrency" if "concurrency" in level else "rate"
    if knee_value is not None and level.get(key) == knee_value:
        notes.append("knee")
    if level.get("partial"):
        notes.append("partial (interrupted)")
    if level.get("suspect"):
        notes.append("client-suspect")
    verdict = (
        (level.get("preflight") or {}).get("verdict")
        if isinstance(level.get("preflight"), dict)
        else level.get("preflight")
    )
    if verdict in ("tight", "exceeds"):
        notes.append(f"preflight {verdict}")
    server = level.get("server_metrics") or {}
    if _is_number(server.get("kv_usage_max")):
        notes.append(f"KV max {server['kv_usage_max'] * 100:.0f}%")
    preemptions = server.get(
        "preemptions", server.get("preemptions_delta")
    )  # the contract's key, then bench's older one
    if _is_number(preemptions) and preemptions > 0:
        notes.append(f"{int(preemptions)} preemptions")
    if level.get("server_dead"):
        notes.append("server died")
    if spec_text(level):
        notes.append(spec_text(level))
    errors = level.get("errors") or {}
    if errors:
        notes.append(", ".join(f"{kind}×{n}" for kind, n in sorted(errors.items())))
    return "; ".join(notes)


def has_slo(summary: dict) -> bool:
    return bool(summary.get("slo")) or any(isinstance(lv.get("slo"), dict) for lv in summary.get("levels", []))


def slo_cell(level: dict) -> str:
    """The level's SLO verdict: 'met', or 'BREACH' and every term that failed ('itl_p99_ms 150 > 15')."""
    verdict = level.get("slo")
    if not isinstance(verdict, dict) or "met" not in verdict:
        return MISSING
    if verdict["met"]:
        return "met"
    terms = [str(b.get("message") or b.get("key")) for b in verdict.get("breaches") or [] if isinstance(b, dict)]
    return "BREACH " + "; ".join(terms)


def slo_caption(summary: dict, kind: str) -> str | None:
    """One line under the table: at which levels the SLO held and where it broke (None without an SLO)."""
    if not has_slo(summary):
        return None
    judged = [lv for lv in summary.get("levels", []) if isinstance(lv.get("slo"), dict) and "met" in lv["slo"]]
    broke = [level_value_label(kind, lv.get(kind)) for lv in judged if not lv["slo"]["met"]]
    label = "C" if kind == "concurrency" else "rate"
    if not judged:  # e.g. preflight skipped every level: nothing to judge, not "met"
        skipped = len(summary.get("skipped") or [])
        return "SLO not judged: no level ran" + (
            f" (all {skipped} skipped: they exceed the KV pool)" if skipped else ""
        )
    if not broke:
        return f"SLO met at every level ({len(judged)} of {len(judged)})"
    return f"SLO BREACHED at {label}={', '.join(broke)} ({len(broke)} of {len(judged)} levels)"


def find_max_caption(summary: dict) -> str | None:
    """--find-max's answer, its bracket and the binding SLO term, in one line (None without a search)."""
    m = summary.get("max_load")
    return f"find-max: {m['answer']}" if isinstance(m, dict) and m.get("answer") else None


def summary_table(summary: dict):
    """A rich Table of every measured level (skipped levels listed as such)."""
    from rich.table import Table

    kind = summary.get("load") or ("rate" if any("rate" in lv for lv in summary.get("levels", [])) else "concurrency")
    knee = summary.get("knee") or {}
    knee_value = knee.get(kind) if isinstance(knee, dict) else None
    table = Table(title="kneecap bench", title_justify="left")
    table.add_column("C" if kind == "concurrency" else "rate (req/s)", justify="right")
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    slo = has_slo(summary)
    if slo:
        table.add_column("SLO", justify="left")
    table.add_column("steady", justify="left")
    table.add_column("notes", justify="left")
    for level in summary.get("levels", []):
        cells = [level_value_label(kind, level.get(kind))]
        cells += [fmt(_get(level, path), style) for _, path, style in COLUMNS]
        if slo:
            cells.append(slo_cell(level))
        cells += [verdict_text(level), level_notes(level, knee_value)]
        table.add_row(*cells, style="red" if slo and cells[-3].startswith("BREACH") else None)
    for skipped in summary.get("skipped", []):
        table.add_row(
            level_value_label(kind, skipped.get(kind)),
            *([MISSING] * (len(COLUMNS) + slo + 1)),
            f"skipped: {skipped.get('reason', '')}",
        )
    captions = []
    stopped = summary.get("stopped")
    if stopped:
        captions.append(f"stopped at {kind} {level_value_label(kind, stopped.get('at'))}: {stopped.get('reason')}")
    if line := slo_caption(summary, kind):
        captions.append(line)
    if line := stability_caption(summary.get("levels", [])):
        captions.append(line)
    if line := find_max_caption(summary):
        captions.append(line)
    if captions:
        table.caption = "\n".join(captions)
    return table
