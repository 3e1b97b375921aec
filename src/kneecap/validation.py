"""Validation: the simulated engine against published serving measurements (data/validation/points.json).

Owns reading the published points, running the simulator on each configuration (the same Plan -> Engine path
as `kneecap simulate`, default step-time factors, nothing fitted to these points), the error table, the
median and per-group medians, the committed baseline (data/validation/baseline.json) and the markdown block
of docs/validation.md. Does not fetch anything: every number comes from points.json, which names its source.

A point whose setup needs a knob the simulator does not have (its `not_simulated` reason in points.json, e.g.
inter-node links) is kept in the table as "not simulated: <why>", never dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.workload.endpoints import CHAT, COMPLETIONS, ENDPOINTS

DATA_DIR = Path(__file__).parent / "data" / "validation"
POINTS_FILE = DATA_DIR / "points.json"
BASELINE_FILE = DATA_DIR / "baseline.json"
DOC_FILE = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
TABLE_BEGIN = "<!-- BEGIN GENERATED TABLE (python -m kneecap.validation --write) -->"
TABLE_END = "<!-- END GENERATED TABLE -->"
_FIX = "fix src/kneecap/data/validation/points.json"

# metric -> (label, how the published value converts to the simulator's summary: (summary key, stat, factor))
METRICS: dict[str, tuple[str, str, str | None, float]] = {
    "output_tok_s": ("output tok/s", "output_tok_s", None, 1.0),
    "output_tok_s_per_gpu": ("output tok/s per GPU", "output_tok_s", None, 1.0),  # divided by the GPU count
    "ttft_ms_p50": ("TTFT p50 (ms)", "ttft_ms", "p50", 1.0),
    "ttft_ms_mean": ("TTFT mean (ms)", "ttft_ms", "mean", 1.0),
    "ttft_s_p50": ("TTFT p50 (s)", "ttft_ms", "p50", 1e-3),
    "tpot_ms_p50": ("TPOT p50 (ms)", "tpot_ms", "p50", 1.0),
    "tpot_ms_mean": ("TPOT mean (ms)", "tpot_ms", "mean", 1.0),
    "itl_ms_mean": ("ITL mean (ms)", "itl_ms", "mean", 1.0),
    "itl_s_p50": ("ITL p50 (s)", "itl_ms", "p50", 1e-3),
    "e2e_ms_mean": ("request latency mean (ms)", "e2e_ms", "mean", 1.0),
    "decode_tok_s": ("decode tok/s (1000 / TPOT)", "tpot_ms", "mean", -1.0),  # 1000 / TPOT mean
    "prefill_tok_s": ("prefill tok/s (ISL / TTFT)", "ttft_ms", "mean", -1.0),  # ISL x 1000 / TTFT mean
}

# Published engine -> the simulated scheduler and KV pool it is run with. Stated in docs/validation.md.
ENGINES: dict[str, str] = {
    "vllm": "kneecap's vLLM defaults for the GPU (max_num_seqs / max_num_batched_tokens by GPU memory, chunked "
    "prefill, prefix caching) and vLLM's own KV-pool model at the point's release (`--engine vllm --engine-version`, "
    "gpu_memory_utilization the release's default (0.9 through 0.19, 0.92 from 0.20) unless the point states one; a V0 point without a release number: the default "
    "release's); a point whose engine is vLLM V0 (releases before 0.8) runs with V0's profile "
    "(max_num_seqs 256, 4 ms of CPU per step between steps), and one from 0.14 on with its default asynchronous scheduling "
    "(the next step's CPU work overlaps the GPU's); a point whose client sent through /v1/chat/completions runs with "
    "`--endpoint chat`: the API server's event loop prepares each request's chat template before the engine sees it "
    "(0.11.0 parses the template afresh for every request, priced as measured on a 2-core build VM; docs/simulator.md)",
    "sglang": "kneecap's SGLang defaults (chunked_prefill_size by GPU memory, max_running_requests from the pool, "
    "new-token-ratio admission reserve) and SGLang's KV-pool model at the point's release (`--engine sglang "
    "--engine-version`, mem_fraction_static as the point states it, else the one that release picks itself for the GPU "
    "and TP)",
    "tensorrt-llm": "TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler (admit a request only if the pool "
    "holds it to its last token), max_batch_size 2048 and max_num_tokens 8192 unless the point states them; a "
    "`trtllm-bench throughput` run takes the limits trtllm-bench computes from the model, the GPUs' memory "
    "and ISL/OSL (tensorrt_llm/bench/build/tuning.py); KV pool = TensorRT-LLM's own rule, as `--engine-defaults trtllm` "
    "prices it: 0.9 of the memory free once the model is loaded (the default kv_cache_free_gpu_mem_fraction; NVIDIA's "
    "overview says it used 0.95 in many cases, which the rows do not say), over the device total the CUDA runtime "
    "reports, less the weights and the ledger's 4 GiB overhead; TensorRT-LLM's engine "
    "profile (its overlap scheduler hides the per-step CPU time under the GPU's): the PyTorch executor's "
    "host time per running request (28 us) for releases from 0.17 on and unversioned runs, none for the "
    "C++-runtime releases before 0.17; with pipeline parallelism the PyTorch executor's ranks before the last wait "
    "for their own stage before the next micro-batch's host work (py_executor.py _forward_step_inter_pp), so a stage "
    "lasts its GPU time plus that host time; prefills run whole in one step (enable_chunked_prefill defaults to "
    "False in the LLM API and trtllm-serve) except in `trtllm-bench` runs, which chunk them: its --enable_chunked_context "
    "defaults to True (tensorrt_llm/bench/benchmark/throughput.py; it was off for the PyTorch backend in "
    "some 2025 releases, NVIDIA/TensorRT-LLM#6956), and the overview's 5,000-token prompts exceed the "
    "max_num_tokens trtllm-bench computes for them, which TensorRT-LLM accepts only with chunking",
    "nim": "NVIDIA NIM's TensorRT-LLM profiles (`--engine-defaults nim`): run as tensorrt-llm above (its KV pool rule "
    "included), with the C++ runtime's profile; the FP8 profile's KV cache in fp8, as NVIDIA's FP8 checkpoints ship it",
    "llama.cpp": "`--engine-defaults llamacpp`: one sequence at a time (llama-bench runs one), n_batch 2048 tokens per "
    "step; KV pool = the ledger; "
    "f16 weights multiplied by cuBLAS with fp16 accumulation (ggml-cuda.cu: CUBLAS_COMPUTE_16F), which GeForce parts "
    "run at twice the fp32-accumulate rate",
}
GROUPS = (
    "engine",
    "GPU vendor",
    "GPU generation",
    "architecture",
    "parallelism",
    "PP > 1",
    "MoE",
    "MLA",
    "FP8",
    "FP4",
    "dtype",
    "ISL band",
    "OSL band",
    "concurrency band",
    "metric",
)
REGRESSION_POINTS = 2.0  # the regression test fails if a median worsens by more than this many points
BIAS_LIMIT_PCT = 8.0  # a group of BIAS_MIN_POINTS or more whose signed median is beyond this is biased
BIAS_MIN_POINTS = 5
# Groups still biased beyond +-BIAS_LIMIT_PCT, each with its signed median as last measured and what drives it. The
# bias check (bias_failures) holds these strictly: a group not listed that goes beyond the limit fails, a listed one
# that moves further out than its figure by more than BIAS_SLACK_POINTS fails, and a listed one that comes back inside
# the limit fails too until it is taken off this list (as a strict xfail does).
BIAS_SLACK_POINTS = 0.5
# The points that drive most of the biases below (their median figures as last measured).
_GPUSTACK = (
    "GPUStack's vLLM 0.10.2/0.11.0 baseline runs of 100-1,000 random prompts sent at once (gpt-oss-120b on one H100 "
    "and on one A100, gpt-oss-20b on one A100, Qwen3-235B-A22B on 8 H100s and on 8 A100s, DeepSeek-R1 on 8 H200s) "
    "and gpt-oss-120b's ShareGPT runs at 4 requests in flight on the same H100 and A100, "
    "on most of which the simulator is too fast (in the median of those 76 points TTFT 10% short, TPOT 14% "
    "short, output tok/s +17%; the 128-token prompts' mean TTFTs are 2.8-19.4 s published, 2.1-15.9 s simulated, "
    "vLLM 0.11.0's per-request chat-template parse and gpt-oss's openai-harmony render priced at this project's "
    "build machine's measurements; "
    "docs/validation.md, 'Reading the table', says what their pages show)"
)
_GS = "GPUStack's vLLM 0.10/0.11 points (engine = vllm)"  # the same 76 points, named again
_DEEPSEEK_TRTLLM = (
    "TensorRT-LLM 0.21's DeepSeek-R1 points at TP 8: TTFT 57-72% short at C <= 8 and H200 single-stream ITL 21-39% "
    "short; the published TTFTs grow 53 us per prompt token on an H200, twice the simulated slope, with a fixed ~145 "
    "ms no modelled mechanism accounts for (the source reports slow TTFTs in that release)"
)
KNOWN_BIASED: dict[str, tuple[float, str]] = {
    "engine = vllm": (10.4, f"76 of its 108 points are {_GPUSTACK}; without them +3.1%"),
    "GPU generation = Ampere": (
        30.1,
        f"38 of its 44 points are {_GS}; without them -0.8%. gpt-oss-120b on one A100 now keeps the KV pool vLLM "
        "0.11.0's profile run leaves it (its sampler's 1.84 GiB peak at 256 sequences, where a 4 GiB guess stood: "
        "3.55 GiB of pool, was 1.40), which holds more prompts at once and shows its prompts running far faster "
        "than published (TTFT 40-62% short), while the same page's ShareGPT run at 4 requests in flight is 18% short on TPOT, as the H100 page's is 12.5%: the gap is in the prompts; kneecap has no Marlin ceiling for the A100 (the H100's 0.257 of peak was measured there), and no published timing of vLLM's Marlin MXFP4 experts or Triton sink "
        "attention on an A100 was found to price them",
    ),
    "architecture = MoE": (
        16.6,
        f"64 of its 91 points are {_GS}; the same lab's gpt-oss-20b on one H100 (vLLM 0.11, 8 points: TTFT "
        "2-34% short, output tok/s 7-32% high) and TensorRT-LLM's attention-DP rows (Qwen3-235B-A22B 1000/1000 on 8 "
        "H100s, B200s and H200s with their published 3,000 requests: +59.3%, +59.5%, +38.1%; Qwen3-30B-A3B on two RTX "
        "PRO 6000s +22.4%) add to it; without the 64 +13.4%, without every GPUStack point +10.3%, without those and "
        "the TensorRT-LLM Qwen3-235B-A22B and DeepSeek-R1 rows +3.5%",
    ),
    "parallelism = EP > 1": (
        21.0,
        "4 of its 8 points are TensorRT-LLM's attention-DP trtllm-bench rows (Qwen3-235B-A22B on 8 H100s +59.3%, 8 "
        "B200s +59.5%, 8 H200s +38.1%; Qwen3-30B-A3B on two RTX PRO 6000s +22.4%): with each rank's own batch limits "
        "(py_executor.py: tp_size x max_num_active_requests) they run up to 1,604 sequences at once on 8 H100s (the "
        "row's command, 'running max'), about 108 ms per token each at the published rate and 68 ms at the simulated "
        "one; none of communication, "
        "KV pool or host time accounts for it (TensorRT-LLM's expert kernels split over 8 GPUs, uneven routing and "
        "per-step rank synchronisation are not modelled); without those four -4.5% over the other four, which are "
        f"{_DEEPSEEK_TRTLLM.split(':')[0]} (two ITLs) and SGLang's DeepSeek-R1 on 8 B200s",
    ),
    "MoE = yes": (
        12.9,
        f"76 of its 130 points are {_GS}; the rest is the DeepSeek-R1 TensorRT-LLM points (MLA), "
        "the same lab's gpt-oss-20b H100 points and TensorRT-LLM's attention-DP rows (architecture = MoE); "
        "without the 76 +11.1%, without every GPUStack point +8.2%, without those and the DeepSeek-R1 and "
        "Qwen3-235B-A22B TensorRT-LLM rows +0.6%",
    ),
    "FP8 = no": (10.9, f"64 of its 104 points are {_GS}; without them +0.0%"),
    "FP4 = yes": (12.2, f"40 of its 86 points are {_GS}; without them +2.7%"),
    "dtype = fp4": (12.2, f"40 of its 86 points are {_GS}; without them +2.7%"),
    "ISL band = 1025-4096": (10.2, f"36 of its 66 points are {_GS}; without them +6.2%"),
    "concurrency band = <= 1": (13.8, f"10 of its 17 points are {_DEEPSEEK_TRTLLM}; without them +5.9%"),
    "metric = latency": (
        10.4,
        f"50 of its 95 points are TTFTs and TPOTs of {_GS}; the DeepSeek-R1 TensorRT-LLM TTFTs "
        "(MLA) and the same lab's gpt-oss-20b H100 TTFTs add to it; without the 50 +7.3%, without "
        "every GPUStack point +7.2%",
    ),
}
# GPU -> its architecture generation (the bias audit's "GPU generation" group)
GENERATIONS = {
    "a100-40": "Ampere",
    "a100-80": "Ampere",
    "l4": "Ada",
    "l40s": "Ada",
    "rtx-4090": "Ada",
    "h100-sxm": "Hopper",
    "h100-pcie": "Hopper",
    "h100-nvl": "Hopper",
    "h200": "Hopper",
    "h20": "Hopper",
    "b200": "Blackwell",
    "gb200": "Blackwell",
    "b300": "Blackwell",
    "rtx-5090": "Blackwell",
    "rtx-pro-6000": "Blackwell",
    "mi300x": "CDNA3",
    "mi325x": "CDNA3",
    "mi355x": "CDNA4",
}


# the engine flags a point may state (engine_overrides), as _engine_knobs, _plan and command_line read them; any other
# key would be dropped without a word
ENGINE_OVERRIDES = frozenset(
    {"max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "trtllm_bench", "vllm_sampler"}
)


class NotSimulated(Exception):
    """The point needs a knob the simulator does not have; the message says which."""


@dataclass(frozen=True)
class Point:
    """One published measurement and the configuration it was taken on."""

    id: str
    source_url: str
    source_title: str
    engine: str
    engine_version: str | None
    model: str  # preset name, or a config path relative to data/validation/
    gpu: str
    tp: int
    pp: int
    ep: int
    dp_attention: bool
    weight_dtype: str | None
    kv_dtype: str | None
    mem_util: float | None  # vLLM gpu_memory_utilization / SGLang mem_fraction_static, when the run states it
    isl: int
    osl: int
    isl_low: int | None  # random lengths: uniform isl_low..isl (None: every request exactly isl)
    osl_low: int | None
    concurrency: int | str  # an int, or "max" (every request queued at once: offline throughput)
    requests: int | None  # requests the publisher sent (None: not stated)
    sim_requests: int  # requests simulated: the published count; stated in points.json only where none is published
    metric: str
    published: float
    engine_overrides: dict
    not_simulated: str | None  # a reason stated in the data (e.g. inter-node links)
    # the API the benchmark client sent through, where the source states it: "chat" (/v1/chat/completions: the
    # server's chat-template work on its event loop, kneecap.sim.frontend) or "completions" (the default)
    endpoint: str = COMPLETIONS

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        try:
            point = cls(
                id=d["id"],
                source_url=d["source"]["url"],
                source_title=d["source"]["title"],
                engine=d["engine"],
                engine_version=d.get("engine_version"),
                model=d["model"],
                gpu=d["gpu"],
                tp=int(d.get("tp", 1)),
                pp=int(d.get("pp", 1)),
                ep=int(d.get("ep", 1)),
                dp_attention=bool(d.get("dp_attention", False)),
                weight_dtype=d.get("weight_dtype"),
                kv_dtype=d.get("kv_dtype"),
                mem_util=None if d.get("mem_util") is None else float(d["mem_util"]),
                isl=int(d["isl"]),
                osl=int(d["osl"]),
                isl_low=None if d.get("isl_low") is None else int(d["isl_low"]),
                osl_low=None if d.get("osl_low") is None else int(d["osl_low"]),
                concurrency=d["concurrency"],
                requests=None if d.get("requests") is None else int(d["requests"]),
                sim_requests=int(d.get("sim_requests") or d["requests"]),
                metric=d["metric"],
                published=float(d["published"]),
                engine_overrides=dict(d.get("engine_overrides") or {}),
                not_simulated=d.get("not_simulated"),
                endpoint=d.get("endpoint", COMPLETIONS),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise KneecapError(f"validation point {d.get('id', '?')}: bad or missing field ({exc})", _FIX) from None
        if point.metric not in METRICS:
            raise KneecapError(
                f"validation point {point.id}: unknown metric {point.metric!r}", f"use one of {sorted(METRICS)}"
            )
        if point.engine not in ENGINES:
            raise KneecapError(
                f"validation point {point.id}: unknown engine {point.engine!r}", f"use one of {sorted(ENGINES)}"
            )
        if point.endpoint not in ENDPOINTS:
            raise KneecapError(f"validation point {point.id}: endpoint must be one of {', '.join(ENDPOINTS)}", _FIX)
        unknown = sorted(set(point.engine_overrides) - ENGINE_OVERRIDES)
        if unknown:
            raise KneecapError(
                f"validation point {point.id}: unknown engine_overrides {', '.join(unknown)}",
                f"use only {', '.join(sorted(ENGINE_OVERRIDES))}",
            )
        if point.concurrency != "max" and not (isinstance(point.concurrency, int) and point.concurrency >= 1):
            raise KneecapError(f'validation point {point.id}: concurrency must be an int >= 1 or "max"', _FIX)
        if (
            point.sim_requests < 1
            or (point.requests is not None and point.sim_requests > point.requests)
            or point.published <= 0
        ):
            raise KneecapError(
                f"validation point {point.id}: need 1 <= sim_requests <= requests and published > 0", _FIX
            )
        return point

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def model_name(self) -> str:
        return Path(self.model).name.removesuffix(".json") if self.model.endswith(".json") else self.model

    def model_spec(self) -> str:
        return str(DATA_DIR / self.model) if self.model.endswith(".json") else self.model


def load_points(path: Path = POINTS_FILE) -> list[Point]:
    doc = json.loads(Path(path).read_text())
    points = [Point.from_dict(d) for d in doc["points"]]
    seen: set[str] = set()
    for p in points:
        if p.id in seen:
            raise KneecapError(f"validation point id {p.id!r} appears twice", "give every point its own id")
        seen.add(p.id)
    return points


# Published engine -> the simulated engine's defaults (`kneecap simulate --engine-defaults`)
ENGINE_DEFAULTS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "nim": "nim", "llama.cpp": "llamacpp"}


def _release(point: Point) -> str | None:
    """The release `--engine-version` is given: the point's, except NIM's (a NIM release, not TensorRT-LLM's: its
    profile is the C++ runtime's whatever the release)."""
    return None if point.engine == "nim" else point.engine_version


def _plan(point: Point):
    """The Plan the simulator runs on: the one builder `kneecap simulate` plans with (kneecap.plan.build, the engine's
    own pool rule by sim.setup.engine_pool_request: vLLM's and SGLang's memory accounting at the point's release,
    TensorRT-LLM's for it and NIM)."""
    from kneecap.plan.build import DeploymentRequest, plan_deployment
    from kneecap.sim.setup import engine_pool_request

    request = DeploymentRequest(
        model=point.model_spec(),
        gpu=point.gpu,
        tp=point.tp,
        pp=point.pp,
        ep=point.ep,
        dp_attention=point.dp_attention,
        weight_dtype=point.weight_dtype,
        kv_dtype=point.kv_dtype,
        context=point.isl + point.osl,
        engine=point.engine if point.engine in ("vllm", "sglang") else None,
        mem_util=point.mem_util if point.engine == "vllm" else None,
        mem_fraction=point.mem_util if point.engine == "sglang" else None,
        vllm_sampler=point.engine_overrides.get("vllm_sampler"),
    )
    # (the 0.5-0.6 static-batch TensorRT-LLM runs, gptSessionBenchmark, sized their pool per batch: TensorRT-LLM's
    # rule moves two of them by at most 1.2 points)
    return plan_deployment(engine_pool_request(request, ENGINE_DEFAULTS[point.engine], _release(point))).plan


def _engine_knobs(point: Point) -> dict:
    """The engine flags of the point's run, as from_plan (and `kneecap simulate`) takes them: the engine's defaults
    at the point's release (vLLM V0 before 0.8, async scheduling from 0.14; TensorRT-LLM's C++ runtime before 0.17),
    a trtllm-bench run's limits, the batch limits and prefix caching the point states, the endpoint its client sent
    through (the chat endpoint's per-request cost at the release: sim/config.py chat_frontend_ms). TensorRT-LLM's and
    NIM's prefix reuse is off (nothing in the runs is shared)."""
    o = point.engine_overrides
    prefix = o.get("enable_prefix_caching")
    return dict(
        defaults=ENGINE_DEFAULTS[point.engine],
        engine_version=_release(point),
        trtllm_bench=(point.isl, point.osl) if o.get("trtllm_bench") else None,
        max_num_seqs=o.get("max_num_seqs"),
        max_num_batched_tokens=o.get("max_num_batched_tokens"),
        prefix_caching=False if point.engine in ("tensorrt-llm", "nim") and prefix is None else prefix,
        endpoint=point.endpoint,
    )


def sim_deployment(point: Point):
    """The simulated deployment of the point's run: its Plan (_plan) and engine (_engine_knobs), built by
    kneecap.sim.setup.from_plan as `kneecap simulate` builds it."""
    from kneecap.sim.setup import from_plan

    return from_plan(_plan(point), **_engine_knobs(point))


def trtllm_bench_limits(point: Point, plan) -> tuple[int, int]:
    """The limits `trtllm-bench throughput` computes for the point's run (kneecap.sim.config.trtllm_bench_limits)."""
    from kneecap.sim.config import trtllm_bench_limits as limits

    return limits(plan.deployment, point.isl, point.osl)


def _lengths(high: int, low: int | None):
    from kneecap.workload import LengthDist

    return LengthDist.fixed(high) if low is None else LengthDist(kind="uniform", low=low, high=high)


def predict(point: Point) -> float:
    """Run the simulated engine on the point's configuration; the published metric's prediction.

    Raises NotSimulated when the setup needs a knob the simulator does not have."""
    from kneecap.metrics.summarize import summarize_level
    from kneecap.levels import SweepLevel
    from kneecap.sim.level_driver import PlannedLevelDriver, SimulateOptions
    from kneecap.sim.sweep import LevelSpec
    from kneecap.sweep.door import run_one_level
    from kneecap.workload import RequestClass, Workload

    if point.not_simulated:
        raise NotSimulated(point.not_simulated)
    sim = sim_deployment(point)
    workload = Workload(
        classes=(RequestClass(input=_lengths(point.isl, point.isl_low), output=_lengths(point.osl, point.osl_low)),)
    )
    closed = None if point.concurrency == "max" else int(point.concurrency)
    spec = LevelSpec(concurrency=closed, all_at_once=closed is None, num_requests=point.sim_requests)
    driver = PlannedLevelDriver(sim, workload, spec, seed=0)
    _, records = run_one_level(
        SimulateOptions(kind="concurrency", levels=(point.concurrency,), requests=point.sim_requests),
        driver,
        SweepLevel(index=0, value=point.concurrency, num_requests=point.sim_requests, num_warmup=0, first_index=0),
    )
    return metric_value(point, summarize_level(records, concurrency=closed))


def metric_value(point: Point, s: dict) -> float:
    """The point's published metric from a level's summary (a summary.json level, or summarize_level's)."""
    _, key, stat, factor = METRICS[point.metric]
    value = float(s[key]) if stat is None else float(s[key][stat])
    if point.metric == "output_tok_s_per_gpu":
        value /= point.num_gpus
    if factor < 0:  # a rate from a time in ms: per output token (decode) or for the whole prompt (prefill)
        return (point.isl if point.metric == "prefill_tok_s" else 1) * 1000.0 / value
    return value * factor


def command_line(point: Point) -> str | None:
    """The `kneecap simulate` command that reproduces the point's prediction (its first level's summary read with
    metric_value): the same plan and engine flags predict() runs with (_plan, _engine_knobs); None for a point that is
    not simulated."""
    import shlex

    if point.not_simulated:
        return None
    knobs = _engine_knobs(point)
    model = (
        f"--model {POINTS_FILE.parent.relative_to(DOC_FILE.parents[1]) / point.model}"
        if point.model.endswith(".json")
        else f"--preset {point.model}"
    )
    parts = ["kneecap simulate", model, f"--gpu {point.gpu}", f"--tp {point.tp}"]
    parts += [f"--pp {point.pp}"] if point.pp > 1 else []
    parts += [f"--ep {point.ep}"] if point.ep > 1 else []
    parts += ["--dp-attention"] if point.dp_attention else []
    parts += [f"--weight-dtype {point.weight_dtype}"] if point.weight_dtype else []
    parts += [f"--kv-dtype {point.kv_dtype}"] if point.kv_dtype else []
    parts += [f"--context {point.isl + point.osl}"]
    if point.engine in ("vllm", "sglang"):
        parts += [f"--engine {point.engine}"]
        if point.mem_util is not None:
            parts += [f"--{'mem-util' if point.engine == 'vllm' else 'mem-fraction'} {point.mem_util:g}"]
    else:
        parts += [f"--engine-defaults {knobs['defaults']}"]
    parts += [f"--engine-version {shlex.quote(knobs['engine_version'])}"] if knobs["engine_version"] else []
    sampler = point.engine_overrides.get("vllm_sampler")
    parts += [f"--vllm-sampler {sampler}"] if sampler else []
    parts += ["--trtllm-bench"] if knobs["trtllm_bench"] else []
    parts += [f"--{k.replace('_', '-')} {knobs[k]}" for k in ("max_num_seqs", "max_num_batched_tokens") if knobs[k]]
    if knobs["prefix_caching"] is not None:
        parts += ["--prefix-caching" if knobs["prefix_caching"] else "--no-prefix-caching"]
    parts += ["--endpoint chat"] if knobs["endpoint"] == CHAT else []
    parts += [
        f"--isl {_length_flag(point.isl, point.isl_low)}",
        f"--osl {_length_flag(point.osl, point.osl_low)}",
        f"--concurrency {point.concurrency}",
        f"--requests {point.sim_requests}",
    ]
    return " ".join(parts + ["--no-report", "--quiet"])


def _length_flag(high: int, low: int | None) -> str:
    """--isl / --osl for _lengths(high, low): N, or uniform:LOW:HIGH (kneecap.workload.lengthspec)."""
    return str(high) if low is None else f"uniform:{low}:{high}"


def features(point: Point) -> dict[str, str]:
    """The groups a point belongs to (docs/validation.md reports the median error of each)."""
    from kneecap.model.resolve import load_model

    model = load_model(point.model_spec())
    dtypes = {(point.weight_dtype or model.weight_dtype or "bf16").lower(), (point.kv_dtype or "").lower()}
    dtypes |= {dt.lower() for _, dt in model.part_dtypes} if not point.weight_dtype else set()
    conc = point.concurrency
    main = (point.weight_dtype or model.weight_dtype or "bf16").lower()
    return {
        "engine": point.engine,
        "GPU vendor": get_gpu(point.gpu).vendor,
        "GPU generation": GENERATIONS.get(point.gpu, "other"),
        "architecture": "MLA" if "mla" in model.layer_types else ("MoE" if model.is_moe else "dense"),
        "parallelism": "PP > 1"
        if point.pp > 1
        else ("EP > 1" if point.ep > 1 or point.dp_attention else ("TP > 1" if point.tp > 1 else "one GPU")),
        "dtype": "fp4"
        if main in ("nvfp4", "mxfp4")
        else ("fp8" if main.startswith("fp8") else (main if main in ("bf16", "fp16") else "int8/int4/other")),
        "ISL band": _band(point.isl, (256, 1024, 4096)),
        "OSL band": _band(point.osl, (256, 1024, 4096)),
        "concurrency band": "max (offline)" if conc == "max" else _band(int(conc), (1, 16, 128)),
        "metric": "latency" if is_time_metric(point.metric) else "throughput",
        "PP > 1": "yes" if point.pp > 1 else "no",
        "MoE": "yes" if model.is_moe else "no",
        "MLA": "yes" if "mla" in model.layer_types else "no",
        "FP8": "yes" if any(dt.startswith("fp8") for dt in dtypes) else "no",
        "FP4": "yes" if dtypes & {"nvfp4", "mxfp4"} else "no",
    }


def _band(value: int, edges: tuple[int, ...]) -> str:
    """'<= e0', 'e0+1-e1', ..., '> e_last' (the bias audit's length and concurrency bands)."""
    lo = 0
    for e in edges:
        if value <= e:
            return f"<= {e}" if lo == 0 else f"{lo + 1}-{e}"
        lo = e
    return f"> {edges[-1]}"


def is_time_metric(metric: str) -> bool:
    """A latency (smaller is faster): TTFT, TPOT, ITL, request latency; not a rate such as tok/s."""
    _, key, _, factor = METRICS[metric]
    return key.endswith("_ms") and factor > 0 and not metric.endswith("tok_s")


def speed_error_pct(row: dict) -> float | None:
    """The signed error with one meaning for every metric: + = the simulator is too fast (a rate over-predicted or a
    latency under-predicted), - = too slow."""
    e = row["error_pct"]
    return None if e is None else (-e if is_time_metric(row["metric"]) else e)


def error_table(points: list[Point] | None = None) -> list[dict]:
    """One row per point: published, predicted, signed error in percent of the published value (None: not simulated)."""
    rows = []
    for p in points if points is not None else load_points():
        try:
            pred, reason = predict(p), None
        except NotSimulated as exc:
            pred, reason = None, str(exc)
        layout = (
            f"TP{p.tp}"
            + (f" PP{p.pp}" if p.pp > 1 else "")
            + (f" EP{p.ep}" if p.ep > 1 else "")
            + (" DP-attn" if p.dp_attention else "")
        )
        rows.append(
            {
                "id": p.id,
                "engine": p.engine + (f" {p.engine_version}" if p.engine_version else ""),
                "model": p.model_name,
                "gpu": p.gpu,
                "layout": layout,
                "dtypes": (p.weight_dtype or "as shipped") + (f", KV {p.kv_dtype}" if p.kv_dtype else ""),
                "isl": p.isl,
                "osl": p.osl,
                "isl_low": p.isl_low,
                "osl_low": p.osl_low,
                "concurrency": p.concurrency,
                "requests": p.requests,
                "sim_requests": p.sim_requests,
                "metric": p.metric,
                "published": p.published,
                "predicted": None if pred is None else (float(f"{pred:.4g}") if pred < 10 else round(pred, 2)),
                "error_pct": None if pred is None else round(100.0 * (pred - p.published) / p.published, 1),
                "not_simulated": reason,
                "groups": features(p),
                "source": p.source_url,
                "command": None if pred is None else command_line(p),
                "source_title": p.source_title,
            }
        )
    return rows


def median_abs_error_pct(rows: list[dict]) -> float:
    return median([abs(r["error_pct"]) for r in rows if r["error_pct"] is not None])


def group_medians(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{group: {value: {"points": n, "median_abs_error_pct": m, "signed_median_pct": s}}} over the simulated rows;
    s is the median of speed_error_pct (+ = too fast)."""
    out: dict[str, dict[str, dict]] = {g: {} for g in GROUPS}
    for g in GROUPS:
        for v in sorted({r["groups"][g] for r in rows if g in r["groups"]}):
            members = [r for r in rows if r["groups"].get(g) == v]
            sim = [r for r in members if r["error_pct"] is not None]
            out[g][v] = {
                "points": len(sim),
                "not_simulated": len(members) - len(sim),
                "median_abs_error_pct": None if not sim else round(median(abs(r["error_pct"]) for r in sim), 1),
                "signed_median_pct": None if not sim else round(median(speed_error_pct(r) for r in sim), 1),
            }
    return out


def biased_groups(rows: list[dict]) -> dict[str, float]:
    """{"group = value": signed median} for every group of BIAS_MIN_POINTS or more simulated points whose signed
    median (speed_error_pct) is beyond +-BIAS_LIMIT_PCT."""
    return {
        f"{g} = {v}": m["signed_median_pct"]
        for g, vals in group_medians(rows).items()
        for v, m in vals.items()
        if m["points"] >= BIAS_MIN_POINTS and abs(m["signed_median_pct"]) > BIAS_LIMIT_PCT
    }


def baseline_document(rows: list[dict]) -> dict:
    return {
        "about": "Median absolute error of the simulator on docs/validation.md's points, as last accepted with "
        "`python -m kneecap.validation --write-baseline`. tests/validation fails if a median worsens by "
        f"more than {REGRESSION_POINTS:g} points against these, and on any group of {BIAS_MIN_POINTS} or more points "
        f"whose signed median is beyond ±{BIAS_LIMIT_PCT:g}% except the known biases validation.py lists, each held at "
        "its figure.",
        "points": len(rows),
        "simulated": sum(1 for r in rows if r["error_pct"] is not None),
        "median_abs_error_pct": round(median_abs_error_pct(rows), 1),
        "groups": {
            g: {v: m["median_abs_error_pct"] for v, m in vals.items()} for g, vals in group_medians(rows).items()
        },
        "signed_groups": {
            g: {v: m["signed_median_pct"] for v, m in vals.items() if m["points"] >= BIAS_MIN_POINTS}
            for g, vals in group_medians(rows).items()
        },
    }


def regressions(rows: list[dict], baseline: dict, known: dict[str, tuple[float, str]] | None = None) -> list[str]:
    """Medians (overall and per group) that are more than REGRESSION_POINTS worse than the baseline, and the
    bias_failures (known: the listed biases, default KNOWN_BIASED)."""
    now = baseline_document(rows)
    out = []
    if now["median_abs_error_pct"] > baseline["median_abs_error_pct"] + REGRESSION_POINTS:
        out.append(f"median {baseline['median_abs_error_pct']}% -> {now['median_abs_error_pct']}%")
    for g, vals in baseline["groups"].items():
        for v, was in vals.items():
            cur = now["groups"].get(g, {}).get(v)
            if was is not None and cur is not None and cur > was + REGRESSION_POINTS:
                out.append(f"{g} = {v}: {was}% -> {cur}%")
    return out + bias_failures(rows, known)


def bias_failures(rows: list[dict], known: dict[str, tuple[float, str]] | None = None) -> list[str]:
    """Every group of BIAS_MIN_POINTS or more whose signed median is beyond +-BIAS_LIMIT_PCT, whatever the baseline
    says, unless `known` (default KNOWN_BIASED) lists it and it is no further out than its figure (+ BIAS_SLACK_POINTS);
    and every listed group that is now inside the limit (take it off the list)."""
    known = KNOWN_BIASED if known is None else known
    biased = biased_groups(rows)
    out = []
    for key, cur in biased.items():
        if key not in known:
            out.append(f"bias {key}: signed median {cur:+.1f}% (beyond ±{BIAS_LIMIT_PCT:g}%)")
        elif abs(cur) > abs(known[key][0]) + BIAS_SLACK_POINTS:
            out.append(f"bias {key}: signed median {known[key][0]:+.1f}% -> {cur:+.1f}% (a known bias, worsened)")
    for key, (figure, _) in known.items():
        if key not in biased:
            out.append(f"bias {key}: listed as known at {figure:+.1f}% but now within ±{BIAS_LIMIT_PCT:g}% (remove it)")
    return out


def _num(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 10 else f"{x:,.1f}"


def _published(x: float) -> str:
    """The published value as the source printed it (no rounding), with thousands separators."""
    return f"{int(x):,}" if x.is_integer() else f"{x:,}"


def row_cells(r: dict) -> str:
    """One table row without its number and source: engine ... error."""
    load = str(r["concurrency"])  # an int or "max"
    if r["error_pct"] is None:
        pred, err = f"not simulated: {r['not_simulated']}", "—"
    else:
        pred, err = _num(r["predicted"]), f"{r['error_pct']:+.1f}%"
        if r["requests"] is None:
            load += f" ({r['sim_requests']:,} req. simulated; count not published)"
        elif r["sim_requests"] != r["requests"]:
            load += f" ({r['sim_requests']:,} of {r['requests']:,} req. simulated)"
        elif r["concurrency"] == "max":
            load += f" ({r['requests']:,} req.)"
    isl = f"{r['isl_low']}-{r['isl']}" if r["isl_low"] else str(r["isl"])
    osl = f"{r['osl_low']}-{r['osl']}" if r["osl_low"] else str(r["osl"])
    return (
        f"| {r['engine']} | {r['model']} | {r['gpu']} {r['layout']} | {r['dtypes']} | {isl}/{osl} | {load} | "
        f"{METRICS[r['metric']][0]} | {_published(r['published'])} | {pred} | {err} |"
    )


def render_markdown(rows: list[dict]) -> str:
    """The generated block of docs/validation.md: summary, per-group medians, then every point."""
    sources: dict[str, tuple[int, str]] = {}
    for r in rows:
        sources.setdefault(r["source"], (len(sources) + 1, r.get("source_title", "")))
    sim = [r for r in rows if r["error_pct"] is not None]
    errs = [abs(r["error_pct"]) for r in sim]
    lines = [
        TABLE_BEGIN,
        "",
        f"{len(rows)} published points from {len(sources)} source{'s' if len(sources) != 1 else ''}; {len(sim)} simulated, "
        f"{len(rows) - len(sim)} not simulated (a knob the simulator does not have, named in the row). "
        + (
            f"Median absolute error **{median_abs_error_pct(rows):.1f}%**; {sum(e <= 25 for e in errs)} of {len(sim)} "
            f"within 25%; worst {max(errs):.1f}%."
            if sim
            else "None simulated."
        ),
        "",
        (
            "Signed median: the median of each point's signed error with latencies negated, so that + means the "
            "simulator is too fast (a rate over-predicted or a latency under-predicted) and - too slow, whatever "
            f"the metric; a group of {BIAS_MIN_POINTS} or more points beyond ±{BIAS_LIMIT_PCT:g}% is marked **biased**."
        ),
        "",
        "| group | value | points | median abs. error | signed median | not simulated |",
        "|---|---|---:|---:|---:|---:|",
    ]
    ranked = []
    for g, vals in group_medians(rows).items():
        for v, m in vals.items():
            med = "—" if m["median_abs_error_pct"] is None else f"{m['median_abs_error_pct']:.1f}%"
            sgn = "—" if m["signed_median_pct"] is None else f"{m['signed_median_pct']:+.1f}%"
            if (
                m["points"] >= BIAS_MIN_POINTS
                and m["signed_median_pct"] is not None
                and abs(m["signed_median_pct"]) > BIAS_LIMIT_PCT
            ):
                sgn += " **biased** (known)" if f"{g} = {v}" in KNOWN_BIASED else " **biased**"
            lines.append(f"| {g} | {v} | {m['points']} | {med} | {sgn} | {m['not_simulated']} |")
            if m["median_abs_error_pct"] is not None and m["points"] >= 3:
                ranked.append(
                    (m["median_abs_error_pct"], f"{g} = {v} ({m['median_abs_error_pct']:.1f}%, {m['points']} points)")
                )
    if ranked:
        lines += [
            "",
            "Weakest groups (3 or more simulated points): "
            + "; ".join(t for _, t in sorted(ranked, reverse=True)[:4])
            + ".",
        ]
    biased = biased_groups(rows)
    lines += [
        "",
        (
            f"Biased groups ({BIAS_MIN_POINTS} or more points, signed median beyond ±{BIAS_LIMIT_PCT:g}%): "
            + "; ".join(f"{k} ({v:+.1f}%)" for k, v in biased.items())
            + "."
        )
        if biased
        else f"No group of {BIAS_MIN_POINTS} or more points has a signed median beyond ±{BIAS_LIMIT_PCT:g}%.",
    ]
    known = [k for k in biased if k in KNOWN_BIASED]
    if known:
        lines += [
            "",
            "Biases not fixed yet, each held at its figure by tests/validation (a new bias, a known one further out, "
            "or a known one back inside the limit fails the test):",
            "",
        ]
        lines += [f"- {k} ({KNOWN_BIASED[k][0]:+.1f}%): {KNOWN_BIASED[k][1]}." for k in known]
    lines += ["", "How each published engine is simulated:", ""]
    lines += [
        f"- **{name}**: {how}." for name, how in ENGINES.items() if any(r["engine"].split()[0] == name for r in rows)
    ]
    lines += [
        "",
        "| # | engine | model | GPU, layout | dtypes | ISL/OSL | C | metric | published | predicted | error | src |",
        "|---|---|---|---|---|---|---|---|---:|---:|---:|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} {row_cells(r)} [{sources[r['source']][0]}] |")
    cmds = [(i, r["command"]) for i, r in enumerate(rows, 1) if r.get("command")]
    if cmds:
        lines += [
            "",
            f"The `kneecap simulate` command that reproduces each prediction ({len(cmds)} of {len(rows)} points: "
            "every simulated one), its first level read as the metric says; tests/validation runs one of each "
            "engine:",
            "",
        ]
        lines += [f"- {i}: `{c}`" for i, c in cmds]
    lines += ["", "Sources:", ""]
    for url, (n, title) in sources.items():
        errs_src = [abs(r["error_pct"]) for r in sim if r["source"] == url]
        med = f"median {median(errs_src):.1f}% over {len(errs_src)} simulated" if errs_src else "none simulated"
        lines.append(f"[{n}] {title} — <{url}> ({med})  ")
    lines += ["", TABLE_END]
    return "\n".join(lines)


def write_doc(block: str, doc_path: Path = DOC_FILE) -> None:
    text = doc_path.read_text()
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    doc_path.write_text(text[:start] + block + text[end:])


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - a maintenance entry point
    """python -m kneecap.validation [--only TEXT] [--write] [--write-baseline] [--json]: print the table and the
    regressions against the baseline. --only runs the points whose id contains TEXT (no writing then)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    points = load_points()
    if "--only" in args:
        i = args.index("--only")
        if i + 1 >= len(args) or "--write" in args or "--write-baseline" in args:
            print(
                "error: --only needs a text and cannot be combined with --write / --write-baseline "
                "(hint: python -m kneecap.validation --only deepseek)",
                file=sys.stderr,
            )
            return 2
        points = [p for p in points if args[i + 1] in p.id]
        if not points:
            print(
                f"error: no point id contains {args[i + 1]!r} (hint: ids are in src/kneecap/data/validation/points.json)",
                file=sys.stderr,
            )
            return 2
    rows = error_table(points)
    block = render_markdown(rows)
    if "--write" in args:
        write_doc(block)
    print(block)
    baseline = json.loads(BASELINE_FILE.read_text()) if BASELINE_FILE.exists() else None
    if "--write-baseline" in args:
        BASELINE_FILE.write_text(json.dumps(baseline_document(rows), indent=1) + "\n")
        print(f"baseline written: {BASELINE_FILE}")
    elif baseline is not None and "--only" not in args:
        worse = regressions(rows, baseline)
        print("regressions against the baseline: " + ("; ".join(worse) if worse else "none"))
    if "--json" in args:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
