"""vLLM's CUDA-graph memory estimate: the graphs it captures, how it sums its measurements, why kneecap cannot
compute the figure from the model, and the default it takes from published logs instead (pure).

Owns the capture sizes a vLLM server takes by default, the rule that turns vLLM's per-mode measurements into the
"Estimated CUDA graph memory" it subtracts from 0.20 (engines.py VLLM_CUDAGRAPH_FROM), the default figure, and the
words the plan prints about it. Does not own the pool formula (engines.py), the activation peak (profile_peak.py) nor non-torch memory
(non_torch.py).

What vLLM does (read in the 0.20.0 and 0.33.0 sdists, the capture sizes also in the 0.21.0-0.31.0 releases and the
0.34.0 wheel: config/vllm.py:2322-2530 _set_cudagraph_sizes, the default mode FULL_AND_PIECEWISE at :339 and the
chunked-local NEVER at model_executor/layers/attention/chunked_local_attention.py:48 as in 0.33.0, but token and
request sizes resolved apart, SPLIT_SIZES_FROM below; the 0.19.0 start-up logs print the same lines; 0.34.0 makes no
estimate by default, ESTIMATE_SKIPPED_FROM below):
  v1/worker/gpu_worker.py determine_available_memory (0.20.0 lines 332-425): after the profile run, unless the
    compilation config's cudagraph_mode is NONE, model_runner.profile_cudagraph_memory() makes the estimate, and
    available = requested - non_kv_cache_memory - the estimate when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    (envs.py: default "1" from 0.20.0, "0" in 0.18.0-0.19.0, which log the estimate without subtracting it). On
    CUDA only in 0.20.0-0.25.0 (not is_rocm(), then is_cuda()); ROCm too from 0.26.0 (is_cuda_alike()).
  v1/worker/gpu_model_runner.py profile_cudagraph_memory (0.20.0 lines 5949-6047; 0.33.0 lines 6268-6414 add the
    encoder graphs' own estimate): for each mode it will capture (FULL for batches of decodes only, PIECEWISE for
    the rest under the default FULL_AND_PIECEWISE) it captures the two largest sizes only, into a scratch pool,
    after torch.accelerator.empty_cache(), and reads the device's free memory (torch.cuda.mem_get_info) before
    and after each: first_capture = the drop over the largest size's warm-up runs and capture, per_graph = the
    drop over the second size's, at least 1 MiB. The estimate is
        max over modes of first_capture + sum over modes of per_graph x (graphs in the mode - 1).
  config/vllm.py (0.20.0 lines 1469-1522): the largest size is min(2 x max_num_seqs x (1 + speculative tokens),
    512, max_num_batched_tokens) unless set (gpt-oss sets 1024: model_executor/models/config.py line 169; from 0.28
    the ceiling is 1024 on data-center Blackwell); the sizes are 1, 2, 4, every 8 below 256 and every 16 from 256,
    up to the largest, with max_num_batched_tokens (0.21+) and max_num_seqs (0.31+) added below it.
    v1/cudagraph_dispatcher.py initialize_cudagraph_keys: FULL takes the sizes up to max_num_seqs.
  Which modes it captures (read in 0.19.0, 0.20.0, 0.21.0, 0.25.0 and 0.33.0): the default cudagraph_mode is
    FULL_AND_PIECEWISE (config/vllm.py, 0.20.0 line 248), and v1/worker/gpu_model_runner.py
    _check_and_update_cudagraph_mode (0.20.0 lines 6345-6385) takes the least CUDA-graph support of the model's
    attention backends (AttentionCGSupport: ALWAYS, UNIFORM_BATCH, UNIFORM_SINGLE_TOKEN_DECODE, NEVER) into
    config/compilation.py resolve_cudagraph_mode_and_sizes (0.20.0 lines 1301-1371): mixed batches stay PIECEWISE
    whatever the support; decode batches get FULL graphs unless a backend's support is NEVER, where the mode falls
    to PIECEWISE alone (lines 1346-1363, attention being a splitting op by default). Every backend kneecap can name
    captures FULL decode graphs (FlashAttention ALWAYS or UNIFORM_BATCH, FlashInfer UNIFORM_BATCH or
    UNIFORM_SINGLE_TOKEN_DECODE, Triton ALWAYS, FlashAttention MLA, FlashMLA and FlashInfer MLA UNIFORM_BATCH,
    CUTLASS MLA UNIFORM_SINGLE_TOKEN_DECODE: v1/attention/backends/), except:
      chunked local attention (Llama 4): model_executor/layers/attention/chunked_local_attention.py wraps the
        backend in a builder whose get_cudagraph_support returns NEVER (0.20.0 lines 41-49; the same in 0.19.0,
        0.21.0, 0.25.0, 0.33.0; the 0.19.0 log of Llama-4-Scout profiles PIECEWISE only);
      MLA on a GPU that is neither compute capability 9.x nor 10.x takes Triton MLA (platforms/cuda.py
        _get_backend_priorities: FlashAttention MLA needs 9.x, FlashMLA 9.x or 10.x, FlashInfer and CUTLASS MLA
        10.x), whose builder is MLACommonMetadataBuilder with the base class's NEVER through 0.21
        (model_executor/layers/attention/mla_attention.py 0.20.0 lines 1203-1210, v1/attention/backend.py line 519);
        from 0.22 TritonMLAMetadataBuilder declares UNIFORM_BATCH (0.22.0 triton_mla.py line 33; 0.25.0, 0.33.0).
    Not modelled: FlexAttention (NEVER in 0.19.0, ALWAYS from 0.20.0; vLLM falls back to it only where no other
    backend fits), speculative decoding, and ROCm's backends.

Why the figure is not computed from the model: it is a reading of the device's free memory, not a sum of tensors.
The device-free figure moves in 2 MiB pages, and per_graph, multiplied by 50 (82 for gpt-oss), is most of the
estimate (57-92% in vLLM 0.19.0's 57 published H100 logs without pipeline parallelism); it ranges 1-26 MiB per
mode with no relation to the model's shape kneecap could derive (Granite-3.1-2B and -8B, both 40 layers: 26 and
6 MiB for PIECEWISE; Llama-3.1-8B at TP 1, 2 and 4: 6, 26 and 6 MiB), so one 2 MiB page is 0.1 GiB of estimate.
What those MiB hold (the driver's memory for the instantiated graph, pool growth where the allocator cannot reuse
the first graph's blocks, lazily loaded kernels) is not visible to a model of the model's shapes.

The default (where the release subtracts the estimate and the user passes none): vLLM's own sum over the server's
graphs per mode (FULL only where its attention backends capture them: no_full_graphs), with each mode's median first capture and median per-graph figure over those 57 logs
(DEFAULT_FIRST_CAPTURE_MIB, DEFAULT_PER_GRAPH_MIB), so a server capturing fewer graphs (a small max_num_seqs) gets a
smaller figure. Predicting each log from the other 56 this way misses by 0.20 GiB in the median and 1.08 GiB at
worst (LEAVE_ONE_OUT_ERROR_GIB; the logs at TP > 1 whose per-graph figure reads 16-26 MiB). Medians per TP (1 or
more) predict no better (0.21 and 1.13 GiB), so none is taken. Where 0.29-0.33 build Model Runner V2, whose
estimate is a capture of the graphs (V2_CAPTURE_EXCESS_GIB below), the default adds the median by which what the logs'
capture took exceeded their estimate. --cudagraph-gib replaces the default, 0 included.
tests/plan/test_plan_cudagraph_memory.py checks the rules on every log and prints docs/engine-model.md's tables.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kneecap.plan.profile_peak import SM90_GPUS, V2_CUDAGRAPH_ESTIMATE_FROM
from kneecap.units import GiB, MiB

DEFAULT_MAX_CAPTURE_SIZE = 512  # config/vllm.py: min(2 x max_num_seqs x decode query length, 512)
# from 0.28 (0.28.0 config/vllm.py:1937-1939 default_max_graph_size = 1024 if is_device_capability_family(100) else
# 512, the same in 0.29.0-0.33.0; 0.26.0 :1795 and 0.27.0 :1834 still min(..., 512)) 1024 on data-center Blackwell
BLACKWELL_MAX_CAPTURE_SIZE = 1024
BLACKWELL_CEILING_FROM = (0, 28)
DATACENTER_BLACKWELL = ("b200", "gb200")
# model_executor/models/config.py GptOssForCausalLMConfig (0.20.0 line 169, 0.33.0 line 559; the 0.19.0 gpt-oss log
# captures up to 1024 too): max_cudagraph_capture_size 1024 unless the user sets the sizes
ARCHITECTURE_MAX_CAPTURE_SIZE = {"GptOssForCausalLM": 1024}
SMALL_SIZES = (1, 2, 4)
STEP_SMALL, STEP_LARGE, LARGE_FROM = 8, 16, 256
ADDS_BATCHED_TOKENS_FROM = (0, 21)  # "ensure max_num_tokens is captured" (0.21.0-0.25.0 wheels/sdist, not 0.20.0)
# `elif max_num_seqs <= max_cudagraph_capture_size: uniform_decode_sizes = [max_num_seqs]` (0.31.0 config/vllm.py
# :2539-2540, 0.32.0 :2443, 0.33.0 :2549); 0.26.0-0.30.0 fill uniform_decode_sizes for speculative decoding only
ADDS_MAX_NUM_SEQS_FROM = (0, 31)
SUBTRACTED_FROM = (0, 20)  # envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default "1"
# gpu_worker.py makes the estimate on CUDA only in 0.20.0 ("not is_rocm()") and 0.21.0-0.25.0 ("is_cuda()"); on
# ROCm too from 0.26.0 ("is_cuda_alike()": 0.26.0 v1/worker/gpu_worker.py:501-506, 0.27.0 :513-517, the same in
# 0.28.0-0.34.0)
ROCM_SKIPPED_THROUGH = (0, 25)
# 0.34.0 makes no estimate with its extensible KV cache, on by default on CUDA and ROCm: profile_cudagraph_memory
# returns 0 (v1/worker/gpu/model_runner.py:1121-1128) and the cache is sized after capture from the memory then in use
# (v1/worker/gpu_worker.py:1088-1092, 1227-1238), which holds the graphs; capture_model logs what they took, "Graph
# capturing finished in N secs, took X GiB" (model_runner.py:1227-1232)
ESTIMATE_SKIPPED_FROM = (0, 34)
MIN_PER_GRAPH_BYTES = MiB  # "Use at least 1 MiB per graph for driver overhead"
# vLLM 0.19.0's 'Estimated CUDA graph memory' over llm-d-planner's published H100 logs without pipeline parallelism
# (tests/plan/data/engine_startup_logs.json 'cudagraph_estimates', checked by tests/plan/test_plan_cudagraph_memory.py)
LOGGED_RANGE_GIB = (0.52, 1.92)
LOGGED_DEPLOYMENTS = 57
LOGGED_MEDIAN_GIB = 0.84
# the medians of those logs' per-mode DEBUG lines ('Estimated <MODE> CUDA graph memory: X MiB first-capture + (N-1) x
# Y MiB per-graph'), MiB; and how far the default they give lands from each log when that log is left out (GiB:
# median, worst); tests/plan/test_plan_cudagraph_memory.py recomputes all three from the logs
DEFAULT_FIRST_CAPTURE_MIB = {"PIECEWISE": 128, "FULL": 260}
DEFAULT_PER_GRAPH_MIB = {"PIECEWISE": 6, "FULL": 6}
LEAVE_ONE_OUT_ERROR_GIB = (0.20, 1.08)
OVERRIDE = "pass the logged 'Estimated CUDA graph memory' with --cudagraph-gib"
# Model Runner V2 (which release builds it for which model: profile_peak.vllm_model_runner; every model from 0.29)
# measures its own estimate from 0.29 (profile_peak.V2_CUDAGRAPH_ESTIMATE_FROM), the same way in 0.29.0-0.33.0:
# v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory (0.29.0 :718-801, 0.30.0 :847-930, 0.31.0 :854-937,
# 0.32.0 :873-957, 0.33.0 :922-1009) points vLLM's graph pool at a throwaway one, allocates a minimal KV cache and runs
# the real capture_model once; CudaGraphManager.capture (0.29.0 :332-347, 0.32.0 :439-454, 0.33.0 :444-459) captures
# every PIECEWISE graph, then only the two largest FULL graphs (_FULL_GRAPH_PROFILING_SAMPLES = 2), reading the
# device's free memory (torch.accelerator.get_memory_info) around each FULL capture. The estimate is capture_model's
# drop in free memory (model_runner.py 0.29.0 :958, 0.32.0 :1125, 0.33.0 :1161: what its "Graph capturing finished in
# N secs, took X GiB" line prints) less the two FULL samples plus first + second x (FULL graphs - 1)
# (_extrapolate_full_graph_memory, at least 1 MiB per graph). So V2 subtracts a capture of the graphs, not V1's
# two-per-mode extrapolation; gpu_worker.py (0.29.0 :570, 0.32.0 :704, 0.33.0 :717) subtracts it as V1's, and logs
# "CUDA graph pool memory: X GiB (actual), Y GiB (estimated)" after the real capture (0.29.0 :798, 0.32.0 :972).
# The same 57 logs print what their (V1) capture took: median 0.10 GiB above their V1 estimate (-0.93 to +0.46; the
# printed figures' difference), so the default under V2 is the V1 default plus that median; it misses each log's
# capture, left out of the medians, by V2_LEAVE_ONE_OUT_ERROR_GIB (median, worst), where the V1 default alone misses
# it by 0.12 and 1.01 GiB. A V2 capture is taken to take what V1's did for the same graphs: no V2 log was found.
V2_CAPTURE_EXCESS_GIB = 0.10
V2_LEAVE_ONE_OUT_ERROR_GIB = (0.12, 0.91)
V2_OVERRIDE = "pass the '(estimated)' figure of the logged 'CUDA graph pool memory' line with --cudagraph-gib"


def max_capture_size(
    version: tuple[int, ...],
    max_num_seqs: int,
    max_num_batched_tokens: int,
    *,
    gpu_name: str = "",
    architecture: str = "",
) -> int:
    """The largest batch vLLM 0.20+ captures a graph for by default: the model's override (gpt-oss: 1024) or
    min(2 x max_num_seqs, 512; 1024 on data-center Blackwell from 0.28), capped at max_num_batched_tokens."""
    ceiling = DEFAULT_MAX_CAPTURE_SIZE
    if version[:2] >= BLACKWELL_CEILING_FROM and gpu_name in DATACENTER_BLACKWELL:
        ceiling = BLACKWELL_MAX_CAPTURE_SIZE
    size = ARCHITECTURE_MAX_CAPTURE_SIZE.get(architecture, min(2 * max_num_seqs, ceiling))
    return min(max_num_batched_tokens, size)


def grid_sizes(largest: int) -> tuple[int, ...]:
    """vLLM's default size grid up to `largest`: 1, 2, 4, every 8 below 256, every 16 from 256."""
    sizes = {s for s in SMALL_SIZES if s <= largest}
    if largest >= STEP_SMALL:
        sizes.update(range(STEP_SMALL, min(largest + 1, LARGE_FROM), STEP_SMALL))
    if largest >= LARGE_FROM:
        sizes.update(range(LARGE_FROM, largest + 1, STEP_LARGE))
    return tuple(sorted(sizes))


