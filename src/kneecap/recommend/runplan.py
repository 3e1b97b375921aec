"""The `kneecap run` load plan that would confirm a recommended candidate: one request class per workload
class (the ISL/OSL pair, or each class of a --classes mix, ramped on its own as `kneecap run` does), the SLO
as every class's budget, the load raised one step at a time (half the candidate's share, its share, and the
simulated maximum) with the share as the required load.

Two plans per aggregated candidate (tensor, expert or DP-attention parallel alike): against the real server
(base URL http://127.0.0.1:8000, the replica started with the candidate's `vllm serve` line), and the same plan
on kneecap's simulated engine with the candidate's own settings (what recommend predicted).

A disaggregated candidate has no simulated twin of the whole (the load-plan simulator target has no prefill/decode
pools); it gets the plan against the proxy in front of both pools at the whole rate, and the prefill pool's own
check: one prefill instance at its share of the rate with one output token per request (its TTFT is the prompt's
prefill), each TTFT budget less the KV transfer, against the real instance and on the simulated engine. The decode
pool cannot run alone (its prompts' KV comes from a prefill instance): its check is the bench line through the
proxy (search.py's confirm_pools). Owns the plans' content and their files (write_run_plans); the schema is
kneecap.loadplan.schema's.
"""

from __future__ import annotations

from pathlib import Path

from kneecap.recommend.space import ENGINE_DEFAULTS, RecommendRequest
from kneecap.workload import LENGTH_PARAMS

# the budgets kneecap.loadplan.schema.Budget holds (a sibling layer: not imported; a test checks they agree)
BUDGET_METRICS = ("ttft", "itl", "tpot", "e2e")
BUDGET_PCTS = ("p50", "p95", "p99")

BASE_URL = "http://127.0.0.1:8000"
REQUESTS_PER_CELL = 300


def _length(d: dict) -> dict:
    """A workload LengthDist (as recommend.json's classes hold it) -> the plan's LengthSpec."""
    kind = d["kind"]
    if kind == "empirical" and d.get("file"):  # a trace's lengths: the file written beside the plan
        return {"kind": kind, "file": d["file"]}
    out = {"kind": kind}
    for key in LENGTH_PARAMS[kind]:
        out[key] = list(d[key]) if key == "values" else d[key]
    if d.get("min_value", 1) != 1:
        out["min"] = d["min_value"]
    if d.get("max_value") is not None:
        out["max"] = d["max_value"]
    return out


