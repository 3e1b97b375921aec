"""The recommend report: recommend.json's document -> DIR/report.md and DIR/report.html, with the Pareto
frontier over every simulated candidate as a table and two plots (cost per million output tokens vs p99 TTFT;
output tokens/s per GPU vs per user; drawn by report/plots.py) as PNG files.

Owns this page's text only; not the search, not the drawing. Reads recommend.json typed
(kneecap.metrics.recommend_model.RecommendDocument).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from kneecap.metrics.recommend_model import Candidate, Funnel, RecommendDocument, SpecChoice

    Doc = Union[RecommendDocument, dict]  # a dict is read (typed) first

COLUMNS = (
    "",
    "GPU",
    "tp x pp",
    "replicas",
    "weights/KV",
    "seqs/tokens",
    "speculative",
    "$/h",
    "$/M output tokens",
    "TTFT p99 (ms)",
    "TPOT p99 (ms)",
    "max load per replica",
    "binding (margin)",
)


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _typed(doc: Doc) -> RecommendDocument:
    from kneecap.metrics.recommend_model import RecommendDocument

    return doc if isinstance(doc, RecommendDocument) else RecommendDocument.read(doc)


def _ep(c: Candidate) -> int:
    return c.ep if c.ep is not None else 1


def _replicas(c: Candidate) -> str:
    dis = c.disaggregated
    return f"{dis.prefill_replicas} prefill + {dis.decode_replicas} decode" if dis else str(c.replicas)


def _share(share) -> str:
    """Each replica's share of the load; disaggregated pools have one per pool."""
    if isinstance(share, dict):
        return ", ".join(f"{v:.4g} per {k} replica" for k, v in share.items())
    return f"{share:.4g} per replica"


def _par(c: Candidate, sep: str = ", ") -> str:
    """tp x pp, with expert parallelism and DP attention when used."""
    out = f"{c.tp} x {c.pp}"
    if c.dp_attention:
        return out + f"{sep}DP attention (ep {c.ep})"
    return out + (f"{sep}ep {c.ep}" if _ep(c) > 1 else "")


def _rows(doc: RecommendDocument) -> list[list[str]]:
    rows = []
    for i, c in enumerate(doc.candidates):
        mark = ("best " if i == 0 else "") + ("frontier" if c in doc.frontier else "")
        margin = "" if c.margin is None else f" ({c.margin:.0%})"
        rows.append(
            [
                mark.strip(),
                c.gpu,
                _par(c),
                _replicas(c),
                f"{c.weight_dtype}/{c.kv_dtype}",
                f"{c.max_num_seqs}/{c.max_num_batched_tokens}",
                _spec(c) or "-",
                f"{c.cost_per_hour:.2f}",
                _f(c.cost_per_mtok_output, ".3f"),
                _f(c.predicted.ttft_p99_ms, ".0f"),
                _f(c.predicted.tpot_p99_ms, ".1f"),
                ("≥ " if c.max_load_at_least else "") + _f(c.max_load, ".3g"),
                c.binding + margin,
            ]
        )
    return rows


def _spec(c: Candidate) -> str:
    """A speculating candidate's method and draft tokens per step; empty when it does not speculate."""
    s = c.speculative
    return f"{s.method} K={s.tokens}" if s else ""


def _label(c: Candidate) -> str:
    dis = c.disaggregated
    n = f"{dis.prefill_replicas}P+{dis.decode_replicas}D" if dis else str(c.replicas)
    spec = f" + {_spec(c)}" if _spec(c) else ""
    return f"{n} x {c.gpus_per_replica} {c.gpu} {c.weight_dtype}/{c.kv_dtype}{spec}"