def capture_sizes(
    version: tuple[int, ...],
    max_num_seqs: int,
    max_num_batched_tokens: int,
    *,
    gpu_name: str = "",
    architecture: str = "",
) -> tuple[int, ...]:
    """The batch sizes a vLLM 0.20+ server captures graphs for when the user sets none (config/vllm.py; without
    speculative decoding, LoRA or sequence parallelism): the grid up to the largest size, plus from 0.21
    max_num_batched_tokens and from 0.31 max_num_seqs where they lie below it."""
    largest = max_capture_size(
        version, max_num_seqs, max_num_batched_tokens, gpu_name=gpu_name, architecture=architecture
    )
    sizes = set(grid_sizes(largest))
    if version[:2] >= ADDS_BATCHED_TOKENS_FROM and max_num_batched_tokens <= largest:
        sizes.add(max_num_batched_tokens)
    if version[:2] >= ADDS_MAX_NUM_SEQS_FROM and architecture not in ARCHITECTURE_MAX_CAPTURE_SIZE:
        if max_num_seqs <= largest:
            sizes.add(max_num_seqs)
    return tuple(sorted(sizes))


# 0.34.0 resolves two lists (config/vllm.py:2558-2680 _split_cudagraph_capture_sizes): the token counts of the
# PIECEWISE graphs for mixed batches and the request counts of the FULL graphs for batches of decodes
# (v1/worker/gpu/cudagraph_utils.py:153-164, 290-330). Without speculative decoding or sizes the user sets: on
# compute capability 10.0 (B200 / GB200) the token grid up to min(8192, max_num_batched_tokens) and the request grid
# up to max_num_seqs (config/compilation.py:89-131 prefill_cudagraph_capture_grid, decode_cudagraph_capture_grid,
# _walk_grid :78-87); elsewhere the shared sizes of capture_sizes for both, the request counts capped at max_num_seqs;
# gpt-oss, off compute capability 10.0, sets the token sizes to the 0.33 grid below min(max_num_batched_tokens, 1024)
# plus that figure and the request grid up to min(1024, max_num_seqs) (model_executor/models/config.py:837-882)
SPLIT_SIZES_FROM = (0, 34)
GPT_OSS_TOKEN_CAP = 1024
WIDE_PREFILL_TOKENS = 8192  # config/compilation.py: "None (default): 8192 on SM100 GPUs"