def level_values(kind: str, share: float, max_load: float | None) -> list:
    """The confirming loads: half the share, the share, and the simulated maximum when above it."""
    if kind == "rate":
        vals = sorted(
            {round(share / 2, 3), round(share, 3)} | ({round(max_load, 3)} if max_load and max_load > share else set())
        )
        return [v for v in vals if v > 0]
    return sorted({max(1, int(share) // 2), int(share)} | ({int(max_load)} if max_load and max_load > share else set()))


def _budget(slo: dict) -> tuple[dict, list[str]]:
    """The SLO keys a load-plan budget can hold (ttft/itl/tpot/e2e at p50/p95/p99, error_rate); the rest named."""
    allowed = {f"{m}_{p}_ms" for m in BUDGET_METRICS for p in BUDGET_PCTS} | {"error_rate"}
    return {k: v for k, v in slo.items() if k in allowed}, [k for k in slo if k not in allowed]


def _target(req: RecommendRequest, cand: dict) -> dict:
    """The load plan's simulator target with the candidate's own settings (every field kneecap.plan.build takes)."""
    return {
        "kind": "simulator",
        "model": req.model,
        "gpu": cand["gpu"],
        "tp": cand["tp"],
        "pp": cand["pp"],
        "ep": cand.get("ep", 1),
        "dp_attention": bool(cand.get("dp_attention", False)),
        "weight_dtype": cand["weight_dtype"],
        "kv_dtype": cand["kv_dtype"],
        "engine_defaults": ENGINE_DEFAULTS,
        "max_num_seqs": cand["max_num_seqs"],
        "max_num_batched_tokens": cand["max_num_batched_tokens"],
        "prefix_caching": bool(cand.get("prefix_caching", True)),
        **_spec_fields(req, cand),
    }


SPEC_LENGTHS_FILE = "spec-accepted-lengths.txt"  # beside the plans: the accepted lengths a candidate assumed


def _spec_fields(req: RecommendRequest, cand: dict) -> dict:
    """A speculating candidate's speculative decoding as the simulator target takes it: its method, K and the
    acceptance assumed (rates, or the accepted lengths file written beside the plans)."""
    spec = req.spec_for((cand.get("speculative") or {}).get("tokens") or 0)
    if spec is None:
        return {}
    acceptance = list(spec.acceptance) if spec.acceptance else SPEC_LENGTHS_FILE
    return {"spec_method": spec.method, "spec_tokens": spec.tokens, "spec_acceptance": acceptance}


def prefill_budget(slo: dict, transfer_ms: float) -> dict:
    """The prefill pool's share of the SLO: each TTFT limit less the KV transfer, and the error rate."""
    budget, _ = _budget(dict(slo))
    out = {k: round(v - transfer_ms, 1) for k, v in budget.items() if k.startswith("ttft_")}
    if "error_rate" in budget:
        out["error_rate"] = budget["error_rate"]
    return out


def _prefill_plans(req: RecommendRequest, base: dict, cand: dict, name: str, cost: dict) -> dict[str, dict]:
    dis = cand["disaggregated"]
    share = req.load / dis["prefill_replicas"]
    classes = {c: dict(spec, output={"kind": "fixed", "value": 1}) for c, spec in base["classes"].items()}
    budget = prefill_budget(req.slo, dis["kv_transfer_ms"])
    steps = level_values("rate", share, dis.get("prefill_max_rate"))
    desc = (
        f"Confirms the prefill pool of kneecap recommend's {dis['prefill_replicas']}P{dis['decode_replicas']}D "
        f"{cand['gpu']} deployment for {req.model}: one prefill instance at its share of the rate ({share:g} requests/s), "
        f"one output token per request, each TTFT budget less the {dis['kv_transfer_ms']:g} ms KV transfer."
    )
    plan = dict(
        base,
        name=name + "-prefill",
        description=desc,
        classes=classes,
        slo={c: dict(budget) for c in classes},
        load={"dimension": "rate", "steps": steps, "requests_per_cell": REQUESTS_PER_CELL, "required": share},
    )
    one = dict(cost, num_gpus=cand["gpus_per_replica"])
    return {
        "prefill": dict(
            plan, candidates=[{"name": "prefill", "target": {"kind": "server", "base_url": BASE_URL}, "cost": one}]
        ),
        "prefill-simulated": dict(
            plan,
            name=name + "-prefill-simulated",
            candidates=[{"name": "prefill-simulated", "target": _target(req, cand), "cost": one}],
        ),
    }


def run_plans(
    req: RecommendRequest, doc: dict, cand: dict, name: str, behaviour: list[dict] | None = None
) -> dict[str, dict]:
    """{"server": plan, "simulated": plan} for an aggregated candidate of recommend.json; {"server", "prefill",
    "prefill-simulated"} for a disaggregated one. A candidate marked needs_behaviour_gate carries `behaviour` (cases
    in the load plan's own shape) as its plans' behaviour gate, which `kneecap run` checks before any load."""
    dis = cand.get("disaggregated")
    share = req.load if dis else cand["predicted"]["per_replica_load"]
    if doc.get("classes"):
        classes = {
            c["name"]: {"input": _length(c["input"]), "output": _length(c["output"]), "weight": c["weight"]}
            for c in doc["classes"]
        }
    else:
        classes = {
            "requests": {"input": {"kind": "fixed", "value": req.isl}, "output": {"kind": "fixed", "value": req.osl}}
        }
    budget, dropped = _budget(dict(req.slo))
    where = (
        f"{dis['prefill_replicas']} prefill + {dis['decode_replicas']} decode replicas behind one proxy, at the whole rate"
        if dis
        else f"one replica at its share of the load ({share:g} {'requests/s' if req.kind == 'rate' else 'streams'})"
    )
    par = (f", ep {cand['ep']}" if cand.get("ep", 1) > 1 else "") + (
        ", DP attention" if cand.get("dp_attention") else ""
    )
    desc = (
        f"Confirms kneecap recommend's {cand['replicas']} x {cand['gpus_per_replica']} {cand['gpu']} (tp {cand['tp']}, "
        f"pp {cand['pp']}{par}, {cand['weight_dtype']} weights, {cand['kv_dtype']} KV, max_num_seqs {cand['max_num_seqs']}, "
        f"max_num_batched_tokens {cand['max_num_batched_tokens']}) for {req.model}: {where}."
    )
    if len(classes) > 1:
        desc += " Each class is ramped on its own (kneecap run's cells), not as the mix."
    if dropped:
        desc += f" SLO terms a load-plan budget cannot hold are left out: {', '.join(dropped)}."
    gate = list(behaviour or []) if cand.get("needs_behaviour_gate") else []
    if gate:
        desc += (
            f" Its {' and '.join(cand['quantized_below_checkpoint'])} are quantized below the checkpoint: the "
            f"behaviour cases are checked first and a changed answer rejects it."
        )
    if req.trace is not None:
        desc += f" Lengths drawn from trace {req.trace.path} (files beside this plan)."
    base = {
        "name": name,
        "description": desc,
        "seed": req.seed,
        "classes": classes,
        "slo": {c: dict(budget) for c in classes},
        "load": {
            "dimension": req.kind,
            "steps": level_values(req.kind, share, None if dis else cand.get("max_load")),
            "requests_per_cell": REQUESTS_PER_CELL,
            "required": share,
        },
        "repetitions": 1,
    }
    if gate:
        base["behaviour"] = gate
    cost = {
        "gpu_hour_usd": cand["usd_per_gpu_hour"],
        "num_gpus": cand["total_gpus"] if dis else cand["gpus_per_replica"],
    }
    server = dict(
        base, candidates=[{"name": "server", "target": {"kind": "server", "base_url": BASE_URL}, "cost": cost}]
    )
    out = {"server": server}
    if dis:
        out.update(_prefill_plans(req, base, cand, name, cost))
    else:
        out["simulated"] = dict(
            base,
            name=name + "-simulated",
            candidates=[{"name": "simulated", "target": _target(req, cand), "cost": cost}],
        )
    return out


def write_run_plans(d: Path, req: RecommendRequest, doc: dict, behaviour: list[dict] | None = None) -> None:
    """run_plans of every sized candidate as DIR/confirm-N.yaml (the server plan) and DIR/confirm-N-KIND.yaml; each
    candidate names its files under run_plan."""
    import yaml

    if req.trace is not None:  # the plans' empirical lengths read these files
        from kneecap.recommend.trace import write_length_files

        write_length_files(d, req.trace)
    if req.spec is not None and req.spec.accepted_lengths:
        (d / SPEC_LENGTHS_FILE).write_text("".join(f"{n}\n" for n in req.spec.accepted_lengths))
    for i, cand in enumerate(doc["candidates"]):
        names = {}
        for kind, plan in run_plans(req, doc, cand, f"confirm-{i + 1}", behaviour).items():
            fname = f"confirm-{i + 1}.yaml" if kind == "server" else f"confirm-{i + 1}-{kind}.yaml"
            (d / fname).write_text(f"# kneecap run {fname}\n" + yaml.safe_dump(plan, sort_keys=False, width=120))
            names[kind] = fname
        cand["run_plan"] = names