PLOTS = (
    (
        "recommend-cost-ttft.png",
        "cost per million output tokens vs p99 TTFT (down and left is better)",
        lambda c: c.predicted.ttft_p99_ms,
        lambda c: c.cost_per_mtok_output,
        "p99 TTFT (ms)",
        "$ per million output tokens",
        "frontier",
        True,
    ),
    (
        "recommend-throughput.png",
        "output tokens/s per GPU vs per user (up and right is better)",
        lambda c: c.output_tok_s_per_user,
        lambda c: c.output_tok_s_per_gpu,
        "output tokens/s per user (1000 / TPOT p50)",
        "output tokens/s per GPU",
        "throughput_frontier",
        False,
    ),
)


def _points(doc: RecommendDocument) -> list[Candidate]:
    """Every simulated candidate; the sized ones alone in a document without `points`."""
    return doc.points if doc.points is not None else doc.candidates


def _plots(out_dir: Path, doc: RecommendDocument) -> list[tuple[str, str]]:
    """The two Pareto plots over every evaluated candidate meeting the SLO (report/plots.py draws them)."""
    from kneecap.report.plots import recommend_pareto

    made = []
    points = [c for c in _points(doc) if c.meets_slo is not False]
    for name, title, fx, fy, xl, yl, key, log_x in PLOTS:
        try:
            png = recommend_pareto(
                [(fx(c), fy(c), _label(c)) for c in points],
                [(fx(c), fy(c), _label(c)) for c in getattr(doc, key) or []],
                xl,
                yl,
                title,
                log_x=log_x,
            )
        except ImportError:  # matplotlib not installed: the tables still say it all
            return made
        if png is None:
            continue
        (out_dir / name).write_bytes(png)
        made.append((name, title))
    return made


FRONTIER_COLUMNS = (
    "deployment",
    "tp x pp",
    "seqs/tokens",
    "$/h",
    "$/M output tokens",
    "TTFT p99 (ms)",
    "TPOT p99 (ms)",
    "output tok/s per GPU",
    "output tok/s per user",
    "checked at the load",
)


def _frontier_rows(doc: RecommendDocument) -> list[list[str]]:
    return [
        [
            _label(c),
            f"{c.tp} x {c.pp}",
            f"{c.max_num_seqs}/{c.max_num_batched_tokens}",
            f"{c.cost_per_hour:.2f}",
            _f(c.cost_per_mtok_output, ".3f"),
            _f(c.predicted.ttft_p99_ms, ".0f"),
            _f(c.predicted.tpot_p99_ms, ".1f"),
            _f(c.output_tok_s_per_gpu, ".0f"),
            _f(c.output_tok_s_per_user, ".0f"),
            "yes (longer levels)" if c.sized else "short level",
        ]
        for c in doc.frontier + [c for c in doc.throughput_frontier or [] if c not in doc.frontier]
    ]


def _gate(doc: RecommendDocument) -> str:
    """What vouches for the output of deployments that quantize below the checkpoint."""
    q = [c for c in doc.candidates if c.quantized_below_checkpoint]
    if not q:
        return ""
    gate = doc.behaviour_gate
    if gate is not None:
        return (
            f"{len(q)} of the {len(doc.candidates)} deployments below store weights or KV cache below the "
            f"checkpoint's own dtype and need the behaviour gate: their `kneecap run` plans check the "
            f"{len(gate.cases)} behaviour cases of {gate.file} ({', '.join(gate.cases)}) first, and a "
            "changed answer rejects the deployment."
        )
    return (
        f"{len(q)} of the {len(doc.candidates)} deployments below store weights or KV cache below the checkpoint's "
        "own dtype, and their behaviour is unchecked: this answer assumes their output is acceptable "
        "(pass --behaviour-gate FILE with behaviour cases to have their run plans check it)."
    )


def _quant(c: Candidate) -> str:
    q = c.quantized_below_checkpoint
    if not q:
        return ""
    what = " and ".join("KV cache" if x == "kv" else x for x in q)
    return f"- {what} below the checkpoint's dtype: " + (
        "needs the behaviour gate (its run plans carry the cases)"
        if c.needs_behaviour_gate
        else "behaviour unchecked (output assumed acceptable)"
    )