def _walk_grid(limit: int, step) -> list[int]:
    """config/compilation.py _walk_grid (0.34.0 :78-87): sizes 1 .. limit, each the next multiple of the largest power
    of two not above step(size)."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_grid(max_tokens: int) -> list[int]:
    """0.34.0 prefill_cudagraph_capture_grid (performance_mode "balanced", the default): 54 sizes at 8192."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))


def decode_grid(max_requests: int) -> list[int]:
    """0.34.0 decode_cudagraph_capture_grid: every count up to 6, then coarser steps (64 sizes at 1024)."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def split_capture_sizes(
    version: tuple[int, ...],
    max_num_seqs: int,
    max_num_batched_tokens: int,
    *,
    gpu_name: str = "",
    architecture: str = "",
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(PIECEWISE token counts, FULL request counts) a vLLM 0.34+ server captures when the user sets none
    (SPLIT_SIZES_FROM)."""
    if gpu_name in DATACENTER_BLACKWELL:
        tokens = min(WIDE_PREFILL_TOKENS, max_num_batched_tokens)
        return tuple(prefill_grid(tokens)), tuple(decode_grid(max_num_seqs))
    if architecture in ARCHITECTURE_MAX_CAPTURE_SIZE:
        cap = min(max_num_batched_tokens, GPT_OSS_TOKEN_CAP)
        legacy = grid_sizes(GPT_OSS_TOKEN_CAP)
        tokens = tuple(sorted({s for s in legacy if s < cap} | {cap}))
        return tokens, tuple(decode_grid(min(GPT_OSS_TOKEN_CAP, max_num_seqs)))
    shared = capture_sizes(version, max_num_seqs, max_num_batched_tokens, gpu_name=gpu_name)
    return shared, tuple(sorted({min(s, max_num_seqs) for s in shared}))


