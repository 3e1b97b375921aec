"""The recommend report: recommend.json's document -> DIR/report.md and DIR/report.html, with two Pareto
plots (cost per million output tokens vs p99 TTFT; output tokens/s per GPU vs per user) as PNG files.

Owns this page's text and plots only (self-contained, so the other pages can change freely); not the search.
"""

from __future__ import annotations

import html
from pathlib import Path

COLUMNS = ("", "GPU", "tp x pp", "replicas", "weights/KV", "seqs/tokens", "$/h", "$/M output tokens", "TTFT p99 (ms)",
           "TPOT p99 (ms)", "max load per replica", "binding (margin)")


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _rows(doc: dict) -> list[list[str]]:
    rows = []
    for i, c in enumerate(doc["candidates"]):
        mark = ("best " if i == 0 else "") + ("frontier" if c in doc["frontier"] else "")
        margin = "" if c["margin"] is None else f" ({c['margin']:.0%})"
        rows.append([mark.strip(), c["gpu"], f"{c['tp']} x {c['pp']}", str(c["replicas"]), f"{c['weight_dtype']}/{c['kv_dtype']}",
                     f"{c['max_num_seqs']}/{c['max_num_batched_tokens']}", f"{c['cost_per_hour']:.2f}",
                     _f(c["cost_per_mtok_output"], ".3f"), _f(c["predicted"]["ttft_p99_ms"], ".0f"),
                     _f(c["predicted"]["tpot_p99_ms"], ".1f"),
                     ("≥ " if c.get("max_load_at_least") else "") + _f(c["max_load"], ".3g"), c["binding"] + margin])
    return rows


