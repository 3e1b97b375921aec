"""The worksheet parts of a load-plan run page: each candidate's KV ledger, the workload
classes with their length distributions, the budgets per class, the cost at capacity, and the
plan's load/stop settings. Pure: the run's typed document (kneecap.metrics.run_model) in, document blocks
out; the plans and ledgers inside it are `kneecap plan --json` documents, rendered by plan_page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kneecap.report import numbers as fmt
from kneecap.report import plots
from kneecap.report.document import Block, KeyValues, Table, drawn
from kneecap.report.load import PLAN_KEYS
from kneecap.report.plan_page import BAR_PARTS, ledger_blocks
from kneecap.report.provenance import facts_block

if TYPE_CHECKING:
    from kneecap.metrics.run_model import CandidateResult, LengthDist, RunDocument, Worksheet


def candidate_plans(doc: RunDocument, fallback: dict | None = None) -> dict[str, dict]:
    """{candidate: plan-like dict with at least 'ledger'}: the identity's full plan, else the worksheet's
    ledger alone; `fallback` (a plan.json found in the folder) when neither is there."""
    from kneecap.metrics.run_model import Worksheet

    out: dict[str, dict] = {}
    for name, ident in (doc.identities or {}).items():
        if ident.plan is not None and all(k in ident.plan for k in PLAN_KEYS):
            out[str(name)] = ident.plan
    worksheet = doc.worksheet if isinstance(doc.worksheet, Worksheet) else Worksheet()
    ledgers = worksheet.ledger
    if ledgers is not None:
        if all(k in ledgers for k in ("hbm_bytes", "kv_pool_bytes")):  # one ledger, not one per candidate
            ledgers = {"plan": ledgers}
        for name, ledger in ledgers.items():
            if isinstance(ledger, dict) and str(name) not in out and "kv_pool_bytes" in ledger:
                out[str(name)] = {"ledger": ledger}
    for source in (doc.plan, worksheet.plan):  # one plan for the whole run
        if not out and isinstance(source, dict) and all(k in source for k in PLAN_KEYS):
            out["plan"] = source
    if not out and fallback is not None:
        out["plan"] = fallback
    return out


def ledger_section(plans: dict[str, dict]) -> list[Block]:
    """One ledger per candidate (GiB per GPU) and a stacked bar per candidate."""
    blocks: list[Block] = []
    columns = {
        name: dict(next(b for b in ledger_blocks(plan) if isinstance(b, KeyValues)).items)
        for name, plan in plans.items()
    }
    lines = list(dict.fromkeys(line for items in columns.values() for line in items))
    rows = tuple((line, *(columns[name].get(line, fmt.MISSING) for name in columns)) for line in lines)
    blocks.append(Table(("per GPU", *columns), rows, caption="HBM ledger per GPU and candidate (GiB = 2^30 bytes)"))
    bars = []
    hbm = None
    for name, plan in plans.items():
        ledger = plan["ledger"]
        hbm = hbm or ledger.get("hbm_bytes")
        seqs = plan.get("max_seqs")
        paged = seqs.get("paged") if isinstance(seqs, dict) else seqs
        bars.append(
            (
                name,
                {k: ledger.get(k) for k in BAR_PARTS},
                f"max seqs {fmt.count(paged)}" if fmt.is_number(paged) else "",
            )
        )
    same_hbm = len({p["ledger"].get("hbm_bytes") for p in plans.values()}) == 1
    return blocks + drawn(
        "ledger",
        "HBM ledger per GPU, per candidate",
        plots.ledger_bars([("Per candidate (per GPU)", bars)], hbm if same_hbm else None),
    )


def length_text(dist: LengthDist | int | str | None) -> str:
    """A length distribution as words: 'lognormal mean 400, std 200 (clipped to 1..4,000) tokens'."""
    from kneecap.metrics.run_model import LengthDist

    if not isinstance(dist, LengthDist):
        return str(dist) if dist is not None else fmt.MISSING
    kind = dist.kind
    if kind == "fixed":
        body = f"fixed {fmt.count(dist.value)}"
    elif kind == "uniform":
        body = f"uniform {fmt.count(dist.low)}..{fmt.count(dist.high)}"
    elif kind in ("normal", "lognormal"):
        body = f"{kind} mean {fmt.num(dist.mean)}, std {fmt.num(dist.std)}"
    elif kind == "empirical":
        source = dist.file or f"{len(dist.values or [])} values"
        body = f"empirical ({source})"
    else:
        body = str(kind)
    low, high = dist.min, dist.max
    clip = (
        f" (clipped to {fmt.count(low) if fmt.is_number(low) else 1}..{fmt.count(high)})" if fmt.is_number(high) else ""
    )
    return f"{body}{clip} tokens"


def classes_table(worksheet: Worksheet) -> Table | None:
    if not worksheet.classes:
        return None
    budgets = worksheet.budgets or {}
    rows = []
    for name, spec in worksheet.classes.items():
        budget = budgets[name].to_dict() if name in budgets else {}  # {budget key: limit}, as the plan set it
        budget_text = ", ".join(f"{k} ≤ {v:g}" if fmt.is_number(v) else f"{k}={v}" for k, v in budget.items())
        prefix = spec.shared_prefix_tokens
        rows.append(
            (
                str(name),
                length_text(spec.input),
                length_text(spec.output),
                fmt.num(spec.weight, 2),
                fmt.count(prefix) if fmt.is_number(prefix) else fmt.MISSING,
                budget_text or fmt.MISSING,
            )
        )
    return Table(
        (
            "class",
            "input length",
            "output length",
            "mix weight",
            "shared prefix (tokens)",
            "budgets (ms; error_rate as a fraction)",
        ),
        tuple(rows),
        caption="Workload classes and their SLO budgets",
    )


def settings_block(worksheet: Worksheet) -> KeyValues | None:
    return facts_block(worksheet.settings(), "Load plan settings (units in the names)")


def cost_table(candidates: list[CandidateResult]) -> Table | None:
    rows = []
    for cand in candidates:
        for cls, c in (cand.cost or {}).items():
            if c is None:
                continue
            price = (
                f"{c.usd_per_gpu_hour:g} $/GPU-hour × {fmt.count(c.num_gpus)} GPUs"
                if fmt.is_number(c.usd_per_gpu_hour)
                else ", ".join(f"{k} = {v:g}" for k, v in c.declared_prices() if fmt.is_number(v)) or fmt.MISSING
            )
            rows.append(
                (
                    cand.name or "?",
                    str(cls),
                    c.basis or fmt.MISSING,
                    price,
                    fmt.rate(c.output_tok_s_at_capacity),
                    fmt.num(c.usd_per_million_output_tokens, 3),
                )
            )
    if not rows:
        return None
    return Table(
        (
            "candidate",
            "class",
            "basis",
            "price as declared",
            "output at capacity (tok/s)",
            "cost ($ per 1M output tokens)",
        ),
        tuple(rows),
        caption="Cost at the capacity found (compared only between accepted candidates)",
    )