TRITON_MLA_FULL_FROM = (0, 22)  # TritonMLAMetadataBuilder: UNIFORM_BATCH (0.21.0 and before: NEVER)


def no_full_graphs(version: tuple[int, ...], gpu_name: str, *, mla: bool, chunked_local: bool) -> str | None:
    """Why vLLM 0.19+ captures no FULL graphs for this model on this NVIDIA GPU under its default
    FULL_AND_PIECEWISE mode (an attention backend whose CUDA-graph support is NEVER), or None where it captures
    them (see the module docstring for the backends and their support)."""
    if chunked_local:
        return "its chunked local attention supports no full CUDA graph, so vLLM captures PIECEWISE only"
    name = gpu_name.lower()
    if mla and version[:2] < TRITON_MLA_FULL_FROM and not name.startswith(SM90_GPUS + DATACENTER_BLACKWELL):
        return (
            f"its MLA attention runs on Triton MLA on {gpu_name} (the other MLA backends need compute capability 9.x "
            f"or 10.x), which supports no full CUDA graph before vLLM 0.22, so vLLM captures PIECEWISE only"
        )
    return None


def graphs_by_mode(sizes: tuple[int, ...], max_num_seqs: int, full: bool = True) -> dict[str, int]:
    """Graphs per mode under the default FULL_AND_PIECEWISE (v1/cudagraph_dispatcher.py initialize_cudagraph_keys):
    PIECEWISE at every size; FULL, for batches of decodes only, at the sizes up to max_num_seqs, unless the attention
    backend captures none (full=False: no_full_graphs)."""
    graphs = {"PIECEWISE": len(sizes)}
    if full:
        graphs["FULL"] = sum(1 for s in sizes if s <= max_num_seqs)
    return graphs


