"""Terminal rendering of a run: the candidates' verdicts and the capacity region per class (rich)."""

from __future__ import annotations

from kneecap.loadplan.capacity import capacity_figure, region_end_text


def _fmt(x) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def render_verdict_table(summary: dict) -> list:
    from rich.table import Table

    sim = not summary.get("benchmark_executed")
    title = f"kneecap run — {summary.get('plan_name')}" + (
        " (simulated: no model executed, no server timed)" if sim else ""
    )
    cands = Table(title=title, title_justify="left")
    for h in ("candidate", "verdict", "gate", "peak out tok/s", "reason"):
        cands.add_column(h, justify="right" if "tok/s" in h else "left")
    for c in summary.get("candidates", []):
        cands.add_row(
            c["name"],
            c.get("verdict", "—"),
            c.get("gate") or "—",
            _fmt(c.get("peak_output_tok_s")),
            c.get("reason", ""),
        )
    region = Table(title="capacity region (every repetition passes)", title_justify="left")
    for h in (
        "candidate",
        "class",
        "state",
        "region",
        "capacity",
        "TTFT p99 (ms)",
        "ITL p99 (ms)",
        "out tok/s",
        "where the region ends",
    ):
        region.add_column(
            h, justify="left" if h in ("candidate", "class", "state", "region", "where the region ends") else "right"
        )
    for cand, by_class in (summary.get("capacity") or {}).items():
        for cls, by_state in by_class.items():
            for state, info in by_state.items():
                at = info.get("at_capacity") or {}
                region.add_row(
                    cand,
                    cls,
                    state,
                    ", ".join(f"{x:g}" for x in info["region"]) or "none",
                    f"{info['dimension']} {capacity_figure(info)}" if info["capacity"] is not None else "—",
                    _fmt((at.get("ttft_ms") or {}).get("p99")),
                    _fmt((at.get("itl_ms") or {}).get("p99")),
                    _fmt(at.get("output_tok_s")),
                    region_end_text(info),
                )
    return [cands, region]
