"""How to confirm a recommended deployment on real hardware, and how far to trust the prediction:
the vLLM launch line for one replica, one `kneecap bench` run against it (half the replica's share of
the load, its share, and the simulated per-replica maximum: one run, three levels), and the simulator's
validation error for the engine and GPU vendor (kneecap/data/validation/baseline.json) where it exists.

Owns strings and the lookup; not the search.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from kneecap.metrics.slo import format_slo
from kneecap.recommend.evaluate import steady_requests
from kneecap.recommend.runplan import level_values, prefill_budget
from kneecap.recommend.space import Knobs, RecommendRequest, slo_limits

BASELINE = Path(__file__).resolve().parents[1] / "data" / "validation" / "baseline.json"


# vLLM's NixlConnector usage guide (docs.vllm.ai/en/stable/features/nixl_connector_usage.html): every prefill and
# decode instance runs with this KV transfer config; a proxy (the guide's toy_proxy_server.py) sends each request
# to a prefiller with max_tokens=1, then to a decoder
CONFIRM_REQUESTS = 300  # requests per confirming bench level, at least
NIXL_KV_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def serve_cmd(req: RecommendRequest, k: Knobs, *, checkpoint_dtype: str, disaggregated: bool = False) -> str:
    """vLLM's own flags for one replica (vllm serve --help: tensor/pipeline parallel size, scheduler limits);
    disaggregated: the same for each prefill and decode instance, with the NIXL KV transfer config.

    DP attention: vLLM's data-parallel deployment (docs.vllm.ai/en/latest/serving/data_parallel_deployment):
    --data-parallel-size tp with --tensor-parallel-size 1 runs attention data parallel, one engine per GPU, and
    --enable-expert-parallel puts the experts expert-parallel over all of them; each engine's --max-num-seqs and
    --max-num-batched-tokens are its own, so the replica's limits / tp (SGLang: --tp N --dp N --enable-dp-attention).

    FP8 weights: `--quantization fp8` only for a 16/32-bit checkpoint, which vLLM then quantizes as it loads
    (docs.vllm.ai, "FP8 W8A8": online dynamic quantization); a checkpoint that ships quantized (`checkpoint_dtype`
    fp8, fp8-block, ...) carries its quantization_config, which vLLM reads itself, and a different --quantization
    is refused (a ModelOpt checkpoint is "modelopt", not "fp8")."""
    dp = k.tp if k.dp_attention else 1  # DP ranks (Deployment.attention_dp), each with its own engine limits
    tp_flag = (
        ["--tensor-parallel-size", "1", "--data-parallel-size", str(k.tp)]
        if k.dp_attention
        else ["--tensor-parallel-size", str(k.tp)]
    )
    parts = [
        "vllm",
        "serve",
        *tp_flag,
        "--pipeline-parallel-size",
        str(k.pp),
        "--max-num-seqs",
        str(k.max_num_seqs // dp),
        "--max-num-batched-tokens",
        str(k.max_num_batched_tokens // dp),
        "--max-model-len",
        str(req.context),
    ]
    if k.kv_dtype.startswith("fp8"):
        parts += ["--kv-cache-dtype", "fp8"]
    if k.weight_dtype == "fp8" and checkpoint_dtype in ("bf16", "fp16", "f16", "fp32", "f32"):
        parts += ["--quantization", "fp8"]
    if not k.prefix_caching:  # vLLM V1 caches prefixes unless told not to (--enable-prefix-caching defaults on)
        parts += ["--no-enable-prefix-caching"]
    if k.ep > 1 or k.dp_attention:  # vLLM: experts over the TP x DP GPUs (EP size = TP x DP)
        parts += ["--enable-expert-parallel"]
    if disaggregated:
        parts += ["--kv-transfer-config", NIXL_KV_CONFIG]
    # a preset names no checkpoint: the user fills in the one they serve
    model = shlex.quote(req.model) if ("/" in req.model or Path(req.model).exists()) else f"<{req.model} checkpoint>"
    if k.spec and req.spec is not None:
        parts += ["--speculative-config", speculative_config(req, k.spec)]
    return " ".join([*parts[:2], model, *(shlex.quote(p) for p in parts[2:])])


def speculative_config(req: RecommendRequest, tokens: int | None = None) -> str:
    """vLLM's --speculative-config JSON for the request's speculative decoding (vLLM's SpeculativeConfig,
    vllm/config/speculative.py: `method`, `num_speculative_tokens`, and `model` for a separate draft). An EAGLE or
    EAGLE-3 head is its own checkpoint, trained for the target: a placeholder names it. MTP uses the checkpoint's own
    MTP layers; n-gram drafts from the prompt (vLLM's prompt_lookup_min/max default to 5)."""
    spec = req.spec_for(tokens) if tokens else req.spec
    doc = {"method": spec.method, "num_speculative_tokens": spec.tokens}
    if spec.method in ("eagle", "eagle3"):
        doc["model"] = f"<{spec.method.upper()} draft head for {req.model}>"
    return json.dumps(doc, separators=(",", ":"))


def _levels(req: RecommendRequest, share: float, max_load: float | None) -> str:
    return ",".join(f"{v:g}" if req.kind == "rate" else str(v) for v in level_values(req.kind, share, max_load))


def confirm_requests(req: RecommendRequest, load: float) -> int:
    """Requests per confirming bench level: enough for its highest level to reach steady state (STEADY_FACTOR x
    the requests in flight by Little's law over the SLO's latency), at least 300."""
    return steady_requests(req, load, CONFIRM_REQUESTS)


def bench_cmd(req: RecommendRequest, share: float, max_load: float | None, *, disaggregated: bool = False) -> str:
    """One bench run against one replica at its share of the load (replicas serve independent shares), or, for
    disaggregated pools, against the proxy in front of them at the whole rate; bench asks the server for its
    model name. With a trace: `--replay TRACE` at the speeds whose mean rates are those levels."""
    if req.trace is not None:  # the trace itself, at the speeds that offer each level's rate on average
        speeds = ",".join(f"{req.trace.speed_for(v):.4g}" for v in level_values(req.kind, share, max_load))
        parts = [
            "kneecap",
            "bench",
            "--base-url",
            "http://127.0.0.1:8000",
            "--replay",
            req.trace.path,
            "--replay-speed",
            speeds,
            "--slo",
            format_slo(req.slo),
            "--seed",
            str(req.seed),
        ]
        return " ".join(shlex.quote(p) for p in parts)
    flag = "--rate" if req.kind == "rate" else "--concurrency"
    parts = [
        "kneecap",
        "bench",
        "--base-url",
        "http://127.0.0.1:8000",
        "--isl",
        str(req.isl),
        "--osl",
        str(req.osl),
        flag,
        _levels(req, share, max_load),
        "--requests",
        str(confirm_requests(req, max(level_values(req.kind, share, max_load)))),
        *(("--burstiness", f"{req.burstiness:g}") if req.kind == "rate" and req.burstiness != 1.0 else ()),
        "--slo",
        format_slo(req.slo),
        "--seed",
        str(req.seed),
    ]
    return " ".join(shlex.quote(p) for p in parts)


def replay_note(req: RecommendRequest, share: float, max_load: float | None) -> str:
    """What the trace-replaying bench line does, and how long it takes: every level sends all the trace's rows."""
    levels = level_values(req.kind, share, max_load)
    seconds = sum(req.trace.rows / v for v in levels)
    return (
        f"bench replays the trace itself (its own arrival times and lengths; the prediction assumed Poisson "
        f"arrivals) at the speeds whose mean rates are this replica's levels ({', '.join(f'{v:g}' for v in levels)} "
        f"requests/s); each level sends all {req.trace.rows} rows, about {seconds / 60:.3g} minutes in all"
    )


def trust(gpu_vendor: str, moe: bool, fp8: bool, engine: str = "vllm") -> str:
    """The simulator's median absolute error on published points for this engine and GPU vendor."""
    try:
        groups = json.loads(BASELINE.read_text()).get("groups", {})
    except (OSError, ValueError):
        return "not validated"
    parts = []
    for group, value, label in (
        ("engine", engine, f"{engine} points"),
        ("GPU vendor", gpu_vendor, f"{gpu_vendor} GPUs"),
        ("MoE", "yes" if moe else "no", "MoE models" if moe else "dense models"),
        ("FP8", "yes" if fp8 else "no", "FP8 points" if fp8 else "non-FP8 points"),
    ):
        err = (groups.get(group) or {}).get(value)
        if err is not None:
            parts.append(f"{label} {err:g}%")
    if not parts:
        return "not validated"
    return "simulator's median absolute error against published measurements: " + ", ".join(parts)


def pool_bench_cmds(req: RecommendRequest, prefill_replicas: int, decode_replicas: int, transfer_ms: float) -> dict:
    """The two bench runs that confirm each pool of a disaggregated candidate on its own:
    prefill: one prefill instance (no KV transfer config needed to measure it), its share of the rate, one output
    token per request, each TTFT limit less the KV transfer; decode: the proxy in front of the whole prefill pool and
    ONE decode instance, at one decode replica's share of the rate, judged on the decode terms (TPOT / ITL)."""
    seed = ["--seed", str(req.seed)]
    pre_share = req.load / prefill_replicas
    pre = [
        "kneecap",
        "bench",
        "--base-url",
        "http://127.0.0.1:8100",
        "--isl",
        str(req.isl),
        "--osl",
        "1",
        "--rate",
        _levels(req, pre_share, None),
        "--requests",
        str(CONFIRM_REQUESTS),
    ]
    budget = prefill_budget(req.slo, transfer_ms)
    if budget:
        pre += ["--slo", format_slo(budget)]
    decode_slo = slo_limits(req.slo, ("tpot", "itl"))
    dec = [
        "kneecap",
        "bench",
        "--base-url",
        "http://127.0.0.1:8000",
        "--isl",
        str(req.isl),
        "--osl",
        str(req.osl),
        "--rate",
        _levels(req, req.load / decode_replicas, None),
        "--requests",
        str(confirm_requests(req, req.load / decode_replicas)),
    ]
    if decode_slo:
        dec += ["--slo", format_slo(decode_slo)]
    return {
        "prefill": " ".join(shlex.quote(p) for p in pre + seed),
        "prefill_note": f"one prefill instance alone, at {pre_share:g} requests/s (the rate / {prefill_replicas})",
        "decode": " ".join(shlex.quote(p) for p in dec + seed),
        "decode_note": (
            f"the proxy in front of all {prefill_replicas} prefill instances and one decode instance, at "
            f"{req.load / decode_replicas:g} requests/s (the rate / {decode_replicas})"
        ),
    }