@dataclass(frozen=True)
class ModeMeasurement:
    """What vLLM measured for one capture mode: graphs it will capture, its first capture and per-graph figures."""

    mode: str
    graphs: int
    first_capture_bytes: int
    per_graph_bytes: int


def estimate_bytes(modes: list[ModeMeasurement]) -> int:
    """vLLM's estimate from its per-mode measurements: the largest first capture (the modes share one pool) plus
    each mode's per-graph figure (at least 1 MiB) for every graph after the first."""
    if not modes:
        return 0
    shared = max(m.first_capture_bytes for m in modes)
    return shared + sum(max(m.per_graph_bytes, MIN_PER_GRAPH_BYTES) * (m.graphs - 1) for m in modes)


_MODE_LINE = re.compile(
    r"Estimated (\w+) CUDA graph memory: ([\d.]+) MiB first-capture \+ \((\d+)-1\) × ([\d.]+) MiB per-graph"
)


def parse_mode_line(line: str) -> ModeMeasurement:
    """One of vLLM's DEBUG lines 'Estimated <MODE> CUDA graph memory: X MiB first-capture + (N-1) × Y MiB
    per-graph' as a measurement (the MiB figures are printed to two decimals)."""
    m = _MODE_LINE.search(line)
    if m is None:
        raise ValueError(f"not a per-mode CUDA graph estimate line: {line!r}")
    return ModeMeasurement(m[1], int(m[3]), round(float(m[2]) * MiB), round(float(m[4]) * MiB))