def _intro(doc: RecommendDocument) -> list[str]:
    load = doc.load
    unit = "requests/s" if load.kind == "rate" else "concurrent streams"
    slo = ", ".join(f"{k} = {v:g}" for k, v in doc.slo.items())
    tr = doc.trace
    search = doc.search
    lengths = (
        (
            f"lengths from trace {tr.file} ({tr.rows} requests; input tokens mean {tr.input_tokens_mean:g}, "
            f"p99 {tr.input_tokens_p99}; output tokens mean {tr.output_tokens_mean:g}, p99 {tr.output_tokens_p99}; "
            f"each drawn from the trace's own lengths), at its mean rate {tr.mean_rate_recorded:.4g} requests/s x "
            f"speed {tr.speed:g}, as Poisson arrivals; the confirming bench runs replay the trace at its own times"
        )
        if tr
        else (
            f"{doc.isl} input / {doc.osl} output tokens per request"
            if not doc.classes
            else f"a mix of {len(doc.classes)} request classes ({', '.join(c.name for c in doc.classes)}; "
            f"means {doc.isl} input / {doc.osl} output tokens)"
        )
    )
    return [
        f"Model {doc.model}, {load.value:g} {unit}, {lengths}; SLO {slo}.",
        f"{doc.evaluated} candidate deployments: {doc.pruned} do not fit, {doc.infeasible} cannot meet the SLO by "
        f"the bound, {doc.over_gpu_limit} need more GPUs than allowed, {doc.simulated} were simulated "
        f"(one replica's highest load under the SLO), {doc.sized} sized and checked at the stated load; "
        f"{doc.seconds:.0f} s." + (f" Search funnel: {_funnel(doc.funnel)}." if doc.funnel else ""),
        "Predictions come from kneecap's simulated engine (vLLM scheduling defaults, virtual time; no model was run). "
        + _routing(doc)
        + (f"Assumed arrivals: {doc.arrivals}. " if doc.arrivals else "")
        + (f"Steady state: {search.steady_state}. " if search and search.steady_state else "")
        + (
            f"{doc.disaggregated_tried or 0} setup{' was' if doc.disaggregated_tried == 1 else 's were'} also tried as disaggregated prefill and decode pools "
            "(prompts prefilled on one pool, their KV sent to the other, which generates every output token): those whose "
            "roofline bound on the pools' cost was below the cheapest aggregated deployment"
            + (
                f" ({doc.disaggregated_bounded_out} setups could not beat it by that bound)"
                if doc.disaggregated_bounded_out
                else ""
            )
            + ". "
            if doc.disaggregated_tried
            else "Disaggregated prefill/decode is searched for rate loads only. "
            if load.kind != "rate"
            else "No setup's bound on disaggregated pools' cost was below the cheapest aggregated deployment. "
        )
        + f"Expert parallelism: {(search and search.expert_parallel) or 'not searched'}. "
        + f"DP attention: {(search and search.dp_attention) or 'not searched'}."
        + (_spec_intro(doc.speculative) if doc.speculative else ""),
        *([_gate(doc)] if _gate(doc) else []),
        *(
            [
                "Left out for lack of a price (pass --prices FILE to include them): "
                + "; ".join(f"{u.gpu} ({u.note})" for u in doc.unpriced_gpus)
                + "."
            ]
            if doc.unpriced_gpus
            else []
        ),
        f"The frontier is taken over all {len(_points(doc))} simulated candidates that meet the SLO: "
        f"the {len(doc.candidates)} sized ones as checked at the load, the others at one level at their share "
        "of it; "
        "candidates the roofline bound or the staged search left out have no prediction and are not on it.",
    ]


