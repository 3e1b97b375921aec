"""`kneecap recommend`: model, load, lengths and SLO -> the cheapest deployment meeting the SLO at the load,
the Pareto frontier around it, and the `kneecap bench` run that would confirm each on real hardware.

Thin: parses flags into a RecommendRequest, calls kneecap.recommend.search.recommend, renders a table
(or --json), and with --out writes recommend.json and the report pages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from kneecap.cli.app import app, stdout_console
from kneecap.cli.spec_flags import SpecAcceptanceOpt, SpecMethodOpt, SpecTokensOpt, speculative
from kneecap.errors import KneecapError


DEFAULT_IMAGES = {"nvidia": "vllm/vllm-openai:v0.11.0", "amd": "rocm/vllm:latest"}  # --manifests' defaults: pin yours
PIPE_WIDTH = 1000  # into a pipe or file every column keeps its natural width (rich would squeeze to 80 and cut cells)


def _csv(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip().lower() for v in (value or "").split(",") if v.strip()) or None


def _listed(flag: str, value: str | None, example: str) -> tuple[str, ...] | None:
    """A comma list flag: None when not given; a KneecapError when given but naming nothing (e.g. --gpus ',')."""
    if value is None:
        return None
    names = _csv(value)
    if names is None:
        raise KneecapError(f"{flag} {value!r} lists nothing", f"pass e.g. {flag} {example}, or leave {flag} out")
    return names


def _fmt(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _replicas(c: dict) -> str:
    dis = c.get("disaggregated")
    return f"{dis['prefill_replicas']}P+{dis['decode_replicas']}D" if dis else str(c["replicas"])


def _spec(c: dict) -> str:
    s = c.get("speculative")
    return f"{s['method']} K={s['tokens']}" if s else "-"


def _table(doc: dict):
    from rich.table import Table

    load = doc["load"]
    lengths = "trace means " if doc.get("trace") else "mean " if doc.get("classes") else ""
    t = Table(
        title=f"kneecap recommend — {doc['model']} at {load['kind']} {load['value']:.4g}, {lengths}ISL {doc['isl']} / OSL {doc['osl']} "
        f"(simulated engine, vLLM defaults; {doc['evaluated']} candidates, {doc['pruned']} do not fit, "
        f"{doc['simulated']} simulated, {doc['seconds']:.0f} s)",
        title_justify="left",
    )
    for col in (
        "",
        "GPU",
        "tp x pp",
        "replicas",
        "weights/KV",
        "seqs/tokens",
        "spec",
        "$/h",
        "$/M out tok",
        "TTFT p99 ms",
        "TPOT p99 ms",
        "max/replica",
        "binding (margin)",
    ):
        t.add_column(col)
    front = {id(c) for c in doc["frontier"]}
    for i, c in enumerate(doc["candidates"]):
        mark = ("best" if i == 0 else "") + (" *" if id(c) in front or any(c == f for f in doc["frontier"]) else "")
        margin = "" if c["margin"] is None else f" ({c['margin']:.0%})"
        t.add_row(
            mark.strip(),
            c["gpu"],
            f"{c['tp']}x{c['pp']}"
            + (" dp-attn" if c.get("dp_attention") else f" ep{c['ep']}" if c.get("ep", 1) > 1 else ""),
            _replicas(c),
            f"{c['weight_dtype']}/{c['kv_dtype']}",
            f"{c['max_num_seqs']}/{c['max_num_batched_tokens']}",
            _spec(c),
            f"{c['cost_per_hour']:.2f}",
            _fmt(c["cost_per_mtok_output"], ".3f"),
            _fmt(c["predicted"]["ttft_p99_ms"], ".0f"),
            _fmt(c["predicted"]["tpot_p99_ms"], ".1f"),
            ("≥" if c.get("max_load_at_least") else "") + _fmt(c["max_load"], ".3g"),
            c["binding"] + margin,
        )
    return t


def _write_manifests(
    folder: Path,
    doc: dict,
    model: str,
    image: str | None,
    model_path: str | None,
    model_pvc: str,
    cache_pvc: str | None,
    gpus_per_node: int,
) -> tuple[list[Path], str]:
    """--manifests DIR: one multi-document YAML file per top candidate (the best, then the frontier by cost)."""
    import yaml

    from kneecap.hardware import get_gpu
    from kneecap.recommend.manifests import ManifestOptions, candidate_manifests

    top = [doc["best"]] + [
        c for c in doc["candidates"] if c != doc["best"] and "serve_cmd" in c and any(c == f for f in doc["frontier"])
    ]
    folder.mkdir(parents=True, exist_ok=True)
    hub_id = "/" in model and not Path(model).exists()
    written, used = [], set()
    for rank, cand in enumerate(top, start=1):
        label = get_gpu(cand["gpu"]).label
        img = image or DEFAULT_IMAGES["amd" if "amd" in label.lower() else "nvidia"]
        used.add(img)
        opts = ManifestOptions(
            image=img,
            model=model_path or (model if hub_id else f"/models/{Path(model).name}"),
            model_pvc=model_pvc,
            cache_pvc=cache_pvc,
            gpus_per_node=gpus_per_node,
        )
        objects = candidate_manifests(doc["model"], cand, rank, opts, label)
        path = folder / f"{rank:02d}-{objects[0]['metadata']['name']}.yaml"  # 01-...: the best
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        written.append(path)
    return written, ", ".join(sorted(used))


_GATE_HINT = (
    'write a list of cases, e.g. [{name: capital, prompt: "The capital of France is", expect: {regex: "Paris"}}]'
)


def _behaviour_cases(path: str) -> list[dict]:
    """--behaviour-gate FILE: a YAML/JSON list of behaviour cases (or a load plan's `behaviour:` mapping)."""
    from kneecap.loadplan.schema import behaviour_cases
    from kneecap.list_file import read_list_file

    items = read_list_file(path, "--behaviour-gate", "behaviour", "behaviour cases", _GATE_HINT)
    return behaviour_cases(items, f"--behaviour-gate file {path}", _GATE_HINT)


@app.command("recommend")
def recommend_cmd(
    model: str = typer.Option(..., "--model", help="preset name, config.json / GGUF path, or org/name"),
    rate: Optional[float] = typer.Option(None, "--rate", help="total arrival rate to serve, requests/s"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="total concurrent streams to serve"),
    isl: Optional[int] = typer.Option(None, "--isl", help="input tokens per request"),
    osl: Optional[int] = typer.Option(None, "--osl", help="output tokens per request"),
    classes: Optional[str] = typer.Option(
        None, "--classes", help="a YAML/JSON file of request classes (lengths, weights) instead of --isl/--osl"
    ),
    replay: Optional[str] = typer.Option(
        None,
        "--replay",
        help="a trace as the workload (Mooncake or Qwen-Bailian JSONL, BurstGPT CSV, Weka agentic JSON) instead of --isl/--osl/--classes and --rate: lengths drawn from the trace's own, at its mean arrival rate x --replay-speed; the confirming bench run replays the trace",
    ),
    replay_speed: Optional[float] = typer.Option(
        None,
        "--replay-speed",
        help="with --replay: how much faster than recorded to serve the trace, e.g. 2",
        show_default="1",
    ),
    behaviour_gate: Optional[str] = typer.Option(
        None,
        "--behaviour-gate",
        help="a YAML/JSON list of behaviour cases (name, prompt, expect: exact/regex/json_schema/must_abstain/language, max_tokens), as a `kneecap run` plan's behaviour section: deployments storing weights or KV cache in fewer bits than the checkpoint carry them in their run plans, which reject a deployment whose answers change (without it, such deployments are marked behaviour unchecked)",
    ),
    slo: str = typer.Option(..., "--slo", help="e.g. ttft_p99_ms=2000,tpot_p99_ms=50"),
    gpus: Optional[str] = typer.Option(
        None, "--gpus", help="candidate GPUs, e.g. h100-sxm,a100-80 (default: every priced GPU)"
    ),
    max_gpus: Optional[int] = typer.Option(
        None, "--max-gpus", help="at most this many GPUs in all (replicas x GPUs per replica)"
    ),
    prices: Optional[str] = typer.Option(
        None, "--prices", help="JSON {gpu: dollars per GPU-hour} replacing the shipped table"
    ),
    weight_dtypes: Optional[str] = typer.Option(
        None, "--weight-dtypes", help="weight dtypes to try (default bf16,fp8)"
    ),
    kv_dtypes: Optional[str] = typer.Option(None, "--kv-dtypes", help="KV cache dtypes to try (default bf16,fp8)"),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        help="run the candidate evaluations as Ray tasks on a cluster: auto (RAY_ADDRESS), local, or the head's HOST:PORT; the same answer as without it; needs pip install 'kneecap[ray]'",
    ),
    workers: Optional[int] = typer.Option(
        None, "--workers", help="processes to simulate on (default: the CPU count; results do not depend on it)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the simulated arrivals"),
    burstiness: float = typer.Option(
        1.0,
        "--burstiness",
        help="with --rate: gamma shape of the arrival gaps the simulated levels assume: 1 Poisson, <1 burstier, >1 more regular",
    ),
    router: str = typer.Option(
        "round-robin",
        "--router",
        help="the router in front of the replicas: round-robin, least-loaded, or prefix (llm-d's prefix-cache-aware endpoint picker); other than round-robin, or with --shared-prefix, the sizing check simulates the replicas through it at the whole load",
    ),
    shared_prefix: Optional[str] = typer.Option(
        None,
        "--shared-prefix",
        help="TOKENS or TOKENSxGROUPS: each prompt starts with one of GROUPS shared prefixes of TOKENS tokens (system prompts, agents)",
    ),
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    spec_acceptance: SpecAcceptanceOpt = None,
    json_out: bool = typer.Option(False, "--json", help="print recommend.json on stdout, nothing else"),
    out: Optional[str] = typer.Option(None, "--out", help="write recommend.json, report.md and report.html into DIR"),
    manifests: Optional[str] = typer.Option(
        None,
        "--manifests",
        help="write Kubernetes manifests for the best candidate and the frontier into DIR: a Deployment (a LeaderWorkerSet where a replica spans nodes; a Deployment per pool, labelled for llm-d, for prefill/decode pools) and a Service, running each candidate's vllm serve command",
    ),
    manifest_image: Optional[str] = typer.Option(
        None,
        "--manifest-image",
        help=f"with --manifests: the serving image (default {DEFAULT_IMAGES['nvidia']} on NVIDIA GPUs, {DEFAULT_IMAGES['amd']} on AMD)",
    ),
    manifest_model: Optional[str] = typer.Option(
        None,
        "--manifest-model",
        help="with --manifests: the path or hub id vllm serve loads (default: an org/name --model as given, else /models/NAME on the model volume)",
    ),
    manifest_model_pvc: str = typer.Option(
        "models",
        "--manifest-model-pvc",
        help="with --manifests: the PersistentVolumeClaim holding the weights, mounted at /models",
    ),
    manifest_cache_pvc: Optional[str] = typer.Option(
        None,
        "--manifest-cache-pvc",
        help="with --manifests: a PersistentVolumeClaim for the Hugging Face and compile caches at /root/.cache (default: an emptyDir)",
    ),
    gpus_per_node: int = typer.Option(
        8,
        "--manifest-gpus-per-node",
        help="with --manifests: GPUs on one node; a replica needing more runs as a LeaderWorkerSet over several nodes",
    ),
) -> None:
    """The cheapest deployment that meets the SLO at the load, with the experiment that would confirm it."""
    from kneecap.hardware import get_gpu
    from kneecap.metrics.slo import parse_slo
    from kneecap.recommend.prices import load_prices
    from kneecap.recommend.search import funnel_text, recommend
    from kneecap.recommend.space import DEFAULT_KV_DTYPES, DEFAULT_WEIGHT_DTYPES, RecommendRequest

    if gpus_per_node < 1:
        raise KneecapError(f"--manifest-gpus-per-node must be >= 1, got {gpus_per_node}", "pass e.g. 8")
    mix = trace = None
    cases = _behaviour_cases(behaviour_gate) if behaviour_gate is not None else None
    if replay is not None:
        given = [
            f
            for f, v in (
                ("--isl", isl),
                ("--osl", osl),
                ("--classes", classes),
                ("--rate", rate),
                ("--concurrency", concurrency),
            )
            if v is not None
        ]
        if given:
            raise KneecapError(
                f"--replay and {'/'.join(given)} both given",
                "drop "
                + "/".join(given)
                + ": the trace states its own lengths and rate (--replay-speed scales the rate)",
            )
        from kneecap.recommend.classes import mean_lengths
        from kneecap.recommend.trace import trace_load

        trace = trace_load(replay, 1.0 if replay_speed is None else replay_speed)
        mix = trace.workload
        isl, osl = mean_lengths(mix)
        rate = trace.rate
    elif replay_speed is not None:
        raise KneecapError("--replay-speed scales a replayed trace's rate", "pass --replay TRACE with it")
    elif classes is not None:
        if isl is not None or osl is not None:
            raise KneecapError(
                "--classes and --isl/--osl both given", "pass one: the class file states its own lengths"
            )
        from kneecap.recommend.classes import load_classes, mean_lengths

        mix = load_classes(classes)
        isl, osl = mean_lengths(mix)
    elif isl is None or osl is None:
        raise KneecapError(
            "recommend needs --isl and --osl (or --classes FILE, or --replay TRACE)", "pass e.g. --isl 1000 --osl 200"
        )
    if ray is not None:
        from kneecap.cluster.connect import check_reachable, require_ray

        require_ray()
        check_reachable(ray)
    if (rate is None) == (concurrency is None):
        raise KneecapError(
            "recommend needs exactly one of --rate and --concurrency", "pass e.g. --rate 20 or --concurrency 64"
        )
    if workers is not None and workers < 1:
        raise KneecapError(f"--workers must be >= 1, got {workers}", "pass e.g. --workers 2")
    table = load_prices(prices)
    from kneecap.sweep.options import parse_shared_prefix

    prefix_tokens, prefix_groups = parse_shared_prefix(shared_prefix)
    gpu_names = _listed("--gpus", gpus, "h100-sxm,a100-80")
    if gpu_names:
        names = tuple(dict.fromkeys(get_gpu(g).name for g in gpu_names))
        unpriced = [g for g in names if g not in table or table[g].usd_per_gpu_hour is None]
        if unpriced:
            raise KneecapError(
                f"no price for {', '.join(unpriced)}",
                'pass --prices FILE with e.g. {"'
                + unpriced[0]
                + '": 2.50} (dollars per GPU-hour), or drop it from --gpus',
            )
        unpriced_default = []
    else:
        names = tuple(g for g, p in table.items() if p.usd_per_gpu_hour is not None)
        unpriced_default = [g for g, p in table.items() if p.usd_per_gpu_hour is None]
    req = RecommendRequest(
        model=model,
        kind="rate" if rate is not None else "concurrency",
        load=float(rate) if rate is not None else int(concurrency),
        isl=isl,
        osl=osl,
        slo=parse_slo(slo),
        gpus=names,
        max_gpus=max_gpus,
        weight_dtypes=_listed("--weight-dtypes", weight_dtypes, "bf16,fp8") or DEFAULT_WEIGHT_DTYPES,
        kv_dtypes=_listed("--kv-dtypes", kv_dtypes, "bf16,fp8") or DEFAULT_KV_DTYPES,
        seed=seed,
        mix=mix,
        trace=trace,
        burstiness=burstiness,
        router=router,
        shared_prefix_tokens=prefix_tokens,
        num_prefix_groups=prefix_groups,
        spec=speculative(spec_method, spec_tokens, spec_acceptance),
    )
    n = workers or max(1, os.cpu_count() or 1)
    doc = recommend(req, table, workers=n, ray=ray)
    doc["unpriced_gpus"] = [{"gpu": g, "note": table[g].note or "no price"} for g in unpriced_default]
    if cases:
        from kneecap.recommend.gate import mark

        mark(doc, cases, behaviour_gate)
    if out:
        from kneecap.recommend.runplan import write_run_plans
        from kneecap.report.recommend_page import write_report

        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        write_run_plans(d, req, doc, cases)
        (d / "recommend.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        write_report(d, doc)
    written, written_image = [], None
    if manifests:
        written, written_image = _write_manifests(
            Path(manifests),
            doc,
            model,
            manifest_image,
            manifest_model,
            manifest_model_pvc,
            manifest_cache_pvc,
            gpus_per_node,
        )
    if json_out:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return
    console = stdout_console(PIPE_WIDTH)
    if trace is not None:
        console.print("workload " + trace.describe() + "; " + doc["trace"]["model"], soft_wrap=True)
    console.print(_table(doc))
    console.print(f"assumed arrivals: {doc['arrivals']}; {doc['search']['steady_state']}", soft_wrap=True)
    console.print(f"search: {funnel_text(doc)}; {doc['seconds']:.0f} s", soft_wrap=True)
    if doc.get("speculative"):
        s = doc["speculative"]
        given = (
            f"acceptance {','.join(f'{a:g}' for a in s['acceptance_assumed'])} per draft position"
            if s["acceptance_assumed"]
            else f"{s['accepted_lengths_assumed']} accepted lengths given"
        )
        console.print(
            f"assumed speculative decoding: {s['method']}, K={s['tokens']}, {given} "
            f"({s['expected_tokens_per_step']:.2f} tokens per step), tried on and off for every candidate; "
            "measure the acceptance on your traffic",
            soft_wrap=True,
        )
    if doc["unpriced_gpus"]:
        console.print(
            "skipped for lack of a price (pass --prices FILE to include them): "
            + ", ".join(u["gpu"] for u in doc["unpriced_gpus"]),
            soft_wrap=True,
        )
    best = doc["best"]
    console.print(
        f"best: {best['replicas']} x {best['gpus_per_replica']} {best['gpu']} (tp {best['tp']}, pp {best['pp']}), "
        f"${best['cost_per_hour']:.2f}/h; {best['trust']}"
    )
    console.print(
        f"confirm {'each instance' if best['disaggregated'] else 'one replica'}: {best['serve_cmd']}", soft_wrap=True
    )
    console.print(f"  then: {best['confirm_cmd']}", soft_wrap=True)
    for pool in ("prefill", "decode"):
        if (best.get("confirm_pools") or {}).get(pool):
            console.print(f"  {pool} pool alone: {best['confirm_pools'][pool]}", soft_wrap=True)
    if best.get("needs_behaviour_gate"):
        console.print(
            f"best stores its {' and '.join(best['quantized_below_checkpoint'])} below the checkpoint's dtype: "
            "its run plan checks the behaviour cases first",
            soft_wrap=True,
        )
    elif best.get("behaviour_unchecked"):
        console.print(
            f"best stores its {' and '.join(best['quantized_below_checkpoint'])} below the checkpoint's dtype; "
            "this answer assumes its output is acceptable (pass --behaviour-gate FILE to check it)",
            soft_wrap=True,
        )
    if best.get("run_plan"):
        console.print(f"  or: kneecap run {Path(out) / best['run_plan']['server']}", soft_wrap=True)
    if out:
        console.print(f"wrote {Path(out) / 'recommend.json'}, report.md, report.html")
    if manifests:
        console.print(
            f"wrote {len(written)} Kubernetes manifest files into {manifests} (image {written_image})", soft_wrap=True
        )