def default_estimate_bytes(graphs: dict[str, int]) -> int:
    """The default estimate for a server capturing `graphs` per mode: vLLM's sum (estimate_bytes) with each mode's
    median first capture and per-graph figure over the published 0.19.0 logs."""
    return estimate_bytes(
        [
            ModeMeasurement(mode, n, DEFAULT_FIRST_CAPTURE_MIB[mode] * MiB, DEFAULT_PER_GRAPH_MIB[mode] * MiB)
            for mode, n in graphs.items()
            if n > 0
        ]
    )


@dataclass(frozen=True)
class CudaGraphTerm:
    """What engine mode subtracts for vLLM's CUDA graphs: the bytes, the plan's words on them, and where the figure
    came from: "--cudagraph-gib" (the user's), "default" (default_estimate_bytes) or "none" (not subtracted)."""

    bytes: int
    source: str
    basis: str


def vllm_cudagraph(
    version: tuple[int, ...],
    *,
    gpu_name: str,
    amd: bool,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    architecture: str,
    given_bytes: int | None = None,
    mla: bool = False,
    chunked_local: bool = False,
    runner: str = "v1",
) -> CudaGraphTerm:
    """vLLM's CUDA-graph estimate on this release and GPU as engine mode takes it: nothing where the release does not
    subtract it or makes none (ROCm through 0.25), the user's figure where given (0 included), else the default for
    the graphs the server would capture (`runner`, "v1" or "v2": the model runner the release builds for the model,
    profile_peak.model_runner; Model Runner V2's estimate is 0 through 0.28)."""
    name = ".".join(map(str, version[:2]))
    if version[:2] < SUBTRACTED_FROM:
        return CudaGraphTerm(
            0,
            f"not subtracted: vLLM {name} leaves VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off by default (on from 0.20)",
            "none",
        )
    if amd and version[:2] <= ROCM_SKIPPED_THROUGH:
        ignored = " (--cudagraph-gib ignored)" if given_bytes else ""
        return CudaGraphTerm(
            0, f"none: vLLM {name} makes no CUDA-graph estimate on ROCm (v1/worker/gpu_worker.py){ignored}", "none"
        )
    if runner == "v2" and version[:2] < V2_CUDAGRAPH_ESTIMATE_FROM:
        ignored = " (--cudagraph-gib ignored)" if given_bytes else ""
        return CudaGraphTerm(
            0,
            f"none: vLLM {name} builds Model Runner V2 for {architecture}, whose CUDA-graph estimate is 0 through "
            f"0.28 (v1/worker/gpu/model_runner.py profile_cudagraph_memory){ignored}",
            "none",
        )
    if given_bytes is not None:
        return CudaGraphTerm(given_bytes, "--cudagraph-gib", "--cudagraph-gib")
    # the chunked-local wrapper refuses FULL graphs on any platform; ROCm's MLA backends were not read
    why_not = no_full_graphs(version, gpu_name, mla=mla and not amd, chunked_local=chunked_local)
    if version[:2] >= SPLIT_SIZES_FROM:
        sizes, requests = split_capture_sizes(
            version, max_num_seqs, max_num_batched_tokens, gpu_name=gpu_name, architecture=architecture
        )
        graphs = {"PIECEWISE": len(sizes), **({"FULL": len(requests)} if why_not is None else {})}
    else:
        sizes = capture_sizes(
            version, max_num_seqs, max_num_batched_tokens, gpu_name=gpu_name, architecture=architecture
        )
        graphs = graphs_by_mode(sizes, max_num_seqs, full=why_not is None)
    estimate = default_estimate_bytes(graphs)
    measured = version[:2] >= ESTIMATE_SKIPPED_FROM
    if runner == "v2" and V2_CUDAGRAPH_ESTIMATE_FROM <= version[:2] and not measured:
        estimate += round(V2_CAPTURE_EXCESS_GIB * GiB)
        return CudaGraphTerm(estimate, describe_v2_default(name, sizes, graphs, estimate, why_not), "default")
    return CudaGraphTerm(estimate, describe_default(name, sizes, graphs, estimate, why_not, measured), "default")