def _routing(doc: RecommendDocument) -> str:
    """How the sizing check spread the load over the replicas."""
    r = doc.router
    if r is None or "through the router" not in (r.sizing_check or ""):
        return "Replicas share the load evenly (rate / replicas requests/s each). "
    prefix = (
        f", prompts opening with one of {r.num_prefix_groups} shared {r.shared_prefix_tokens}-token prefixes"
        if r.shared_prefix_tokens
        else ""
    )
    return (
        f"The sizing check at the stated load runs the replicas behind a {r.policy} router at the whole load"
        f"{prefix}; each deployment's prefix-cache hit rate is the fleet's. "
    )


def _spec_intro(s: SpecChoice) -> str:
    given = (
        f"acceptance {', '.join(f'{a:g}' for a in s.acceptance_assumed)} by draft position"
        if s.acceptance_assumed
        else f"{s.accepted_lengths_assumed} accepted lengths as given"
    )
    return (
        f" Speculative decoding ({s.method}, {s.tokens} draft tokens per step, {given}: "
        f"{s.expected_tokens_per_step:.2f} tokens per step expected) was tried on and off for every candidate; "
        "the acceptance is an assumption, not a measurement: confirm it on the served model and traffic."
    )


def to_markdown(doc: Doc, plots: list[tuple[str, str]]) -> str:
    doc = _typed(doc)
    lines = ["# kneecap recommend", ""] + [p + "\n" for p in _intro(doc)]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(doc)]
    lines.append("")
    lines += [
        "## Pareto frontier",
        "",
        "Cost per million output tokens against p99 TTFT, then output tokens/s per GPU "
        "against per user (each row is on at least one of the two frontiers).",
        "",
        "| " + " | ".join(FRONTIER_COLUMNS) + " |",
        "|" + "---|" * len(FRONTIER_COLUMNS),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in _frontier_rows(doc)]
    lines.append("")
    for name, title in plots:
        lines += [f"![{title}]({name})", ""]
    for i, c in enumerate(doc.candidates):
        p, at, dis, fewer = c.plan, c.predicted, c.disaggregated, c.one_fewer_replica
        plans, pools = c.run_plan, c.confirm_pools
        lines += [
            f"## {'Best: ' if i == 0 else ''}{_replicas(c)} x {c.gpus_per_replica} {c.gpu} "
            f"(tp {c.tp}, pp {c.pp}"
            + (", DP attention" if c.dp_attention else f", ep {c.ep}" if _ep(c) > 1 else "")
            + f", {c.weight_dtype} weights, {c.kv_dtype} KV)",
            "",
            f"- ledger per GPU: weights {p.weights_bytes_per_gpu / 1e9:.2f} GB, KV pool {p.kv_pool_bytes_per_gpu / 1e9:.2f} GB "
            f"({p.kv_capacity_tokens:,} tokens), overhead {p.overhead_bytes_per_gpu / 1e9:.2f} GB of {p.hbm_bytes_per_gpu / 1e9:.2f} GB",
            f"- predicted at the load ({_share(at.per_replica_load)}): TTFT p99 "
            f"{_f(at.ttft_p99_ms, '.0f')} ms, TPOT p99 {_f(at.tpot_p99_ms, '.1f')} ms, "
            f"{_f(at.output_tok_s, '.0f')} output tokens/s in all, KV use up to {_f(at.kv_usage_max, '.0%')}",
            f"- binding: {c.binding}" + ("" if c.margin is None else f" ({c.margin:.0%} below its limit)"),
            "- one replica fewer: "
            + ("n/a (one replica)" if fewer is None else ("meets the SLO" if fewer.met else f"fails ({fewer.why})")),
            f"- trust: {c.trust}",
            *([_quant(c)] if _quant(c) else []),
            *(
                [
                    f"- disaggregated: {dis.prefill_replicas} prefill and {dis.decode_replicas} decode replicas; KV sent over "
                    f"{dis.kv_link} ({dis.kv_link_note}), {dis.kv_transfer_ms:.2f} ms for a {doc.isl}-token prompt; "
                    f"prefill time p99 {_f(dis.prefill_time_p99_ms, '.0f')} ms"
                ]
                if dis
                else []
            ),
            *(  # the plan files by role: server, simulated, prefill, prefill-simulated
                [
                    f"- `kneecap run` plans: `{plans['server']}` (against the server)"
                    + (
                        f", `{plans['simulated']}` (the same plan on the simulated engine)"
                        if "simulated" in plans
                        else ""
                    )
                    + (
                        f", `{plans['prefill']}` (one prefill instance alone), `{plans['prefill-simulated']}` "
                        "(the same on the simulated engine)"
                        if "prefill" in plans
                        else ""
                    )
                ]
                if plans
                else []
            ),
            *(
                [
                    f"- confirm the prefill pool: `{pools.prefill}` ({pools.prefill_note})",
                    f"- confirm the decode pool: `{pools.decode}` ({pools.decode_note})",
                ]
                if pools
                else []
            ),
            f"- confirm on one replica: `{c.serve_cmd}` then `{c.confirm_cmd}`"
            + (f" ({c.confirm_note})" if c.confirm_note else ""),
            "",
        ]
    lines += ["## Prices", "", "| GPU | $/GPU-hour | source | date |", "|---|---|---|---|"]
    for g, pr in doc.prices.items():
        lines.append(f"| {g} | {pr.usd_per_gpu_hour} | {pr.source} | {pr.date} |")
    return "\n".join(lines) + "\n"


