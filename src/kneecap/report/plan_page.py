"""The page for a capacity plan (`kneecap plan --json`): the HBM ledger per GPU, what each lever and
TP degree buys (stacked bars + tables), and the context sweep. Pure: plan dict in, Document out.

Also provides `ledger_blocks(plan)` so a run worksheet can embed the same ledger.
"""

from __future__ import annotations

from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, Code, Document, Figure, Heading, KeyValues, Paragraph, Table, drawn
from kneecap.report.glossary import PLAN_TERMS, glossary
from kneecap.report.load import Results
from kneecap.report.provenance import facts_block, manifest_blocks, source_banner

LEDGER_LINES = (
    ("weights_bytes", "weights"),
    ("overhead_bytes", "overhead (activations, workspace, graphs)"),
    ("fragmentation_bytes", "fragmentation headroom"),
    ("reserved_bytes", "reserved (outside the engine)"),
    ("kv_pool_bytes", "KV-cache pool"),
)
BAR_PARTS = ("weights_bytes", "overhead_bytes", "fragmentation_bytes", "kv_pool_bytes")


def _gain(value: object) -> str:
    return f"{value:,.2f}×" if fmt.is_number(value) else fmt.MISSING


def _seqs(value: object) -> str:
    """max_seqs as written by the planner: an int, or {contiguous, paged}."""
    if isinstance(value, dict):
        return f"{fmt.count(value.get('paged'))} paged / {fmt.count(value.get('contiguous'))} contiguous"
    return fmt.count(value)


def _paged(value: object) -> object:
    return value.get("paged") if isinstance(value, dict) else value


def _bar_parts(entry: dict, hbm_bytes: object) -> dict:
    """Stacked-bar parts for a lever or TP row: its own ledger if given, else KV pool + the rest of HBM."""
    ledger = entry.get("ledger")
    if isinstance(ledger, dict):
        return {k: ledger.get(k) for k in BAR_PARTS}
    pool = entry.get("kv_pool_bytes")
    parts = {"kv_pool_bytes": pool}
    if fmt.is_number(hbm_bytes) and fmt.is_number(pool):
        parts["other_bytes"] = max(hbm_bytes - pool, 0)
    return parts


def ledger_figure(plan: dict) -> list[Figure]:
    ledger = plan.get("ledger") if isinstance(plan.get("ledger"), dict) else {}
    hbm = ledger.get("hbm_bytes")
    base = ("as planned", {k: ledger.get(k) for k in BAR_PARTS}, f"max seqs {fmt.count(_paged(plan.get('max_seqs')))}")
    levers = [
        (str(lv.get("name", "?")), _bar_parts(lv, hbm), f"max seqs {fmt.count(_paged(lv.get('max_seqs')))}")
        for lv in plan.get("levers") or []
        if isinstance(lv, dict)
    ]
    tps = [
        (f"TP={row.get('tp')}", _bar_parts(row, hbm), f"max seqs {fmt.count(_paged(row.get('max_seqs')))}")
        for row in plan.get("tp_sweep") or []
        if isinstance(row, dict)
    ]
    groups = [("Per lever (per GPU)", [base] + levers if ledger else levers), ("Per TP degree (per GPU)", tps)]
    return drawn(
        "ledger",
        "HBM ledger per GPU, per lever and per TP degree",
        plots.ledger_bars(groups, hbm if fmt.is_number(hbm) else None),
        "Grey bars where only the KV pool is known lump weights, overhead and fragmentation together.",
    )


def ledger_blocks(plan: dict) -> list[Block]:
    """The ledger as key/value lines with GiB and share of HBM, plus the headline capacity numbers."""
    ledger = plan.get("ledger") if isinstance(plan.get("ledger"), dict) else {}
    hbm = ledger.get("hbm_bytes")
    gb = f" ({hbm / 10**9:,.1f} GB)" if fmt.is_number(hbm) else ""
    items: list[tuple[str, str]] = [("HBM per GPU", fmt.with_unit(fmt.gib(hbm), "GiB") + gb)]
    for key, label in LEDGER_LINES:
        value = ledger.get(key)
        if key == "reserved_bytes" and not value:
            continue
        share = f" ({fmt.pct(value / hbm)} of HBM)" if fmt.is_number(value) and fmt.is_number(hbm) and hbm else ""
        items.append((label, fmt.with_unit(fmt.gib(value), "GiB") + share))
    items += [
        ("KV bytes per token (whole model)", fmt.with_unit(fmt.count(plan.get("kv_bytes_per_token")), "bytes")),
        ("KV bytes per token per GPU", fmt.with_unit(fmt.count(plan.get("kv_bytes_per_token_per_gpu")), "bytes")),
        ("KV capacity", fmt.with_unit(fmt.count(plan.get("kv_capacity_tokens")), "tokens")),
    ]
    context = plan.get("context")
    worst = plan.get("worst_case")
    if worst is None and fmt.is_number(context):
        worst = plan.get("mean_context") == context
    if worst and fmt.is_number(context):
        full = f" if every sequence holds the full {fmt.count(context)} tokens (worst case)"
        items += [
            ("max sequences" + full, _seqs(plan.get("max_seqs")) + " sequences"),
            ("max concurrency" + full, fmt.with_unit(fmt.count(plan.get("max_concurrency")), "requests")),
        ]
        typical = [p for p in plan.get("paged_at_mean_context") or [] if isinstance(p, dict)]
        if typical:
            items.append(
                (
                    "paged max sequences at a typical mean context",
                    "; ".join(
                        f"{fmt.count(p.get('mean_context'))} tokens → {fmt.count(p.get('max_seqs'))}" for p in typical
                    ),
                )
            )
    else:
        items += [
            ("max sequences", _seqs(plan.get("max_seqs")) + " sequences"),
            ("max concurrency", fmt.with_unit(fmt.count(plan.get("max_concurrency")), "requests")),
        ]
    items.append(("binding limit", str(plan.get("binding", fmt.MISSING))))
    return [KeyValues(tuple(items), caption="HBM ledger per GPU (GiB = 2^30 bytes)")]


