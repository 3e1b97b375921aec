"""EngineConfig: the scheduler limits of the simulated engine, with named vLLM-like and SGLang-like defaults.

Owns the engine's knobs (sequence cap, per-step token budget, prefix caching, admission reserve);
not the KV pool size (that is the planner's `num_kv_blocks`) nor step-time constants (steptime.py).

Defaults, as the engines compute them when the user passes nothing:
  vLLM  (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, OpenAI API server context):
        a GPU with >= 70 GiB that is not an A100 -> max_num_batched_tokens 8192, max_num_seqs 1024;
        any other GPU -> 2048 and 256. V1 always chunks prefills and enables prefix caching by default
        (EngineArgs._set_default_args_v1: "V1 always uses chunked prefills", "V1 enables prefix
        caching by default"). Older V1 releases (0.8.x) used max_num_seqs 256 everywhere.
  SGLang (python/sglang/srt/server_args.py, chunked_prefill_size by GPU memory in MiB):
        < 35 GiB -> 2048, < 160 GiB -> 8192, else 16384; max_running_requests, when unset, is
        min(max(pool_tokens / context_len * 512, 2048), 4096), capped at pool_tokens // 2
        (model_runner.py, max_num_reqs). The radix (prefix) cache is on by default. New requests are
        admitted only if the pool can also hold new_token_ratio x their remaining output
        (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, decaying by 0.001 per decode step to a floor of 0.1;
        reset after a retraction) — schedule_policy.py PrefillAdder. Its overlap scheduler forms each batch while
        the step before it runs, so a request arriving mid-step waits one more step (SCHEDULES_AHEAD_NOTE).
        Under DP attention each rank has its own pool, its own max_running_requests by the rule above from its own
        pool, takes chunked_prefill_size // dp_size prompt tokens a step and reserves at 0.3 of those ratios
        (DP_SCHEDULER_NOTE).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from kneecap.errors import KneecapError
from kneecap.sim.speculative import SpecDecoding
from kneecap.units import GiB, MiB

ENGINE_DEFAULTS = ("vllm", "sglang", "trtllm", "nim", "llamacpp")


def vllm_cudagraph_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM V1's default CUDA-graph capture sizes (vllm/config/compilation.py, set_cudagraph_sizes): up to
    max_graph_size = min(max_num_seqs x 2, 512): 1, 2, 4, multiples of 8 below 256, multiples of 16 from 256."""
    top = min(max_num_seqs * 2, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return tuple(x for x in sizes if x <= top)


def sglang_cudagraph_sizes(max_bs: int = 160) -> tuple[int, ...]:
    """SGLang's capture list (model_executor/cuda_graph_runner.py): 1, 2, 4, then multiples of 8 up to
    --cuda-graph-max-bs (server_args.py default 160 in the 0.4 releases)."""
    return tuple([1, 2, 4] + list(range(8, max_bs + 1, 8)))


def trtllm_cudagraph_sizes(max_batch_size: int = 128) -> tuple[int, ...]:
    """The batch sizes TensorRT-LLM's PyTorch backend captures CUDA graphs for when its LLM API / trtllm-serve run
    with the default cuda_graph_config (tensorrt_llm/llmapi/llm_args.py: cuda_graph_config defaults to
    CudaGraphConfig(), whose max_batch_size 0 means 128 and enable_padding False; _generate_cuda_graph_batch_sizes
    without padding: 1-31, 32, 64, 128, then powers of two from 256 below max_batch_size, and max_batch_size)."""
    sizes = list(range(1, 32)) + [32, 64, 128]
    sizes += [2**i for i in range(8, math.ceil(math.log2(max_batch_size)))] if max_batch_size > 1 else []
    sizes = sorted(x for x in set(sizes) if x <= max_batch_size)
    return tuple(sizes if sizes and sizes[-1] == max_batch_size else sizes + [max_batch_size])


@dataclass(frozen=True)
class EngineProfile:
    """How an engine spends its per-step CPU time and pads decode batches; which version the values follow."""

    name: str = "vllm"
    version: str = "vLLM V1 (0.10-0.11 defaults)"
    # CPU seconds per step that grow with the batch (scheduling, input preparation, output processing),
    # per running sequence; the fixed part is StepTimeParams.overhead_s.
    cpu_per_seq_s: float = 12.7e-6
    # whether the CPU work of step n+1 runs while the GPU computes step n (vLLM --async-scheduling, SGLang's
    # overlap scheduler, TensorRT-LLM's overlap scheduler): step = max(gpu, cpu) instead of gpu + cpu
    overlap_cpu: bool = False
    # pure-decode batches pad up to the next of these (CUDA graphs); above the largest they run eagerly; () = every
    # pure decode replays a graph of its own size
    cudagraph_sizes: tuple[int, ...] = field(default_factory=lambda: vllm_cudagraph_sizes(256))
    # whether a pure-decode batch of a size not captured pads up to the next captured size (vLLM, SGLang) or runs
    # eagerly (TensorRT-LLM's default CudaGraphConfig, enable_padding False: cuda_graph_runner.py maybe_get_cuda_graph
    # returns no graph for a batch size not in its supported batch sizes)
    graph_padding: bool = True
    # fixed CPU seconds per step of this engine version; None: StepTimeParams.overhead_s (what calibrate fits)
    cpu_fixed_s: float | None = None
    # host seconds to launch one kernel of a step that runs outside a CUDA graph (Python model code: EAGER_LAUNCH_S;
    # 0: not host-bound, e.g. TensorRT-LLM's C++ runtime); such a step lasts at least kernels x this
    eager_launch_s: float = 0.0
    # steps with prefill tokens up to this many tokens replay a CUDA graph too (vLLM V1's piecewise graphs, which
    # capture every step of up to the largest capture size); 0: only pure decodes do (SGLang, TensorRT-LLM, vLLM V0)
    graph_mixed_tokens: int = 0
    # whether fp16 GEMMs accumulate in fp16 (llama.cpp's cuBLAS path: LLAMACPP_PROFILE); on a GPU whose catalog entry
    # has fp16_acc_flops (GeForce parts run fp16 accumulation at twice the fp32-accumulate rate) fp16 weights' GEMMs
    # run at that peak
    fp16_accumulate: bool = False
    # whether routed experts held in 4-bit (MXFP4/NVFP4) on a GPU without FP4 hardware run the Marlin MoE kernel (vLLM
    # before 0.12 on CUDA: VLLM_MARLIN_MOE_NOTE); their GEMMs then reach at most the GPU's moe_marlin_w4a16 fraction
    # of the bf16 peak (data/efficiency.json)
    marlin_w4a16_moe: bool = False
    # with pipeline parallelism, whether every rank but the last waits for its own stage of a micro-batch before its
    # host goes on to the next micro-batch's work (TensorRT-LLM's PyTorch executor: TRTLLM_PP_HOST_SYNC_NOTE): a
    # stage then lasts its GPU time plus one micro-batch's host time (sim/steptime.py, PP)
    pp_host_sync: bool = False
    # whether the host launches a step's kernels on the same thread that does the per-step CPU work (scheduling, input
    # preparation, the previous step's responses): TensorRT-LLM's PyTorch executor (TRTLLM_SERIAL_HOST_NOTE). With the
    # CPU work overlapped, a step outside a CUDA graph then lasts max(gpu, cpu + kernels x eager_launch_s), not
    # max(gpu, kernels x eager_launch_s, cpu) (SGLang's overlap scheduler launches from a thread of its own)
    serial_host_launch: bool = False
    # the fused-MoE kernel the engine runs for bf16/fp16 and fp8 routed experts (TRITON_FUSED_MOE_NOTE), priced from
    # published kernel tables where one exists for the GPU class (sim/moe_kernels.py); "": steptime.py's grouped-GEMM
    # rule (TensorRT-LLM's CUTLASS MoE, llama.cpp)
    moe_kernel: str = ""
    # how the MoE moves tokens under DP attention: "" an all-to-all to the experts' ranks and back; "allgather" every
    # rank gathers all ranks' tokens and reduce-scatters the outputs (TensorRT-LLM's CUTLASS MoE off GB200 NVL:
    # sim/steptime.py moe_dp_gathers)
    moe_dp_comm: str = ""
    # what the release's OpenAI server does with a chat template on each /v1/chat/completions request, on its one
    # event loop before the request reaches the engine (CHAT_FRONTEND_NOTE): CHAT_PARSE (a fresh parse of the whole
    # template), CHAT_RENDER (a render of the compiled, cached template), "" (not modelled for this engine)
    chat_template: str = ""
    # whether the release's chat endpoint renders a gpt-oss prompt with openai-harmony on that event loop at a measured
    # cost (HARMONY_RENDER_MS; CHAT_FRONTEND_NOTE): vLLM 0.10.1 through 0.11.0
    harmony_render: bool = False
    # whether the scheduler forms step n + 1's batch while the GPU runs step n (SCHEDULES_AHEAD_NOTE): a request that
    # arrives during step n joins step n + 2 at the earliest, while the engine is busy
    schedules_ahead: bool = False
    # under DP attention, how a new request is given its rank (DP_PLACEMENT_NOTE): "least_tokens" the rank with the
    # fewest active tokens (TensorRT-LLM), "round_robin" the next rank in turn whatever the load (SGLang), kept for the
    # request's life; with round robin the simulator tracks each request's rank and prices a step by its busiest rank
    dp_placement: str = "least_tokens"
    # under DP attention (DP_SCHEDULER_NOTE): whether each rank's scheduler takes at most max_num_batched_tokens // ranks
    # prompt tokens a step (SGLang divides its chunked prefill size by the DP size), and the factor its admission
    # reserve's new-token ratios are multiplied by (SGLang's schedule_conservativeness x 0.3); 1.0: unchanged
    dp_splits_chunk: bool = False
    dp_conservativeness: float = 1.0


# DP_PLACEMENT_NOTE: SGLang 0.5.7 defaults load_balance_method to "round_robin" (python/sglang/srt/server_args.py:379);
# its data-parallel controller sends each request to the next rank in turn (managers/data_parallel_controller.py:507-515,
# round_robin_scheduler), and "minimum_tokens" is deprecated there and falls back to round robin (:554-562). Each rank's
# scheduler then runs its own prefill-first policy (managers/scheduler.py:1822-1846, get_next_batch_to_run: a rank with a
# new prefill batch runs it, the others decode) and only syncs token counts with the other ranks before the MoE
# (managers/scheduler_dp_attn_mixin.py:104-193, prepare_mlp_sync_batch_raw: a rank with nothing runs an idle batch); with
# speculative decoding the sync comes before the decodes, so a prefill on any rank idles the others (scheduler.py:1825-1831).
# TensorRT-LLM gives a new request to the rank with the fewest active tokens (sim/steptime.py StepTimeModel._dp_busiest).
DP_PLACEMENTS = ("least_tokens", "round_robin")
# DP_SCHEDULER_NOTE: with --enable-dp-attention SGLang 0.5.7 multiplies schedule_conservativeness by 0.3 and divides
# chunked_prefill_size by dp_size (python/sglang/srt/server_args.py:1806-1809, _handle_data_parallelism; "to avoid MoE
# kernel issues"). Every DP rank runs a Scheduler of its own: it builds its PrefillAdder with that chunked_prefill_size
# as rem_chunk_tokens and max_prefill_tokens (default 16384, server_args.py:301) as rem_input_tokens
# (managers/scheduler.py:1908-1927; managers/schedule_policy.py:316-340), so each rank's prompt tokens in a step stop at
# chunked_prefill_size // dp_size. The reserve's ratios come from the conservativeness (scheduler.py:803-815):
# init_new_token_ratio = min(SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x conservativeness, 1), min_new_token_ratio = init x
# SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14, decay = (init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600 per step
# (srt/environ.py:205-207), all three linear in the conservativeness, so under DP attention each is 0.3 of its
# value (0.21, 0.029, 0.0003 a step). The ratio decays only in a decode step (scheduler.py:2140-2144,
# update_running_batch, which runs only when no prefill batch was formed: 1833-1841), with or without DP attention.
# Each rank also has its own KV pool (the deployment's over the DP size), its own max_running_requests
# (model_executor/model_runner.py:523-532: a given --max-running-requests is divided by dp_size, else min(the rank's
# pool tokens // 2, its request slots)) and its own new-token ratio: sim/dp_ranks.py runs a scheduler per rank. Read at
# 0.5.7, the cap and the decay also at 0.5.5 and 0.5.6; applied to every SGLang release. The rank's max_prefill_tokens
# (16384) is not modelled: the rank's chunk (chunked_prefill_size // dp_size) is below it at every default.
SGLANG_DP_CONSERVATIVENESS = 0.3


def dp_rank_tokens(config: EngineConfig, ranks: int) -> int:
    """Each DP rank's prompt tokens a step where the engine schedules `ranks` ranks on their own (DP_SCHEDULER_NOTE):
    max_num_batched_tokens // ranks for a profile that splits its chunk, at least 1; 0: one budget for all ranks."""
    if ranks <= 1 or not config.profile.dp_splits_chunk:
        return 0
    return max(1, config.max_num_batched_tokens // ranks)


def under_dp_attention(config: EngineConfig, ranks: int) -> EngineConfig:
    """The config as the engine runs it with attention data-parallel over `ranks` ranks (DP_SCHEDULER_NOTE): its
    admission reserve's new-token ratios times the profile's dp_conservativeness. ranks 1: config unchanged."""
    factor = config.profile.dp_conservativeness
    if ranks <= 1 or factor == 1.0:
        return config
    init = min(1.0, config.init_new_token_ratio * factor)
    return replace(
        config,
        init_new_token_ratio=init,
        min_new_token_ratio=min(init, config.min_new_token_ratio * factor),
        new_token_ratio_decay=config.new_token_ratio_decay * factor,
    )


# TRITON_FUSED_MOE_NOTE: vLLM (V0 and V1) and SGLang run bf16/fp16 and per-tensor FP8 routed experts with the Triton
# fused_moe kernel (vLLM model_executor/layers/fused_moe/fused_moe.py fused_experts: UnquantizedFusedMoEMethod's path
# on CUDA where no FlashInfer MoE flag is set, and Fp8MoEMethod's Triton path; whether a 0.10-0.11 release picks
# CUTLASS's per-tensor FP8 MoE on Hopper instead was not checked; SGLang srt/layers/moe/fused_moe_triton, its default
# --moe-runner-backend on Hopper and Ampere). Block-FP8 experts on Hopper
# run it too in vLLM 0.10.2 and 0.11.0 (read in their sdists): 0.10.2 defaults VLLM_USE_DEEP_GEMM to 0, and 0.11.0 (1)
# hands a call to DeepGEMM only with the deep_gemm package installed, at least 128 tokens and an intermediate width per
# GPU above 512 (fused_moe/deep_gemm_moe.py _valid_deep_gemm), so DeepSeek-V3/R1 at TP 8 (256) runs Triton; vLLM's
# block-FP8 tables price them (sim/moe_kernels.py), SGLang's keep the grouped-GEMM rule.
TRITON_FUSED_MOE = "triton_fused_moe"
# Per-sequence CPU time per step. vLLM: a cProfile study of the V1 engine loop measured the all-decode
# scheduler cost at 12.7 us per running request at the cap, growing ~2x per doubling of requests
# (openfabric-systems/simllm#204); it covers Scheduler.schedule only, so it is a lower bound of the whole
# per-step CPU work. SGLang and TensorRT-LLM overlap their CPU work with the GPU (SGLang v0.4 "zero-overhead
# batch scheduler", lmsys.org/blog/2024-12-04-sglang-v0-4), so the same per-sequence figure is used for SGLang and
# hidden under GPU time when the GPU is the longer; TensorRT-LLM's own figure is below.
# A step outside a CUDA graph is launched kernel by kernel from the engine's Python model code, which the GPU cannot
# outrun: SGLang measured Llama-3-8B decode steps at batch 1 of 7.35 ms with CUDA graphs and 8.23 ms without
# (flashinfer backend; 7.06 and 9.28 ms with triton; DeepSeek-Coder-V2-Lite 4x slower without) in
# sgl-project/sglang#1401: the eager step is host-bound, 8.23 ms over the 326 kernels kneecap counts for that model's
# pass (steptime.py) = 25 us of host time per kernel. Which steps run outside a graph: SGLang and TensorRT-LLM's PyTorch
# executor capture pure-decode batches only (prefill and mixed steps run eagerly), vLLM V1 captures piecewise graphs
# for every step of up to its largest capture size, vLLM V0 decodes only; all of them run a decode batch above
# their largest capture size eagerly. TensorRT-LLM's C++ runtime launches from C++ (not host-bound).
EAGER_LAUNCH_S = 8.23e-3 / 326
# VLLM_MARLIN_MOE_NOTE: vLLM's MXFP4 MoE on Hopper (vllm/model_executor/layers/quantization/mxfp4.py
# get_mxfp4_backend): FlashInfer's SM90 MXFP4 x BF16 path only when VLLM_USE_FLASHINFER_MOE_MXFP4_BF16 is set, else
# triton_kernels' matmul_ogs (Mxfp4Backend.TRITON) when the triton_kernels package imports, else Marlin. vLLM did not
# ship triton_kernels until vllm-project/vllm#28788 (vendored as vllm/third_party/triton_kernels, November 2025; the
# earlier requirements entry, vllm-project/vllm#27370, broke installs: vllm-project/vllm#27672); a plain
# `pip install vllm==0.11.0` logs "Failed to import Triton kernels" (vllm-project/vllm#26582) and runs Marlin. So the
# 0.10-0.11 profile runs 4-bit experts with Marlin on a GPU without FP4; 0.12 is taken as the first release with
# matmul_ogs by default (whether 0.11.1-0.11.2 shipped it is not checked). NVFP4 experts on such GPUs run Marlin too.
# CHAT_FRONTEND_NOTE: vLLM's OpenAI server prepares a chat request on its single asyncio event loop before the request
# first waits (kneecap.sim.frontend), so requests sent together queue behind each other's preparation. vLLM 0.11.0's
# apply_hf_chat_template calls resolve_chat_template_kwargs (vllm/entrypoints/chat_utils.py:1575-1599), which builds a
# new sandboxed jinja2 environment and parses the whole template on every request, uncached; 0.10.0 and 0.10.2 have no
# such call, and 0.11.1, 0.11.2 and 0.12.0 cache it (`_cached_resolve_chat_template_kwargs = lru_cache(...)`,
# chat_utils.py:1535 in 0.11.1/0.11.2, :1682 in 0.12.0), as 0.32.0 does (renderers/hf.py) -- read in those sdists. The
# other releases render a compiled template (transformers caches the compilation). Releases between 0.8 and 0.9.1
# detected the template's content format with an uncached Jinja walk on every request (vllm-project/vllm#20065: "6-8
# seconds delay" for 1,000 requests, cached since); that walk is not priced (those releases get CHAT_RENDER). gpt-oss
# takes another path: OpenAIServingChat sets use_harmony for model_type "gpt_oss" (vllm/entrypoints/openai/
# serving_chat.py:146 in 0.11.0, :144 in 0.10.2) and then calls _make_request_with_harmony without an await (:260 in
# 0.11.0, :248 in 0.10.2; the method at :1564-1597 and :1558-1591, the same code), which builds the system message
# (harmony_utils.py get_system_message, :61-100 in 0.11.0: today's date, the default reasoning effort), an empty
# developer message and the user's messages, and render_for_completion (harmony_utils.py:249-253) has
# openai-harmony's Rust encoder render and tokenise the whole prompt: all on the event loop, the prompt's
# tokenisation included (the Jinja path tokenises behind an await). Both releases ask for openai-harmony >= 0.0.3
# (requirements/common.txt:51); 0.0.4 was the newest from 2025-08-09 to 2025-11-05, the window both came out in.
# bench/harmony_render.py times that code with openai-harmony 0.0.4 for `vllm bench serve`'s random-dataset chat
# requests (HARMONY_RENDER_MS: a fixed part and a part per prompt token). vLLM 0.10.1.1 runs the same synchronous
# render (read in its sdist; its system message keeps the commentary channel) and shares the price; 0.11.2 and
# 0.12.0 do too (read) but install openai-harmony 0.0.8 and build the messages differently: not timed, so 0, as are
# releases not read and an unnamed release. SGLang, TensorRT-LLM, NIM and llama.cpp: not read, not modelled (0).
CHAT_PARSE = "parse"
CHAT_RENDER = "render"
# CPU ms per request measured by bench/chat_template_parse.py on a shared 2-core Intel Xeon build VM at load ~0.5-1.7
# (bench/results/chat_template_parse.md): a vLLM 0.11.0-style parse, and a render of the compiled template. The cost
# is the host's: --frontend-ms-per-request gives a user's own.
CHAT_TEMPLATE_PARSE_MS = {"qwen3": 10.89, "deepseek-r1": 11.12}
CHAT_TEMPLATE_RENDER_MS = {"qwen3": 0.027, "deepseek-r1": 0.025}
# a template not measured: the median over vLLM 0.11.0's 34 example templates (examples/*.jinja) in the same run
DEFAULT_CHAT_TEMPLATE_PARSE_MS = 6.64
DEFAULT_CHAT_TEMPLATE_RENDER_MS = 0.015
# which measured template stands for a model preset's: Qwen3's (bench/templates/qwen3.jinja) for the Qwen3 MoE
# presets; DeepSeek-R1's tokenizer_config template (bench/templates/deepseek-r1.jinja) for deepseek-v3, whose preset
# runs DeepSeek-V3 and R1 alike (V3's and R1-0528's own templates, of the same structure, were not timed)
MODEL_CHAT_TEMPLATES = {"qwen3-235b-a22b": "qwen3", "qwen3-30b-a3b": "qwen3", "deepseek-v3": "deepseek-r1"}
HARMONY_MODELS = ("gpt-oss-20b", "gpt-oss-120b")
# gpt-oss's harmony render on the event loop (CHAT_FRONTEND_NOTE): CPU ms per request = fixed + per_token x the
# prompt's tokens. bench/harmony_render.py's medians for random-dataset prompts of 128, 2,000, 4,000 and 32,000 tokens
# (0.418, 2.590, 4.723, 33.265 ms) on the same 2-core Xeon VM class as CHAT_TEMPLATE_PARSE_MS, at load ~1.3
# (bench/results/harmony_render.md): the line through them with the least squared relative error, 0.2825 ms + 1.0877
# us per token (within 7% of each), plus 0.0616 ms for the streamed response's harmony parser, which the response's
# generator creates once per request before it first waits for the engine (serving_chat.py:499-503 in 0.11.0)
HARMONY_RENDER_MS = {"fixed": 0.344, "per_token": 0.001088}


def chat_frontend_ms(profile: EngineProfile, model_name: str) -> tuple[float, str]:
    """CPU ms the engine's API server spends on its event loop per /v1/chat/completions request before the request
    reaches the engine (CHAT_FRONTEND_NOTE), and what that figure is, in a user's words."""
    if not profile.chat_template:
        return 0.0, f"not modelled for {profile.version} (0)"
    if model_name in HARMONY_MODELS:
        if not profile.harmony_render:
            return 0.0, "gpt-oss's openai-harmony render, timed for vLLM 0.10.1 through 0.11.0 only: not priced (0)"
        return HARMONY_RENDER_MS["fixed"], (
            f"gpt-oss's openai-harmony render and tokenisation of the prompt, {HARMONY_RENDER_MS['per_token'] * 1e3:g} "
            "us more per prompt token, as measured on a 2-core Xeon VM"
        )
    template = MODEL_CHAT_TEMPLATES.get(model_name)
    parse = profile.chat_template == CHAT_PARSE
    table = CHAT_TEMPLATE_PARSE_MS if parse else CHAT_TEMPLATE_RENDER_MS
    what = "a fresh parse of the chat template per request" if parse else "a render of the cached chat template"
    if template is None:
        ms = DEFAULT_CHAT_TEMPLATE_PARSE_MS if parse else DEFAULT_CHAT_TEMPLATE_RENDER_MS
        return ms, f"{what}; {model_name}'s template not measured: the median of vLLM's example templates"
    return table[template], f"{what}, {template}'s template as measured on a 2-core Xeon VM"


def chat_frontend_ms_per_prompt_token(profile: EngineProfile, model_name: str) -> float:
    """The part of chat_frontend_ms that grows with the request's prompt, CPU ms per prompt token: gpt-oss's harmony
    render tokenises the prompt on the event loop (CHAT_FRONTEND_NOTE); 0 for every other model and release."""
    if profile.chat_template and profile.harmony_render and model_name in HARMONY_MODELS:
        return HARMONY_RENDER_MS["per_token"]
    return 0.0


VLLM_PROFILE = EngineProfile(
    eager_launch_s=EAGER_LAUNCH_S,
    graph_mixed_tokens=512,
    marlin_w4a16_moe=True,
    moe_kernel=TRITON_FUSED_MOE,
    chat_template=CHAT_RENDER,
)
# SCHEDULES_AHEAD_NOTE: SGLang's overlap event loop (python/sglang/srt/managers/scheduler.py event_loop_overlap, at
# 0.5.7 lines 1099-1150) receives requests, forms the next batch and launches it, and only then waits for the previous
# batch's result (pop_and_process) before going round again. The batch it forms at the top of the loop is queued
# behind the one still on the GPU, so a request that arrives while step n runs is taken in when step n + 1 starts and
# runs in step n + 2: its time to first token is the rest of step n, all of step n + 1, then its prefill. The
# prefill's token still goes out when its step ends (its result is processed right after the next batch is launched).
# An idle engine loops without a batch in flight and takes a new request at once. Read at 0.5.7; the profile applies
# it to every SGLang release with the overlap scheduler on (earlier releases' loops not read). vLLM's async scheduling
# and TensorRT-LLM's overlap scheduler also run one step ahead; whether they admit new requests the same way is not
# checked here.
SGLANG_PROFILE = EngineProfile(
    name="sglang",
    version="SGLang 0.4+ (overlap scheduler on by default)",
    overlap_cpu=True,
    schedules_ahead=True,
    cudagraph_sizes=sglang_cudagraph_sizes(),
    eager_launch_s=EAGER_LAUNCH_S,
    moe_kernel=TRITON_FUSED_MOE,
    dp_placement="round_robin",  # DP_PLACEMENT_NOTE
    dp_splits_chunk=True,  # DP_SCHEDULER_NOTE
    dp_conservativeness=SGLANG_DP_CONSERVATIVENESS,
)
# vLLM V0 (releases before 0.8, the only engine until V1's alpha in January 2025): the scheduler, input preparation
# and output processing ran between GPU steps; the multi-step scheduling RFC measured about 4 ms of GPU idle time per
# decode step (vllm-project/vllm#6854), so V0's fixed CPU part is 4 ms, not overlapped.
VLLM_V0_PROFILE = EngineProfile(
    name="vllm",
    version="vLLM V0 (before 0.8)",
    cpu_fixed_s=4e-3,
    eager_launch_s=EAGER_LAUNCH_S,
    moe_kernel=TRITON_FUSED_MOE,
    chat_template=CHAT_RENDER,
)
# vLLM with async scheduling on by default: the scheduler runs one step ahead, so the CPU work of step n+1 overlaps
# step n on the GPU (vllm-project/vllm#19970 "making the scheduler operate one step ahead of the current execution").
# It became the default with vllm-project/vllm#27614 (the last item of the plan vllm-project/vllm#27679, opened
# 2025-10-28); vllm-project/vllm#31998 (2026-01-08) extends that default to EAGLE/MTP speculative decoding. 0.14
# (January 2026) is taken as the first release with it; whether 0.13 already had it is not checked. Pipeline
# parallelism kept it off until vllm-project/vllm#32359; the batch queue overlaps PP rounds anyway.
VLLM_ASYNC_PROFILE = EngineProfile(
    name="vllm",
    version="vLLM V1 0.14+ (async scheduling on by default)",
    overlap_cpu=True,
    moe_kernel=TRITON_FUSED_MOE,
    chat_template=CHAT_RENDER,
)
# TensorRT-LLM's PyTorch executor (PyExecutor._executor_loop_overlap: scheduling, input preparation, the TorchSampler's
# per-request token updates and responses on one Python thread, one step ahead of the GPU) costs far more host time per
# running request than vLLM's scheduler alone: NVIDIA measured an average host_step_time of 45.11 ms per iteration for
# GPT-OSS-120B and 44.53 ms for Llama-3.2-1B on GB200 with attention DP 2 and max_batch_size 1536 (1536 requests per
# rank, ISL/OSL 1k/1k), runs they call host-bound (NVIDIA/TensorRT-LLM#10273, Dec 2025). Two models 100x apart in size
# taking the same time says it is per request, not per layer: (45 ms - the 2 ms fixed part) / 1536 = 28 us per request
# per step. The overlap scheduler hides it only while the GPU step is the longer: step = max(gpu, cpu), so a small model
# at thousands of sequences runs at the host's pace. Measured on Grace (GB200); x86 hosts may be faster (not modelled).
TRTLLM_CPU_PER_SEQ_S = 28e-6
# TRTLLM_PP_HOST_SYNC_NOTE: with pp > 1 the PyTorch executor runs PyExecutor._executor_loop_pp, one micro-batch per
# iteration on every rank. On every rank but the last, _forward_step_inter_pp launches the stage's forward, records a
# CUDA event and calls sampler_event.synchronize() before returning (NVIDIA/TensorRT-LLM
# tensorrt_llm/_torch/pyexecutor/py_executor.py as of mid and late 2025, the 1.0 line the published RTX PRO 6000 PP
# table was measured with; earlier 2025 versions synchronised the last rank on its decode instead), so that rank's
# host only then receives the next micro-batch's tokens, updates its requests
# and schedules and prepares it: the rank's host work and its GPU stage run one after the other, not overlapped.
# NVIDIA's own review of a fix there says an early sampler sync "would prevent overlapping" (NVIDIA/TensorRT-LLM#6976,
# Aug 2025), and NVIDIA/TensorRT-LLM#10120 (Dec 2025) removed implicit stream syncs because they "break the overlap
# feature of overlap scheduler and pipeline parallelism". Later releases return the event unsynchronised (the newest
# py_executor.py read); the first such release is not established, so the PyTorch profile keeps the sync.
# TRTLLM_SERIAL_HOST_NOTE: the overlap scheduler's loop (PyExecutor._executor_loop_overlap) is one Python thread that,
# each iteration, schedules the next batch (_schedule), launches its forward (_forward_step: a CUDA-graph replay for a
# pure-decode batch of a captured size, else the model's Python code op by op), launches its sampling (_sample_async),
# and only then handles the previous batch's tokens and responses (_process_previous_batch), as TensorRT-LLM's
# "Overlap Scheduler" docs show the loop; NVIDIA's own feature request to pipeline it (NVIDIA/TensorRT-LLM#13957) names
# "the scheduler, forward dispatch, sampler post-processing, and request management on a single Python thread". So
# what the overlap hides is the GPU's step under all of that host work together: a step run outside a CUDA graph
# costs the host its kernel launches on top of its per-request work. SGLang's overlap scheduler launches the forward
# from a worker thread (SGLang 0.4 managers/tp_worker_overlap_thread.py, TpModelWorkerClient.forward_thread), though
# the two threads share Python's GIL; SGLang's profile is left as it was.
# Which pure decodes replay a graph: the LLM API's default CudaGraphConfig (trtllm_cudagraph_sizes: 1-31, 32, 64, 128,
# no padding); any other decode batch runs eagerly. `trtllm-bench throughput` captures every batch size up to its
# own max_batch_size with padding on (tensorrt_llm/bench/benchmark/utils/general.py get_settings: cuda_graph_config
# max_batch_size = the benchmark's max_batch_size), so sim/setup.py gives its runs graphs for every decode
# (cudagraph_sizes ()); the padding of those runs is not modelled.
TRTLLM_PROFILE = EngineProfile(
    name="trtllm",
    version="TensorRT-LLM 1.x PyTorch backend (overlap scheduler on by default)",
    cpu_per_seq_s=TRTLLM_CPU_PER_SEQ_S,
    overlap_cpu=True,
    cudagraph_sizes=trtllm_cudagraph_sizes(),
    graph_padding=False,
    eager_launch_s=EAGER_LAUNCH_S,
    pp_host_sync=True,
    serial_host_launch=True,
    moe_dp_comm="allgather",
)
# TensorRT-LLM's C++ runtime (TensorRT engines: gptSessionBenchmark's static batches in 0.5-0.6, the C++ batch manager /
# executor after, NIM's TensorRT-LLM profiles): scheduling, input preparation and the per-request updates are C++
# (cpp/tensorrt_llm/batch_manager), not the PyTorch executor's Python, so the 28 us per request above (a PyTorch executor
# measurement) is not applied. No public per-request figure for the C++ runtime was found: its per-request host time is
# not modelled (0), the fixed part stays StepTimeParams.overhead_s, and its CPU/GPU overlap is kept as the PyTorch
# profile's (not checked for this runtime).
TRTLLM_CPP_PROFILE = EngineProfile(
    name="trtllm",
    version="TensorRT-LLM C++ runtime (TensorRT engines; releases before 0.17, NIM)",
    cpu_per_seq_s=0.0,
    overlap_cpu=True,
    cudagraph_sizes=(),
)


# The KV pool of TensorRT-LLM's in-flight batching runtime (the Executor API's batch manager, which NIM's TensorRT-LLM
# profiles run): KvCacheConfig::kDefaultGpuMemFraction = 0.9 of the memory cudaMemGetInfo reports free once the engine
# (weights and its activation buffers) is loaded (NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/executor/executor.h;
# cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, calculateMaxNumBlocks / calculateFreeMemBytes). The total it sees
# is the device's as the CUDA runtime reports it (the framework's figure), not the datasheet's. The PyTorch backend
# keeps the rule: the LLM API's KvCacheConfig.free_gpu_memory_fraction defaults to 0.9 of the memory free after the model
# loads, and `trtllm-bench throughput` passes its --kv_cache_free_gpu_mem_fraction, default .90 ("The percentage of
# memory to use for KV Cache after model load", tensorrt_llm/bench/benchmark/throughput.py). `--engine-defaults trtllm`
# prices its pool this way (sim/setup.py engine_pool_request). The static-batch benchmark of releases 0.5-0.6
# (gptSessionBenchmark) sizes its cache per batch instead and is not sized this way.
TRTLLM_KV_FREE_GPU_MEM_FRACTION = 0.9

# llama.cpp's CUDA backend multiplies f16 weights by cuBLAS with fp16 accumulation: ggml-cuda.cu
# ggml_cuda_op_mul_mat_cublas sets cu_compute_type = CUBLAS_COMPUTE_16F (CUBLAS_COMPUTE_32F only on AMD CDNA) for
# batches above its own matrix-vector kernels (ggml-org/llama.cpp, ggml/src/ggml-cuda/ggml-cuda.cu). Its prompt
# processing over f16 weights therefore runs at the fp16-accumulate tensor rate. Its host and batching are the
# default profile's (llama-bench runs one sequence; nothing else is stated).
LLAMACPP_PROFILE = EngineProfile(
    name="llama.cpp", version="llama.cpp CUDA backend (cuBLAS f16 GEMMs)", fp16_accumulate=True
)


def trtllm_is_cpp_runtime(version: str | None) -> bool:
    """True for a TensorRT-LLM release before 0.17 ("0.5", "0.6.1"), which has only the C++ runtime (TensorRT
    engines); the PyTorch backend arrived in 0.17 (a preview) and is the LLM API's default from 1.0. None: False
    (the profile follows 1.x)."""
    if not version:
        return False
    try:
        major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    except ValueError:
        return False
    return (major, minor) < (0, 17)


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler limits. Token counts are tokens; ratios are fractions of remaining output tokens."""

    name: str = "vllm"  # which engine's defaults these mimic ("vllm" | "sglang" | "trtllm" | "custom")
    max_num_seqs: int = 256  # sequences running at once (vLLM --max-num-seqs, SGLang --max-running-requests)
    max_num_batched_tokens: int = 8192  # tokens per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size)
    enable_prefix_caching: bool = True
    # SGLang-style admission reserve: admit only if free KV also holds ratio x remaining output of all
    # running + new sequences. 0 = vLLM behaviour (admit whenever the first chunk's blocks fit).
    init_new_token_ratio: float = 0.0
    min_new_token_ratio: float = 0.0
    new_token_ratio_decay: float = 0.0  # subtracted per decode step
    # vLLM's --scheduler-delay-factor (V0 scheduler, `Scheduler._passed_delay`): while sequences are
    # running, hold new prompts until the oldest waiting one has waited delay_factor x the latency of
    # the last step that ran prompts, so prompts batch together ("waiting to batch"). 0 = off (default).
    scheduler_delay_factor: float = 0.0
    # whether one step mixes prefill chunks with the running decodes (vLLM V1, TensorRT-LLM's in-flight batching).
    # False: SGLang's prefill-first policy: a step that can take prompt tokens runs them alone and the decodes wait
    # for the next step (python/sglang/srt/managers/scheduler.py get_next_batch_to_run: "Run prefill first if
    # possible", the decode batch only when get_new_batch_prefill returns None; --enable-mixed-chunk, which mixes
    # them, defaults to False in server_args.py)
    mixed_prefill_decode: bool = True
    # per-step CPU cost, CPU/GPU overlap and CUDA-graph padding of the engine these defaults mimic
    profile: EngineProfile = VLLM_PROFILE
    # speculative decoding (kneecap.sim.speculative): each decode step verifies K drafted tokens per sequence and
    # keeps 1 + the run of accepted drafts, drawn per sequence (seeded by spec_seed and the request id), on average
    # 1 + a + a^2 + ... + a^K for one rate a (Leviathan et al. 2023, eq. 1). `speculative` names the method and the
    # acceptance; spec_tokens / acceptance_rate alone mean an EAGLE head at that rate. 0 / None = off.
    spec_tokens: int = 0
    acceptance_rate: float = 0.0
    speculative: SpecDecoding | None = None
    spec_seed: int = 0
    # chunked prefill: a prompt longer than the step's remaining token budget runs in chunks over several steps
    # (vLLM V1 always; SGLang's chunked_prefill_size). False: a prompt runs whole in one step or waits for a step
    # with room for all of it (TensorRT-LLM without chunked context: MicroBatchScheduler, "skip chunking": a
    # context request is scheduled only if all its tokens fit max_num_tokens, else the batch is closed). A prompt
    # longer than max_num_batched_tokens itself (which TensorRT-LLM rejects) is still chunked.
    chunked_prefill: bool = True
    # a running sequence's next prefill chunk gets all its KV blocks or, when too few are free, the most recently
    # admitted running sequences are preempted (recompute) until it fits, itself last (vLLM V1 Scheduler.schedule:
    # allocate_slots returns None and the loop preempts self.running.pop(); vllm/v1/core/sched/scheduler.py, read in
    # 0.10.2, 0.11.0, 0.19.0 and 0.32.0). vLLM V0 (before 0.8) reserved a prompt's blocks whole at admission, which is
    # not modelled; it keeps this V1 rule. False: the chunk shrinks to the free blocks and nothing is preempted for it.
    chunk_whole_or_preempt: bool = False
    # the API server's event-loop CPU seconds per request before the engine sees it (kneecap.sim.frontend; 0: off) and
    # what the figure is ("" when no endpoint or cost was asked for: summaries then say nothing of it)
    frontend_s_per_request: float = 0.0
    frontend_note: str = ""
    # the part of that cost that grows with the request's prompt, CPU seconds per prompt token (gpt-oss's harmony
    # render: sim/config.py chat_frontend_ms_per_prompt_token; 0: none)
    frontend_s_per_prompt_token: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_num_seqs, int) or self.max_num_seqs < 1:
            raise KneecapError(
                f"--max-num-seqs must be a whole number >= 1, got {self.max_num_seqs!r}", "pass e.g. --max-num-seqs 256"
            )
        if not isinstance(self.max_num_batched_tokens, int) or self.max_num_batched_tokens < 1:
            raise KneecapError(
                f"--max-num-batched-tokens must be a whole number >= 1, got {self.max_num_batched_tokens!r}",
                "pass e.g. --max-num-batched-tokens 8192",
            )
        if not (0.0 <= self.min_new_token_ratio <= self.init_new_token_ratio <= 1.0):
            raise KneecapError(
                f"new-token ratios must satisfy 0 <= min ({self.min_new_token_ratio}) <= init ({self.init_new_token_ratio}) <= 1",
                "use e.g. init 0.7, min 0.1 (SGLang) or 0 and 0 (vLLM)",
            )
        if not (self.scheduler_delay_factor >= 0 and math.isfinite(self.scheduler_delay_factor)):
            raise KneecapError(
                f"--scheduler-delay-factor must be a finite number >= 0, got {self.scheduler_delay_factor}",
                "pass e.g. 0 (off) or 0.5",
            )
        if not isinstance(self.spec_tokens, int) or self.spec_tokens < 0:
            raise KneecapError(
                f"speculative tokens per step must be a whole number >= 0, got {self.spec_tokens!r}",
                "pass e.g. spec_tokens=3 (0 = off)",
            )
        if not (0.0 <= self.acceptance_rate <= 1.0):
            raise KneecapError(
                f"draft acceptance rate must be in [0, 1], got {self.acceptance_rate!r}",
                "pass e.g. acceptance_rate=0.7",
            )
        if self.speculative is not None:
            object.__setattr__(self, "spec_tokens", self.speculative.tokens)
        elif self.spec_tokens:
            object.__setattr__(self, "speculative", SpecDecoding("eagle", self.spec_tokens, (self.acceptance_rate,)))
        if not (self.frontend_s_per_request >= 0 and math.isfinite(self.frontend_s_per_request)):
            raise KneecapError(
                f"--frontend-ms-per-request must be a finite number of milliseconds >= 0, got "
                f"{self.frontend_s_per_request * 1e3!r}",
                "pass e.g. --frontend-ms-per-request 5 (your API server's CPU time per request)",
            )
        if not (self.frontend_s_per_prompt_token >= 0 and math.isfinite(self.frontend_s_per_prompt_token)):
            raise KneecapError(
                f"the API server's cost per prompt token must be a finite number >= 0, got "
                f"{self.frontend_s_per_prompt_token!r} s",
                "give a cost per prompt token of 0 or more",
            )
        if self.new_token_ratio_decay < 0:
            raise KneecapError(
                f"new_token_ratio_decay must be >= 0, got {self.new_token_ratio_decay}", "use e.g. 0.001"
            )

    @property
    def tokens_per_decode_step(self) -> float:
        """Expected tokens a decoding sequence gains per step: 1 without speculation, else 1 + the expected run of
        accepted drafts (SpecDecoding.expected_tokens_per_step)."""
        return 1.0 if self.speculative is None else self.speculative.expected_tokens_per_step

    def with_overrides(
        self,
        *,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool | None = None,
        scheduler_delay_factor: float | None = None,
        speculative: SpecDecoding | None = None,
        spec_seed: int | None = None,
    ) -> "EngineConfig":
        """A copy with the user's flags applied (None keeps the default)."""
        changes = {
            k: v
            for k, v in (
                ("max_num_seqs", max_num_seqs),
                ("max_num_batched_tokens", max_num_batched_tokens),
                ("enable_prefix_caching", enable_prefix_caching),
                ("scheduler_delay_factor", scheduler_delay_factor),
                ("speculative", speculative),
                ("spec_seed", spec_seed),
            )
            if v is not None
        }
        return replace(self, **changes) if changes else self


def _vllm_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a vLLM release name ("0.6.3", "v0.23.0"); None if it is not one."""
    try:
        major, minor = (int(x) for x in version.strip().lstrip("v").split(".")[:2])
    except ValueError:
        return None
    return major, minor


def vllm_is_v0(version: str | None) -> bool:
    """True for a vLLM release before 0.8 (the V0 engine): "0.6.3", "0.7"; False for None or 0.8 and later."""
    if not version:
        return False
    if re.match(r"v0(?![.\d])", version.strip(), re.IGNORECASE):  # "V0 (...)": the engine named, not the release
        return True  # (and not "v0.23.0", a release tag)
    release = _vllm_release(version)
    return release is not None and release < (0, 8)


_PRE_RELEASE = re.compile(r"[.-]?(?:rc|a|b|dev|post)\d*$", re.IGNORECASE)  # "0.21.0rc2", "0.11.1.dev3"


def check_release(version: str | None) -> None:
    """A KneecapError, quoting `version` as given, unless it names an engine release as --engine-version takes it:
    whole numbers MAJOR.MINOR[.PATCH] with an optional leading "v" (what kneecap.plan.engines.parse_version reads),
    with an optional pre-release tag ("0.21.0rc2": taken as its release), or vLLM's "V0" engine; None is fine."""
    number = release_number(version)
    if number is not None and not re.fullmatch(r"v?\d+(?:\.\d+)*", number, re.IGNORECASE):
        raise KneecapError(
            f"bad engine version {version!r}", "pass the release as MAJOR.MINOR[.PATCH], e.g. --engine-version 0.11.0"
        )


def release_number(version: str | None) -> str | None:
    """The release an --engine-version names, without a pre-release tag ("0.21.0rc2" -> "0.21.0"), or None for none
    given or vLLM's "V0" engine named without a release ("V0 (Oct 2024)"): what the engine's pool model (`kneecap plan
    --engine-version`) is given."""
    if version is None or re.match(r"v0(?![.\d])", version.strip(), re.IGNORECASE):
        return None
    return _PRE_RELEASE.sub("", version.strip())


def vllm_ships_triton_kernels(version: str | None) -> bool:
    """True for a vLLM release that runs 4-bit MoE experts with triton_kernels' matmul_ogs on Hopper out of the box
    (0.12 and later: VLLM_MARLIN_MOE_NOTE); False for None (the 0.10-0.11 profile) and earlier releases."""
    release = None if not version or vllm_is_v0(version) else _vllm_release(version)
    return release is not None and release >= (0, 12)


def vllm_parses_chat_template(version: str | None) -> bool:
    """True for the vLLM release whose chat endpoint parses the chat template afresh on every request (0.11.0 of the
    releases read: CHAT_FRONTEND_NOTE); False for None and every other release."""
    return bool(version) and not vllm_is_v0(version) and release_number(version) in ("0.11.0", "v0.11.0")


def vllm_renders_harmony(version: str | None) -> bool:
    """True for a vLLM release whose chat endpoint renders gpt-oss prompts with openai-harmony at the measured cost
    (0.10.1 through 0.11.0: CHAT_FRONTEND_NOTE); False for None and every other release."""
    if not version or vllm_is_v0(version):
        return False
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip(), re.IGNORECASE)
    return m is not None and (0, 10, 1) <= tuple(int(x or 0) for x in m.groups()) < (0, 11, 1)


def vllm_async_by_default(version: str | None) -> bool:
    """True for a vLLM release that schedules asynchronously by default (0.14 and later): "0.17.0"; False for None."""
    release = None if not version or vllm_is_v0(version) else _vllm_release(version)
    return release is not None and release >= (0, 14)


def vllm_defaults(device_bytes: int, gpu_name: str = "") -> EngineConfig:
    """vLLM's OpenAI-server defaults for a GPU reporting `device_bytes` of memory (EngineArgs.get_batch_defaults)."""
    seqs, tokens = (1024, 8192) if device_bytes >= 70 * GiB and "a100" not in gpu_name.lower() else (256, 2048)
    return EngineConfig(
        name="vllm",
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        enable_prefix_caching=True,
        profile=replace(VLLM_PROFILE, cudagraph_sizes=vllm_cudagraph_sizes(seqs)),
        chunk_whole_or_preempt=True,
    )


def sglang_defaults(device_bytes: int, pool_tokens: int, context_len: int, dp: int = 1) -> EngineConfig:
    """SGLang's defaults: chunked_prefill_size by GPU memory, max_running_requests from the pool size. Under DP
    attention over `dp` ranks each rank derives its cap from its own pool (pool_tokens // dp; DP_SCHEDULER_NOTE), and
    max_num_seqs is the deployment's, dp times a rank's."""
    gpu_mib = device_bytes / MiB
    chunk = 2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384
    context_len = max(1, context_len)
    dp = max(1, dp)
    rank_tokens = pool_tokens // dp
    running = min(max(int(rank_tokens / context_len * 512), 2048), 4096)
    running = max(1, min(running, rank_tokens // 2))
    return EngineConfig(
        name="sglang",
        max_num_seqs=running * dp,
        max_num_batched_tokens=chunk,
        enable_prefix_caching=True,
        init_new_token_ratio=0.7,
        min_new_token_ratio=0.1,
        new_token_ratio_decay=0.001,
        mixed_prefill_decode=False,
        profile=SGLANG_PROFILE,
    )


def trtllm_defaults(pp: int = 1) -> EngineConfig:
    """TensorRT-LLM's defaults (PyTorch backend, LLM API / trtllm-serve): max_batch_size 2048 and max_num_tokens
    8192 (llmapi BuildConfig defaults); the capacity scheduler's default policy GUARANTEED_NO_EVICT admits a
    request only if the pool can hold it to the end (docs, "Useful Runtime Options"), modelled as an admission
    reserve of 1.0 x the remaining output of every running and new sequence; prefix (block) reuse is on by
    default in the PyTorch backend's KvCacheConfig (enable_block_reuse=True). max_batch_size bounds each
    pipeline micro-batch, so pp stages run pp x 2048 requests in all (_torch/pyexecutor/model_engine.py
    get_max_num_sequences: pp_size x batch_size); max_num_tokens bounds each micro-batch too, as the simulated
    scheduler's per-round budget of pp x max_num_batched_tokens does (steptime.py, PP). Prefills are not chunked:
    the LLM API's enable_chunked_prefill defaults to False (tensorrt_llm/llmapi/llm_args.py BaseLlmArgs, e.g. at
    commit 0004396720054fd8e205cbf616f21f0b57c6b412 and in the 1.x releases), so a prompt runs whole in one step
    (`trtllm-bench throughput` chunks: its --enable_chunked_context defaults to True in
    tensorrt_llm/bench/benchmark/throughput.py, e.g. at commit 56851033051a6f9bd50e22219db64d68722a6f01; some 2025
    releases left it off for the PyTorch backend, NVIDIA/TensorRT-LLM#6956)."""
    return EngineConfig(
        name="trtllm",
        max_num_seqs=2048 * max(1, pp),
        max_num_batched_tokens=8192,
        enable_prefix_caching=True,
        init_new_token_ratio=1.0,
        min_new_token_ratio=1.0,
        new_token_ratio_decay=0.0,
        profile=TRTLLM_PROFILE,
        chunked_prefill=False,
    )


def nim_defaults(pp: int = 1) -> EngineConfig:
    """NVIDIA NIM's TensorRT-LLM profiles: TensorRT-LLM's defaults (trtllm_defaults) run by its C++ runtime
    (TensorRT engines: TRTLLM_CPP_PROFILE), the KV pool sized by the same rule (sim/setup.py engine_pool_request)."""
    return replace(trtllm_defaults(pp), name="nim", profile=TRTLLM_CPP_PROFILE)


def llamacpp_defaults() -> EngineConfig:
    """llama.cpp as llama-bench runs it: one sequence at a time, n_batch 2048 tokens per step (llama-bench's default
    -b 2048), no prompt cache; its CUDA backend's f16 GEMMs accumulate in fp16 (LLAMACPP_PROFILE). The KV pool is the
    planner's ledger."""
    return EngineConfig(
        name="llamacpp",
        max_num_seqs=1,
        max_num_batched_tokens=2048,
        enable_prefix_caching=False,
        profile=LLAMACPP_PROFILE,
    )


def engine_defaults(
    kind: str, *, device_bytes: int, gpu_name: str, pool_tokens: int, context_len: int, pp: int = 1, dp: int = 1
) -> EngineConfig:
    """Named defaults: "vllm", "sglang", "trtllm", "nim" or "llamacpp" (pp: pipeline stages, for TensorRT-LLM's
    per-micro-batch cap; dp: attention data-parallel ranks, for SGLang's per-rank cap)."""
    if kind == "vllm":
        return vllm_defaults(device_bytes, gpu_name)
    if kind == "sglang":
        return sglang_defaults(device_bytes, pool_tokens, context_len, dp)
    if kind == "trtllm":
        return trtllm_defaults(pp)
    if kind == "nim":
        return nim_defaults(pp)
    if kind == "llamacpp":
        return llamacpp_defaults()
    raise KneecapError(f"unknown --engine-defaults {kind!r}", f"use one of {', '.join(ENGINE_DEFAULTS)}")


def at_release(config: EngineConfig, version: str | None) -> EngineConfig:
    """An engine's defaults (config) as the named release runs them: vLLM before 0.8 is V0 (256 sequences, V0's CPU
    time between steps); vLLM 0.14 and later schedule asynchronously (the CPU work overlaps the GPU's); vLLM 0.11.0
    parses the chat template on every chat request and 0.10.1 through 0.11.0 render gpt-oss prompts with
    openai-harmony on the server's event loop at a measured cost (CHAT_FRONTEND_NOTE); TensorRT-LLM before 0.17 has only the C++
    runtime (its profile). None, or any other release: config unchanged."""
    if not version:
        return config
    if config.profile.name == "vllm":
        if vllm_parses_chat_template(version):
            config = replace(config, profile=replace(config.profile, chat_template=CHAT_PARSE))
        if vllm_renders_harmony(version):
            config = replace(config, profile=replace(config.profile, harmony_render=True))
        if vllm_is_v0(version):
            return replace(config, max_num_seqs=256, profile=VLLM_V0_PROFILE)
        if vllm_async_by_default(version):
            return replace(
                config,
                profile=replace(
                    config.profile,
                    overlap_cpu=VLLM_ASYNC_PROFILE.overlap_cpu,
                    version=VLLM_ASYNC_PROFILE.version,
                    marlin_w4a16_moe=False,
                ),
            )
        if vllm_ships_triton_kernels(version):
            return replace(config, profile=replace(config.profile, marlin_w4a16_moe=False))
    if config.profile.name == "trtllm" and trtllm_is_cpp_runtime(version):
        return replace(config, profile=TRTLLM_CPP_PROFILE)
    return config


def trtllm_bench_limits(deployment, isl: int, osl: int) -> tuple[int, int]:
    """(max sequences, max tokens per micro-batch) as `trtllm-bench throughput` sets them for a run of isl/osl tokens
    (tensorrt_llm/bench/build/tuning.py calc_engine_setting + finetune_setting): the requests of isl + osl tokens
    that 0.95 of the GPUs' memory left after the weights holds as KV cache (bytes per element by quantization:
    NVFP4 0.5, FP8 1, else 2; KV heads at least tp), at most 4096 / pp per micro-batch, rounded up (to 32 below
    256, 128 below 1024, else 256; at least 64); tokens = that batch x (1 + isl / osl), at most 32768, rounded up
    (to 256 below 4096 and at least 2048, 512 below 8192, else 1024). Each of the pp micro-batches gets that batch.
    Under attention data parallelism those limits are each rank's (NVIDIA/TensorRT-LLM
    tensorrt_llm/_torch/pyexecutor/py_executor.py _fetch_new_requests: total_max_num_active_requests = tp_size x
    max_num_active_requests; fused_moe_cutlass.py: "The maximum number of tokens in MoE are multiplied by DP size when
    attention DP is enabled"), though the estimate above already counts every GPU's memory: the deployment's limits
    are attention_dp times them."""
    d = deployment
    model = d.model
    elem = {"nvfp4": 0.5, "fp8": 1.0, "fp8-block": 1.0}.get(d.weight_dtype.lower(), 2.0)
    kv_elem = 1.0 if (d.kv_dtype or "").lower().startswith("fp8") else 2.0
    gib = float(1 << 30)
    per_token = 2 * model.num_hidden_layers * max(d.tp, model.num_key_value_heads) * model.head_dim * kv_elem / gib
    available = d.gpu.memory_bytes("device") / gib * d.tp * d.pp - model.total_params * elem / gib
    requests = available * 0.95 / (per_token * (isl + osl))
    raw_bs = min(requests, 4096) / d.pp
    raw_token = min(raw_bs * (1 + isl / osl), 32768)
    bs = _round_up_banded(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), at_least=64)
    tokens = _round_up_banded(raw_token, ((4096, 256), (8192, 512), (math.inf, 1024)), at_least=2048)
    dp = d.attention_dp
    return bs * d.pp * dp, tokens * dp


def _round_up_banded(value: float, bands: tuple[tuple[float, int], ...], at_least: int) -> int:
    """value rounded up to the step of the first (below, step) band it lies below, and at least at_least
    (trtllm-bench's finetune_setting rounding; at_least only binds in the first band)."""
    step = next(step for below, step in bands if value < below)
    return max(at_least, step * math.ceil(value / step))