def to_html(doc: Doc, plots: list[tuple[str, str]]) -> str:
    doc = _typed(doc)
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kneecap recommend</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style></head><body><h1>kneecap recommend</h1>"
    ]
    parts += [f"<p>{e(p)}</p>" for p in _intro(doc)]
    parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>" for r in _rows(doc)]
    parts.append("</table>")
    parts.append(
        "<h2>Pareto frontier</h2><table><tr>" + "".join(f"<th>{e(c)}</th>" for c in FRONTIER_COLUMNS) + "</tr>"
    )
    parts += ["<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>" for r in _frontier_rows(doc)]
    parts.append("</table>")
    parts += [f"<figure><img src='{e(n)}' alt='{e(t)}'><figcaption>{e(t)}</figcaption></figure>" for n, t in plots]
    for c in doc.candidates:
        plans = " ".join(f"kneecap run {n}" for n in (c.run_plan or {}).values())
        pools = c.confirm_pools
        pool_cmds = [cmd for cmd in ((pools.prefill, pools.decode) if pools else ()) if cmd is not None]
        parts.append(
            f"<h2>{e(_replicas(c))} x {c.gpus_per_replica} {e(c.gpu)} ({e(_par(c))})</h2>"
            f"<p>trust: {e(c.trust)}</p>"
            + (f"<p>{e(_quant(c)[2:])}</p>" if _quant(c) else "")
            + f"<pre>{e(c.serve_cmd)}\n{e(c.confirm_cmd)}"
            + "".join(f"\n{e(cmd)}" for cmd in pool_cmds)
            + (f"\n{e(plans)}" if plans else "")
            + "</pre>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(out_dir: Path, doc: Doc) -> None:
    out_dir, doc = Path(out_dir), _typed(doc)
    plots = _plots(out_dir, doc)
    (out_dir / "report.md").write_text(to_markdown(doc, plots))
    (out_dir / "report.html").write_text(to_html(doc, plots))


def _funnel(f: Funnel) -> str:
    return (
        f"{f.considered} considered, {f.do_not_fit} do not fit, {f.ruled_out_by_bound} ruled out by the "
        f"bound (roofline, or step-time model at the steady batch: cannot meet the SLO, or cannot cost less than the "
        f"answer), {f.simulated} simulated, "
        f"{f.checked_at_steady_state} checked at steady state at the stated load, "
        f"{f.represented_by_their_setup} not simulated (another engine setting of their setup stood for them)"
    )