def _plots(out_dir: Path, doc: dict) -> list[tuple[str, str]]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    specs = (("recommend-cost-ttft.png", "cost per million output tokens vs p99 TTFT",
              lambda c: c["predicted"]["ttft_p99_ms"], lambda c: c["cost_per_mtok_output"], "p99 TTFT (ms)",
              "$ per million output tokens", "frontier"),
             ("recommend-throughput.png", "output tokens/s per GPU vs per user",
              lambda c: c["output_tok_s_per_user"], lambda c: c["output_tok_s_per_gpu"],
              "output tokens/s per user (1000 / TPOT p50)", "output tokens/s per GPU", "throughput_frontier"))
    for name, title, fx, fy, xl, yl, key in specs:
        pts = [(fx(c), fy(c), c) for c in doc["candidates"] if fx(c) is not None and fy(c) is not None]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color="0.6", label="sized candidates")
        fr = sorted((fx(c), fy(c)) for c in doc[key] if fx(c) is not None and fy(c) is not None)
        if fr:
            ax.plot([p[0] for p in fr], [p[1] for p in fr], "o-", color="C0", label="Pareto frontier")
        for x, y, c in pts:
            ax.annotate(f"{c['replicas']}x{c['gpus_per_replica']} {c['gpu']} {c['weight_dtype']}/{c['kv_dtype']}", (x, y), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        made.append((name, title))
    return made


def _intro(doc: dict) -> list[str]:
    load = doc["load"]
    unit = "requests/s" if load["kind"] == "rate" else "concurrent streams"
    slo = ", ".join(f"{k} = {v:g}" for k, v in doc["slo"].items())
    lengths = (f"{doc['isl']} input / {doc['osl']} output tokens per request" if not doc.get("classes") else
               f"a mix of {len(doc['classes'])} request classes ({', '.join(c['name'] for c in doc['classes'])}; "
               f"means {doc['isl']} input / {doc['osl']} output tokens)")
    return [f"Model {doc['model']}, {load['value']:g} {unit}, {lengths}; SLO {slo}.",
            f"{doc['evaluated']} candidate deployments: {doc['pruned']} do not fit, {doc['infeasible']} cannot meet the SLO by "
            f"the roofline bound, {doc['over_gpu_limit']} need more GPUs than allowed, {doc['simulated']} were simulated "
            f"(one replica's highest load under the SLO), {doc['sized']} sized and checked at the stated load; "
            f"{doc['seconds']:.0f} s.",
            "Predictions come from kneecap's simulated engine (vLLM scheduling defaults, virtual time; no model was run). "
            "Only aggregated serving is searched (no disaggregated prefill/decode) and expert parallelism is not searched. "
            "Replicas share the load evenly (rate / replicas requests/s each)."]


def to_markdown(doc: dict, plots: list[tuple[str, str]]) -> str:
    lines = ["# kneecap recommend", ""] + [p + "\n" for p in _intro(doc)]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(doc)]
    lines.append("")
    for name, title in plots:
        lines += [f"![{title}]({name})", ""]
    for i, c in enumerate(doc["candidates"][:3]):
        p = c["plan"]
        lines += [f"## {'Best: ' if i == 0 else ''}{c['replicas']} x {c['gpus_per_replica']} {c['gpu']} "
                  f"(tp {c['tp']}, pp {c['pp']}, {c['weight_dtype']} weights, {c['kv_dtype']} KV)", "",
                  f"- ledger per GPU: weights {p['weights_bytes_per_gpu'] / 1e9:.2f} GB, KV pool {p['kv_pool_bytes_per_gpu'] / 1e9:.2f} GB "
                  f"({p['kv_capacity_tokens']:,} tokens), overhead {p['overhead_bytes_per_gpu'] / 1e9:.2f} GB of {p['hbm_bytes_per_gpu'] / 1e9:.2f} GB",
                  f"- predicted at the load ({c['predicted']['per_replica_load']:.4g} per replica): TTFT p99 "
                  f"{_f(c['predicted']['ttft_p99_ms'], '.0f')} ms, TPOT p99 {_f(c['predicted']['tpot_p99_ms'], '.1f')} ms, "
                  f"{_f(c['predicted']['output_tok_s'], '.0f')} output tokens/s in all, KV use up to {_f(c['predicted']['kv_usage_max'], '.0%')}",
                  f"- binding: {c['binding']}" + ("" if c["margin"] is None else f" ({c['margin']:.0%} below its limit)"),
                  "- one replica fewer: " + ("n/a (one replica)" if c["one_fewer_replica"] is None else
                                             ("meets the SLO" if c["one_fewer_replica"]["met"] else
                                              f"fails ({c['one_fewer_replica']['why']})")),
                  f"- trust: {c['trust']}",
                  f"- confirm on one replica: `{c['serve_cmd']}` then `{c['confirm_cmd']}`"
                  + (f" ({c['confirm_note']})" if c.get("confirm_note") else ""), ""]
    lines += ["## Prices", "", "| GPU | $/GPU-hour | source | date |", "|---|---|---|---|"]
    for g, pr in doc["prices"].items():
        lines.append(f"| {g} | {pr['usd_per_gpu_hour']} | {pr['source']} | {pr['date']} |")
    return "\n".join(lines) + "\n"


def to_html(doc: dict, plots: list[tuple[str, str]]) -> str:
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>kneecap recommend</title>"
             "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style></head><body><h1>kneecap recommend</h1>"]
    parts += [f"<p>{e(p)}</p>" for p in _intro(doc)]
    parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>" for r in _rows(doc)]
    parts.append("</table>")
    parts += [f"<figure><img src='{e(n)}' alt='{e(t)}'><figcaption>{e(t)}</figcaption></figure>" for n, t in plots]
    for c in doc["candidates"][:3]:
        parts.append(f"<h2>{c['replicas']} x {c['gpus_per_replica']} {e(c['gpu'])} (tp {c['tp']}, pp {c['pp']})</h2>"
                     f"<p>trust: {e(c['trust'])}</p><pre>{e(c['serve_cmd'])}\n{e(c['confirm_cmd'])}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(out_dir: Path, doc: dict) -> None:
    out_dir = Path(out_dir)
    plots = _plots(out_dir, doc)
    (out_dir / "report.md").write_text(to_markdown(doc, plots))
    (out_dir / "report.html").write_text(to_html(doc, plots))