def describe_default(
    version: str,
    sizes: tuple[int, ...],
    graphs: dict[str, int],
    estimate: int,
    no_full: str | None = None,
    measured: bool = False,
) -> str:
    """The plan's 'CUDA graphs:' words where the release subtracts the estimate and kneecap takes the default
    (`measured`: the release sizes its cache after capturing the graphs and makes no estimate, ESTIMATE_SKIPPED_FROM)."""
    low, high = LOGGED_RANGE_GIB
    counts = ", ".join(f"{mode} {n}" for mode, n in graphs.items())
    firsts = ", ".join(f"{mode} {DEFAULT_FIRST_CAPTURE_MIB[mode]}" for mode in graphs)
    per = ", ".join(f"{mode} {DEFAULT_PER_GRAPH_MIB[mode]}" for mode in graphs)
    loo_median, loo_worst = LEAVE_ONE_OUT_ERROR_GIB
    full = "FULL for batches of decodes up to max_num_seqs" if no_full is None else f"no FULL graphs: {no_full}"
    what = (
        f"vLLM {version} sizes its KV cache after capturing its graphs, so it holds what they take (it makes no "
        "estimate); kneecap takes the estimate earlier releases subtract, the"
        if measured
        else f"vLLM {version} subtracts what it measures at start-up, the"
    )
    override = (
        "pass what 'Graph capturing finished in N secs, took X GiB' logs with --cudagraph-gib" if measured else OVERRIDE
    )
    return (
        f"{estimate / GiB:.2f} GiB, a default: {what} "
        f"device's free memory around capturing the two largest graphs of each mode, the second's figure counted for "
        f"every further graph; kneecap applies that sum to the graphs this server captures ({counts} graphs, sizes "
        f"1-{sizes[-1]}; {full}) with the medians of the {LOGGED_DEPLOYMENTS} "
        f"vLLM 0.19.0 H100 logs without pipeline parallelism in llm-d-planner's accuracy/results/v0.19.0/logs (first "
        f"capture {firsts} MiB; per further graph {per} MiB); those logs read {low:.2f}-{high:.2f} GiB (median "
        f"{LOGGED_MEDIAN_GIB:.2f}), and the default misses a log left out of the medians by {loo_median:.2f} GiB in "
        f"the median, {loo_worst:.2f} at worst; {override}"
    )