def _facts(plan: dict) -> KeyValues | None:
    """Facts the planner wrote that the ledger and tables do not show (model, GPU, TP, dtypes, HBM basis...)."""
    shown = {
        "kv_bytes_per_token",
        "kv_bytes_per_token_per_gpu",
        "kv_capacity_tokens",
        "max_concurrency",
        "binding",
        "kind",
        "model_executed",
        "benchmark_executed",
        "ledger",
        "max_seqs",
        "levers",
        "tp_sweep",
        "context_sweep",
        "notes",
        "manifest",
        "worst_case",
        "paged_at_mean_context",
        "kv_derivation",
    }
    return facts_block(
        ((key, value) for key, value in plan.items() if key not in shown and value is not None),
        "Deployment and planner inputs (units in the names)",
    )


def plan_tables(plan: dict) -> list[Block]:
    blocks: list[Block] = []
    levers = [lv for lv in plan.get("levers") or [] if isinstance(lv, dict)]
    if levers:
        rows = tuple(
            (
                str(lv.get("name", "?")),
                str(lv.get("change") or fmt.MISSING),
                fmt.gib(lv.get("kv_pool_bytes")),
                _seqs(lv.get("max_seqs")),
                fmt.count(lv.get("max_concurrency")),
                fmt.count(lv.get("num_gpus")),
                _gain(lv.get("gain")),
                str(lv.get("note") or ""),
            )
            for lv in levers
        )
        blocks.append(
            Table(
                (
                    "lever",
                    "change",
                    "KV pool per GPU (GiB)",
                    "max sequences (sequences)",
                    "max concurrency (requests)",
                    "GPUs",
                    "gain (× max sequences)",
                    "note",
                ),
                rows,
                caption="What each lever buys",
            )
        )
    tps = [row for row in plan.get("tp_sweep") or [] if isinstance(row, dict)]
    if tps:
        rows = tuple(
            (
                fmt.count(r.get("tp")),
                fmt.count(r.get("num_gpus")),
                fmt.count(r.get("kv_heads_per_gpu")),
                "yes" if r.get("replicated") else "no",
                fmt.MISSING if "fits" not in r else ("yes" if r["fits"] else "no"),
                fmt.gib(r.get("kv_pool_bytes")),
                _seqs(r.get("max_seqs")),
                _gain(r.get("gain")),
            )
            for r in tps
        )
        blocks.append(
            Table(
                (
                    "TP (degree)",
                    "GPUs",
                    "KV heads per GPU (heads)",
                    "KV heads replicated",
                    "weights fit",
                    "KV pool per GPU (GiB)",
                    "max sequences (sequences)",
                    "gain (× max sequences)",
                ),
                rows,
                caption="Tensor-parallel sweep",
            )
        )
    ctx = [row for row in plan.get("context_sweep") or [] if isinstance(row, dict)]
    if ctx:
        rows = tuple(
            (fmt.count(r.get("context")), fmt.count(r.get("contiguous")), fmt.count(r.get("paged"))) for r in ctx
        )
        blocks.append(
            Table(
                ("context (tokens)", "contiguous (sequences)", "paged (sequences)"),
                rows,
                caption="Context sweep: sequences that fit",
            )
        )
    return blocks


def plan_document(results: Results) -> Document:
    plan = results.summary
    title = f"Capacity plan — {plan.get('model') if isinstance(plan.get('model'), str) else results.name}"
    blocks: list[Block] = [Heading(title, 1), source_banner("plan", plan)]
    if isinstance(plan.get("manifest"), dict):
        blocks += manifest_blocks(plan)
    facts = _facts(plan)
    if facts:
        blocks.append(facts)
    if not isinstance(plan.get("ledger"), dict):
        blocks.append(Paragraph("This plan has no ledger: nothing to chart.", "warning"))
    notes = [str(n) for n in plan.get("notes") or [] if n]
    blocks += [Paragraph("Note: " + n, "muted") for n in notes]
    derivation = [str(line) for line in plan.get("kv_derivation") or [] if isinstance(line, str)]
    if derivation:
        blocks += [
            Heading("KV bytes per token, step by step"),
            Paragraph(
                "Only K and V are cached, per layer and per KV head; the same arithmetic as the "
                "terminal worksheet's section 1."
            ),
            Code("\n".join(derivation)),
        ]
    blocks += [Heading("HBM ledger")] + ledger_blocks(plan) + ledger_figure(plan)
    tables = plan_tables(plan)
    if tables:
        blocks += [Heading("Levers, TP and context")] + tables
    blocks += [Heading("Glossary"), glossary(PLAN_TERMS)]
    return Document(title, tuple(blocks))