def describe_v2_default(
    version: str, sizes: tuple[int, ...], graphs: dict[str, int], estimate: int, no_full: str | None = None
) -> str:
    """The plan's 'CUDA graphs:' words where the release builds Model Runner V2, which measures its estimate by
    capturing the graphs (V2_CAPTURE_EXCESS_GIB), and kneecap takes the default."""
    counts = ", ".join(f"{mode} {n}" for mode, n in graphs.items())
    full = "FULL for batches of decodes up to max_num_seqs" if no_full is None else f"no FULL graphs: {no_full}"
    loo_median, loo_worst = V2_LEAVE_ONE_OUT_ERROR_GIB
    return (
        f"{estimate / GiB:.2f} GiB, a default for Model Runner V2's measurement: vLLM {version} builds Model Runner "
        f"V2, which subtracts what capturing this server's graphs takes at start-up ({counts} graphs, sizes "
        f"1-{sizes[-1]}; {full}), capturing every PIECEWISE graph and extrapolating the FULL ones from the two "
        f"largest; kneecap takes Model Runner V1's estimate for those graphs with the medians of the {LOGGED_DEPLOYMENTS} vLLM "
        f"0.19.0 H100 logs without pipeline parallelism in llm-d-planner's accuracy/results/v0.19.0/logs, plus "
        f"{V2_CAPTURE_EXCESS_GIB:.2f} GiB, the median by which what those logs' capture took exceeded their estimate "
        f"(no Model Runner V2 log was found); it misses a log's capture left out of the medians by {loo_median:.2f} "
        f"GiB in the median, {loo_worst:.2f} at worst; {V2_OVERRIDE}"
    )
