"""Step time: how long one engine step (one forward pass over a batch) takes, priced operator by operator.

Owns the formula and its named, overridable constants; not batching (scheduler.py), the clock
(engine.py) nor the efficiency data (efficiency.py reads data/efficiency.json). No per-GPU profiling of
any serving engine: rates are datasheet peaks (gpus.json) x what public microbenchmarks reach.

One step over a batch of T tokens (S sequences; decodes and prefill chunks), per GPU, summed over layers:

    gpu_s  = sum over operators of max(FLOPs / achievable FLOP/s, bytes / achievable HBM bytes/s)
           + communication (TP all-reduce, EP all-to-all, PP sends; not overlapped with compute)
    step_s = gpu_s + cpu_s, or max(gpu_s, cpu_s) when the engine overlaps its CPU work (engine profile); a step
             outside a CUDA graph lasts at least its kernel launches, which TensorRT-LLM's PyTorch executor makes on
             the thread of its CPU work: max(gpu_s, cpu_s + launches) there (sim/config.py TRTLLM_SERIAL_HOST_NOTE)

  GEMMs (per layer, TP-sharded): attention projections, dense MLP / shared experts, router; each
      FLOPs 2 x params x T, bytes params x bytes/param + activations in and out (T x width x 2 B).
  MoE routed experts (grouped GEMM): FLOPs 2 x expert params x T x top_k; bytes of the distinct experts
      the batch touches, E x (1 - (1 - k/E)^T) (uniform routing); with expert parallelism the busiest
      rank sets the time: mean load + sqrt(2 ln ep) standard deviations of a binomial load. Two grouped GEMMs
      (gate_up: 2/3 of the weights and FLOPs, down: 1/3), each max(compute, weights + its activations), plus
      the gated activation and the top-k combine as memory-bound kernels of their own (3I + h bytes x 2 per
      assignment, h x 2 per token), as vLLM's fused_moe and TensorRT-LLM's CUTLASS MoE run them. Where the
      engine runs the Triton fused_moe kernel (profile moe_kernel) and a published timing of that kernel exists for
      the experts' dtype and GPU class, the whole call is priced from it instead (sim/moe_kernels.py: the table's
      factor over the roofline at the same rows per expert), less the gaps of the kernels inside it.
  Attention, per sequence group (decodes, then prefill chunks), per layer kind:
      GQA/MHA  FLOPs 4 x heads/tp x head_dim x pairs; bytes KV bytes/token/GPU x cached tokens read
      sliding  the same, each query's pairs capped at the window
      MLA      decode absorbed: 2 x heads x (2 kv_lora_rank + qk_rope_head_dim) x pairs over the latent
               (DeepSeek-V2, sec. 2.1); prefill as multi-head attention: 2 x heads x (head_dim + v) x pairs,
               queries and keys of head_dim = d_h + d_h^R (192), values of v = d_h = head_dim - qk_rope_head_dim
               (128; DeepSeek-V2 sec. 2.1: the decoupled RoPE key is on q and k only)
      linear   the recurrent state, read and written once per sequence
      pairs    decode of context c: c; prefill chunk of n after p cached: n p + n(n+1)/2 (causal)
  Kernel boundaries: every kernel of the step costs StepTimeParams.kernel_gap_s on top of its roofline time.
      The small kernels a decode step is made of (norms, rope, top-k, quantisation, sorting) each take a few
      microseconds whatever their bytes: an H200 trace of DeepSeek-V3.1 at concurrency 4 shows the 12 kernels
      before the first fused-MoE GEMM taking 39.8 us with their inter-kernel spacing, 3.3 us each
      (vllm-project/vllm#28084); a graph-replayed tiny op alone takes 1.1-1.3 us (pytorch/pytorch#161104), the
      floor under that. Kernels per layer are counted from the
      engines' decoder-layer forwards (vLLM LlamaDecoderLayer / FusedMoE / DeepseekV2MLAAttention):
      2 norms; GQA attention 5 (qkv, rope, cache write, attention, o) or MLA 11 (fused q_a/kv_a, 2 norms,
      q_b, rope, W_UK bmm, cache write, 2 attention, W_UV bmm, o); dense MLP 3 (gate_up, act, down) or MoE 7
      (router, top-k, align, 2 grouped GEMMs, act, sum) + 3 per shared-expert block; with fp8/fp4
      activations one quantisation kernel per GEMM group; 6 for embedding, final norm, LM head, sampling.
      This is what makes a 61-layer MoE slower at small batches than its weight reads alone.
  GEMM weight streaming: a decode GEMM reads its weights at the GPU's gemm_hbm fraction (efficiency.json;
      the hbm fraction where no skinny-GEMM measurement exists).
  Embedding gather and LM head: the head is a GEMM over the S sampled rows (vocab x hidden / tp);
      sampling reads the S x vocab fp32 logits SAMPLING_PASSES times.
  TP all-reduce: 2 per layer (Megatron-LM, Shoeybi et al. 2019) of T x hidden x 2 B, ring:
      latency + 2(n-1)/n x bytes / bus bandwidth (nccl-tests' busbw, efficiency.json);
      latency = base + 2(n-1) x per-hop (NCCL src/graph/tuning.cc, Ring/LL: baseLat 3.6 us; hwLat 0.47 us
      per hop over NVLink, 1.0 us over PCIe), for a message up to CUSTOM_ALLREDUCE_MAX_BYTES (the engine's own
      all-reduce kernel); a larger one is NCCL's, priced by NCCL's cost model at its fastest ring protocol
      (NCCL_RING: LL, LL128, Simple). With DP attention the attention output is not all-reduced.
  EP all-to-all (DP attention + expert parallelism): dispatch and combine per MoE layer, each
      T_rank x top_k x hidden x 2 B x (ep-1)/ep over the link. TensorRT-LLM's CUTLASS MoE gathers instead
      (moe_dp_gathers; NVIDIA/TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py, 2025:
      select_alltoall_method_type, forward_chunk, reducescatter_or_allreduce): per MoE layer an all-gather of every
      rank's tokens (activations at the experts' input dtype, top-k ids and weights) and a reduce-scatter of the bf16
      outputs, each (ep-1)/ep x T x bytes per token through every rank at the bus bandwidth; each rank then runs its
      experts over all T gathered tokens and combines all of them.
  DP attention, uneven steps: each rank runs its own requests and a prompt runs whole on the rank it was given, while
      every rank waits for the others at each MoE layer; a step with n prompt chunks prices its attention side (the
      attention projections, prefill attention, the attention's element-wise kernels) on the busiest rank: the
      decodes' even share plus 1 / min(n, ranks) of the prompt tokens (StepTimeModel._dp_busiest). That is
      TensorRT-LLM's placement (a new request to the rank with the fewest active tokens). SGLang deals each request to
      the next rank in turn whatever the load and keeps it there (sim/config.py DP_PLACEMENT_NOTE), so the engine
      tracks each request's rank and a step's attention side is its busiest rank's own: the attention projections and
      element-wise kernels of its tokens, its decodes' K/V reads and its prompts' attention, the rank whose sum is the
      largest; the MoE, the head and the communication still see every rank's tokens (StepTimeModel._busiest_rank).
      A decode step then replays the CUDA graph of the busiest rank's batch on every rank, each padding its own batch
      to that capture size, and runs eagerly only when that rank's batch is above the largest (_graph_rows).
  PP: the step is one round of as many micro-batches as stages, as both engines run it. TensorRT-LLM's PyTorch
      backend (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/py_executor.py, e.g. at commit
      9521caf4696c1fb79b0f946f0d980f8f0ebd3e64 and in the 1.x releases: PyExecutor sets num_micro_batches =
      pp_size, and pp > 1 always runs _executor_loop_pp, never the overlap scheduler's loop) schedules one micro-batch per iteration from the requests not in flight, each limited by
      max_batch_size and max_num_tokens (model_engine.py get_max_num_sequences: pp x max_batch_size requests in
      all; trtllm-bench sizes max_batch_size per micro-batch, bench/build/tuning.py finetune_setting: requests / pp);
      hidden states go stage to stage by NCCL send/recv on the GPU streams (_torch/distributed/communicator.py
      PPCommNCCL), the last stage samples and its tokens go back rank to rank by MPI (py_executor.py "send/recv
      chain: (pp_size - 1) -> 0 -> 1 -> ..."), and a micro-batch's requests are updated and scheduled again only
      then. vLLM V1 (vllm/v1/engine/core.py step_with_batch_queue, batch_queue_size = pp) likewise schedules while
      its queue has room, blocks on the oldest batch, updates from its output, then schedules again; its
      max_num_seqs bounds all running requests (a request in flight has nothing to schedule), max_num_batched_tokens
      each batch. Decoder layers split evenly over stages (TensorRT-LLM tensorrt_llm/mapping.py Mapping.pp_layers:
      torch.tensor_split, the first L mod pp stages one layer more; vLLM vllm/distributed/utils.py get_pp_indices:
      the L mod pp extra layers on the stages before the last), the
      embedding sits on the first stage and the final norm, LM head and sampling on the last. So a round of m
      micro-batches (at most pp; a decode is one unit, a prefill chunk one unit per token budget) of T/m tokens lasts
          max(m x slowest stage, one micro-batch's pass + its host work, the host work of all m micro-batches)
      a stage being its decoder layers' share (ceil(L/pp)/L; the last floor(L/pp)/L plus the head) of a micro-batch's
      pass, plus one send of T/m x hidden x 2 B; the pass is every stage plus (pp-1) sends. Fewer micro-batches
      than stages leave stages idle (the bubble): the round is then one micro-batch's pass and host work.
      TensorRT-LLM's PyTorch executor does not overlap a rank's host work with its own stage: every rank but the last
      synchronises on its stage's forward (_forward_step_inter_pp: sampler_event.synchronize()) before it receives,
      updates and prepares the next micro-batch (engine profile pp_host_sync, sim/config.py
      TRTLLM_PP_HOST_SYNC_NOTE), so the stages before the last last their share of the pass plus one micro-batch's
      host work: the round is max(m x (first stages' share + host work of one micro-batch), m x last stage, ...).
      The scheduler's token budget per round is pp x max_num_batched_tokens (one per micro-batch).

Dtype of the GEMMs: bf16/fp16 -> bf16 peak; fp8/fp8-block/int8 (W8A8) -> fp8 peak; nvfp4/mxfp4 ->
fp4 peak where the GPU has it, else bf16 (weight-only: the kernels upcast the 4-bit weights and multiply
bf16 activations; vLLM's mxfp4.py runs MXFP4 MoE with Marlin or triton_kernels' matmul_ogs there, both
W4A16); int4/awq/gptq (W4A16) -> bf16 peak. Where the engine runs such 4-bit experts with the Marlin MoE kernel
(vLLM before 0.12 on Hopper: sim/config.py VLLM_MARLIN_MOE_NOTE), their grouped GEMMs reach at most the GPU's
moe_marlin_w4a16 fraction of the bf16 peak (efficiency.json: 0.257 on H100, an nsys capture of Marlin's MXFP4 MoE
GEMM at 16k-token prefill chunks, sgl-project/sglang#38884): Marlin multiplies with Ampere's mma.sync and dequantises
in registers, so on Hopper it is bound by instruction issue, not by the tensor cores nor by HBM.
Attention runs at the bf16 attention rate. Each GEMM group (attention
projections, dense MLP / shared experts, routed experts, LM head) takes the path of its own weights' dtype, as the
plan's ledger prices them (run_part_dtypes): the LM head and embedding stay bf16 in FP8/FP4 checkpoints (NVIDIA's
ModelOpt hf_quant_config.json lists lm_head in exclude_modules, e.g. nvidia/DeepSeek-V3.1-NVFP4 and
nvidia/Llama-3.1-70B-Instruct-FP8; the HF fp8, mxfp4, AWQ and GPTQ schemes keep it too), gpt-oss's attention is bf16.
GEMM rate by shape: where data/efficiency.json has a by-M curve for the GPU and dtype (gemm_<dtype>_by_m:
MI300X FP8 from aiter's tuned GEMMs), a GEMM of M rows runs at that curve's fraction of the peak at M (M =
the step's tokens; a routed expert's rows = its share of the assignments); else at the kernel table's rate for
each GEMM's own (M, N, K) on this GPU (sim/kernels.py: data/kernels/h200.json, measured on an H200, taken by
analogy or moved to other GPUs as that module states): attention projections (qkv, o), MLP (gate_up, down),
each routed-expert grouped GEMM (its whole load of rows at one expert's shape), LM head, each group's time the
sum of its GEMMs'. 4-bit experts run weight-only on a GPU without FP4 stream their weights at moe_w4a16_hbm.
Prefill attention runs at the fraction of the bf16 peak the engine's kernel family reaches for one layer's attention
FLOPs in the step at the model's head dim, where that family has a table for this GPU (sim/attention.py: e.g. vLLM's
FlashAttention-3 on Hopper), else at the kernel table's fraction for those FLOPs; decode attention streams K/V at the
table's bytes/s for one layer's cached bytes in the step.
Element-wise kernels, by their bytes at the HBM rate: two fused add+RMSNorm per layer (read x and the residual,
write both: 4h), SiLU-and-mul (read 2I, write I), rotary (read and write q and k), the KV-cache write (read k and
v, write them at the cache dtype); vLLM's fused_add_rms_norm, silu_and_mul, rotary_embedding and
reshape_and_cache_flash kernels each do exactly that.
"""

from __future__ import annotations

import copy
import math
import numbers
from bisect import bisect_left
from dataclasses import dataclass, fields, replace

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.model.kv import kv_dtype_bytes, kv_heads_per_gpu, state_bytes_per_sequence
from kneecap.model.params import params_per_rank
from kneecap.sim.attention import prefill_attention
from kneecap.sim.efficiency import Efficiency, curve_at, efficiency_for
from kneecap.sim.kernels import table_for
from kneecap.sim.moe_kernels import distinct_experts, pricer_for

# NCCL ring all-reduce, LL protocol, latency per hop in seconds (NCCL src/graph/tuning.cc hwLat, Ring/LL).
HOP_LATENCY_S = {"nvlink": 0.47e-6, "xgmi": 0.47e-6, "pcie": 1.0e-6}
# An all-reduce of up to this many bytes runs the engine's own one-kernel all-reduce (one-shot / two-shot over
# NVLink peer memory), priced as the latency above plus the ring's bytes at the bus bandwidth; larger ones go to NCCL.
# vLLM's CustomAllreduce (vllm/distributed/device_communicators/custom_all_reduce.py: max_size = 8192 * 1024;
# should_custom_ar: inp_size < max_size where the GPUs are fully connected or world_size == 2); SGLang runs the same
# kernel with the same limit; TensorRT-LLM's AUTO strategy (its own one-/two-shot kernels, NCCL above) is taken as the
# same (not checked). Over PCIe it is used only between two GPUs.
CUSTOM_ALLREDUCE_MAX_BYTES = 8192 * 1024
# NCCL's own cost model for an intra-node all-reduce (NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults):
# time = baseLat + 2 (n - 1) x hwLat + bytes x 2 (n - 1) / n / bus bandwidth, NCCL taking the fastest of
#   Ring/LL     baseLat 6.6 us, hwLat 0.6 us (NVLink) / 1.0 (PCIe), bus bandwidth min(llMaxBw, 0.5 x busbw)
#               (llMaxBw, GB/s, one node: Ampere 87.7, Hopper 141, Blackwell 282; none known for other GPUs)
#   Ring/LL128  baseLat 14.0 us, hwLat 1.9 us, 0.92 x busbw (NVLink only: isLL128Enabled needs an NVLink path)
#   Ring/Simple baseLat 8.4 us, hwLat 3.4 us (NVLink) / 5.7 (PCIe), busbw
# busbw = efficiency.json's large-message nccl-tests figure (the achievable Simple rate). NVLS (NVLink SHARP, which
# NCCL picks on NVSwitch systems when it may: ~475-480 GB/s busbw on 8 H100/H200, nccl-tests#212 and #272) is not
# used: it needs NCCL's cuMem allocations, which vLLM turns off on import (NCCL_CUMEM_ENABLE=0, vllm/__init__.py and
# later vllm/env_override.py, citing NVIDIA/nccl#1234; kept on only where multi-node NVLink's IMEX channels exist),
# and SGLang starts with NCCL_CUMEM_ENABLE=0 and NCCL_NVLS_ENABLE=0 (sglang/srt/entrypoints/engine.py
# _set_envs_and_config); whether a TensorRT-LLM release runs NVLS was not established, so it takes the ring too.
NCCL_RING = {  # protocol -> (baseLat s, {hw: hwLat s})
    "LL": (6.6e-6, {"nvlink": 0.6e-6, "pcie": 1.0e-6}),
    "LL128": (14.0e-6, {"nvlink": 1.9e-6}),
    "Simple": (8.4e-6, {"nvlink": 3.4e-6, "pcie": 5.7e-6}),
}
NCCL_LL_MAX_BUSBW = {"Ampere": 87.7e9, "Hopper": 141e9, "Blackwell": 282e9}
# GPU -> the row of llMaxBws NCCL takes by compute capability (sm_80-89: Ampere's, sm_90: Hopper's, sm_100+:
# Blackwell's); AMD GPUs (RCCL) have no row here: no LL cap
NCCL_GENERATION = {
    **dict.fromkeys(("a100-40", "a100-80", "l4", "l40s", "rtx-4090"), "Ampere"),
    **dict.fromkeys(("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h20"), "Hopper"),
    **dict.fromkeys(("b200", "gb200", "b300", "rtx-5090", "rtx-pro-6000"), "Blackwell"),
}
# Passes over the fp32 logits when sampling (softmax, then top-k/top-p selection): a round count, not a
# measurement; the term is small next to the LM head GEMM except for tiny models.
SAMPLING_PASSES = 2
LOGIT_BYTES = 4  # fp32 logits


# The largest scale on a catalog rate: above 1.0 a GPU (or engine) is faster than the catalog's achievable figure
# (newer kernels, a higher clock); `kneecap calibrate` fits up to this.
FACTOR_MAX = 4.0


@dataclass(frozen=True)
class StepTimeParams:
    """The step-time model's scales and constants; every one overridable (and fitted by `kneecap calibrate`)."""

    # Scale on the achievable GEMM and attention FLOP/s of data/efficiency.json (1.0 = as the public
    # matmul / flash-attention microbenchmarks reach). A serving engine's kernels at its own shapes
    # reach at most that; calibrate it against a measured sweep.
    mfu: float = 1.0
    # Scale on the achievable HBM bytes/s of data/efficiency.json (1.0 = as a tuned memory-bound kernel
    # reaches). Calibrate it.
    bw_efficiency: float = 1.0
    # Scale on the achievable all-reduce bus bandwidth of data/efficiency.json (nccl-tests busbw).
    link_efficiency: float = 1.0
    # NCCL ring/LL base latency, seconds (src/graph/tuning.cc baseLat[Ring][LL] = 3.6 us).
    allreduce_base_latency_s: float = 3.6e-6
    # Per-hop latency, seconds; None -> by interconnect (HOP_LATENCY_S).
    hop_latency_s: float | None = None
    # Fixed CPU cost per step (scheduling, input preparation, output processing) before its per-sequence
    # part (the engine profile's cpu_per_seq_s, sim/config.py). The vLLM multi-step RFC measured ~4 ms of GPU
    # bubble per decode step in V0 (vllm-project/vllm#6854); V1 cut it; 2 ms is a round middle. Calibrate it.
    overhead_s: float = 0.002
    # Bytes per activation element sent in all-reduces and pipeline sends (bf16).
    activation_bytes: int = 2
    # Seconds each kernel of a step adds beyond its roofline time: 3.3 us (module docstring, Kernel boundaries:
    # vllm-project/vllm#28084; a bare graph-replayed op is 1.1-1.3 us, pytorch/pytorch#161104).
    kernel_gap_s: float = 3.3e-6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "hop_latency_s":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                example = "1e-06, or none to take it from the interconnect" if f.default is None else f.default
                raise KneecapError(
                    f"step-time {f.name} must be a finite number, got {value!r}", f"pass e.g. {f.name}={example}"
                )
        if self.activation_bytes != int(self.activation_bytes):
            raise KneecapError(
                f"step-time activation_bytes must be a whole number of bytes, got {self.activation_bytes!r}",
                "use 2 (bf16)",
            )
        for name in ("mfu", "bw_efficiency", "link_efficiency"):
            value = getattr(self, name)
            if not (0 < value <= FACTOR_MAX):
                raise KneecapError(
                    f"step-time {name} must be in (0, {FACTOR_MAX:g}], got {value!r}", f"pass e.g. {name}=0.8"
                )
        for name in ("allreduce_base_latency_s", "overhead_s", "kernel_gap_s"):
            if getattr(self, name) < 0:
                raise KneecapError(
                    f"step-time {name} must be >= 0, got {getattr(self, name)!r}", f"pass {name}=0 or more"
                )
        if self.hop_latency_s is not None and self.hop_latency_s < 0:
            raise KneecapError(f"step-time hop_latency_s must be >= 0, got {self.hop_latency_s!r}", "pass 0 or more")
        if self.activation_bytes < 1:
            raise KneecapError(f"activation_bytes must be >= 1, got {self.activation_bytes}", "use 2 (bf16)")

    @classmethod
    def from_dict(cls, data: dict) -> "StepTimeParams":
        """Build from a mapping (e.g. a calibration file or `--step-param k=v`); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise KneecapError(f"unknown step-time parameter(s) {unknown}", f"use any of {', '.join(sorted(known))}")
        return replace(cls(), **data)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def dtype_class(dtype: str, gpu) -> str:
    """ "bf16" | "fp8" | "fp4": the tensor-core path GEMMs over weights of `dtype` take on this GPU (module docstring)."""
    dtype = dtype.lower()
    if dtype in ("fp8", "fp8-block", "int8") and gpu.fp8_flops:
        return "fp8"
    if dtype in ("nvfp4", "mxfp4") and gpu.fp4_flops:
        return "fp4"
    return "bf16"  # 4-bit without FP4 hardware: weight-only (W4A16), bf16 MMA (module docstring)


def gemm_class(deployment: Deployment) -> str:
    """The tensor-core path of the deployment's weight dtype (the decoder's Linear layers) on its GPU."""
    return dtype_class(deployment.weight_dtype, deployment.gpu)


def _peak(gpu, cls: str) -> float:
    return {"bf16": gpu.bf16_flops, "fp8": gpu.fp8_flops, "fp4": gpu.fp4_flops}[cls]


def run_part_dtypes(deployment: Deployment) -> dict[str, str]:
    """The dtype each part's weights are read and multiplied in, as the plan's ledger prices them
    (kneecap.plan.build): as shipped when the deployment's dtype is the checkpoint's own (that of its largest part,
    as the plan sets it when no --weight-dtype is given; mixed-precision checkpoints keep their parts' dtypes:
    NVIDIA's ModelOpt FP8/NVFP4 files list lm_head in exclude_modules, gpt-oss keeps attention in bf16); otherwise
    the decoder's Linear parts at the deployment's dtype and the embedding, norms, router and LM head as shipped
    (kneecap.model.params.part_dtypes_at, which the ledger prices too: every quantization scheme replaces the
    decoder Linear layers only, kneecap.model.quant)."""
    from kneecap.model.params import main_dtype, part_dtypes, part_dtypes_at

    main = main_dtype(deployment.model)
    if main is None or deployment.weight_dtype.lower() == main.lower():
        return part_dtypes(deployment.model)
    return part_dtypes_at(deployment.model, deployment.weight_dtype)


def _part_bytes(deployment: Deployment) -> dict[str, float]:
    """Whole-model weight bytes per part (kneecap.model.params) in run_part_dtypes' dtypes, rescaled by --params."""
    from kneecap.model.params import param_breakdown, part_dtypes, weight_bytes_by_part
    from kneecap.model.weights import weight_bytes

    model = deployment.model
    dtypes = run_part_dtypes(deployment)
    if dtypes == part_dtypes(model):
        parts = {k: float(v) for k, v in weight_bytes_by_part(model, None).items()}  # exact GGUF bytes where known
    else:
        parts = {
            k: float(weight_bytes(n, dtypes.get(k, deployment.weight_dtype))) for k, n in param_breakdown(model).items()
        }
    scale = deployment.params_override / model.total_params if deployment.params_override else 1.0
    return {k: v * scale for k, v in parts.items()}


def _moe_input_bytes(dtype: str) -> float:
    """Bytes per element of the activations TensorRT-LLM's CUTLASS MoE gathers: NVFP4 experts quantise them to FP4
    first (half a byte and one scale byte per 16), per-tensor FP8 experts to FP8, others send bf16 (block-FP8 experts
    quantise inside the kernel) (fused_moe_cutlass.py forward_chunk: fp4_quantize / static_quantize_e4m3_per_tensor
    before allgather)."""
    return {"nvfp4": 0.5 + 1.0 / 16, "fp8": 1.0}.get(dtype, 2.0)


def moe_dp_gathers(comm: str, gpu_name: str, ep: int, top_k: int) -> bool:
    """Whether the MoE under DP attention gathers every rank's tokens (all-gather + reduce-scatter) rather than sending
    each token to its experts' ranks (all-to-all). comm "allgather" (TensorRT-LLM's CUTLASS MoE): its
    select_alltoall_method_type turns the all-to-all on only for an EP group larger than top_k on a multi-node NVLink
    system (GB200 NVL; MnnvlMemory.supports_mnnvl), DeepEP only when asked by environment variable; otherwise every
    rank all-gathers the tokens and reduce-scatters the outputs (reducescatter_or_allreduce). "" (the others):
    all-to-all."""
    if comm != "allgather":
        return False
    return not (gpu_name.startswith("gb") and ep > top_k)


class StepTimeModel:
    """Per-GPU coefficients of the operator model for one Deployment, precomputed once; `seconds()` per step.

    ep: expert-parallel degree (routed experts split whole over ep GPUs instead of sharded by TP; 1 = off).
    dp_attention: attention data-parallel over the tp GPUs (SGLang --enable-dp-attention, vLLM DP+EP):
    each GPU holds all attention weights and attends only its own 1/tp of the sequences, experts go
    expert-parallel over all of them, and tokens move by all-to-all instead of all-reduce.
    """

    def __init__(
        self,
        deployment: Deployment,
        params: StepTimeParams | None = None,
        *,
        ep: int | None = None,
        dp_attention: bool | None = None,
        efficiency: Efficiency | None = None,
    ):
        self.deployment = deployment
        self.params = params = params or StepTimeParams()
        model, gpu, tp, pp = deployment.model, deployment.gpu, deployment.tp, deployment.pp
        ep = deployment.ep if ep is None else ep  # None: as the deployment states (Deployment.ep / dp_attention)
        dp_attention = deployment.dp_attention if dp_attention is None else dp_attention
        if gpu.bf16_flops <= 0 or gpu.hbm_bandwidth_bytes_s <= 0:
            raise KneecapError(f"GPU {gpu.name} has no FLOP/s or bandwidth figure", "pick a GPU with datasheet figures")
        if not isinstance(ep, int) or ep < 1:
            raise KneecapError(
                f"expert parallelism must be a whole number >= 1, got {ep!r}", "pass ep=1 (off) or the GPU count"
            )
        if dp_attention and not model.is_moe:
            raise KneecapError("DP attention needs a mixture-of-experts model", "drop dp_attention for a dense model")
        if dp_attention:
            ep = max(ep, tp)
        self.ep, self.dp_attention = ep, dp_attention
        self.efficiency = eff = efficiency or efficiency_for(gpu.name)
        # each GEMM group runs on the tensor-core path of its own weights' dtype (run_part_dtypes): a ModelOpt
        # NVFP4 checkpoint's LM head, gpt-oss's attention, every checkpoint's router are bf16 GEMMs
        dtypes = {k: v.lower() for k, v in run_part_dtypes(deployment).items()}
        # per path: GEMM FLOP/s flat (best shape), the peak, and the fraction of it by the GEMM's rows where a kernel
        # table measured it (efficiency.json gemm_<dtype>_by_m; None: flat); the weight dtype's path as attributes
        self._rates = {
            c: (_peak(gpu, c) * eff.gemm(c) * params.mfu, _peak(gpu, c) * params.mfu, eff.gemm_curve(c))
            for c in ("bf16", "fp8", "fp4")
            if _peak(gpu, c)
        }
        self.cls = gemm_class(deployment)
        self.flop_rate, self.gemm_peak, self.gemm_curve = self._rates[self.cls]
        from kneecap.model.params import param_breakdown

        pcount = param_breakdown(model)  # params per part, whole model (GEMM FLOPs = 2 x params x tokens)
        mlp_parts = [k for k in ("dense_mlp", "shared_experts", "linear_attention", "other") if pcount.get(k)]
        mlp_dtype = (
            dtypes.get(max(mlp_parts, key=pcount.get), deployment.weight_dtype)
            if mlp_parts
            else deployment.weight_dtype
        )
        head_dtype = dtypes.get("lm_head") or dtypes.get("embed") or deployment.weight_dtype
        self.cls_attn = dtype_class(dtypes.get("attention", deployment.weight_dtype), gpu)
        self.cls_mlp = dtype_class(mlp_dtype, gpu)
        self.cls_head = dtype_class(head_dtype, gpu)
        self.cls_moe = dtype_class(dtypes.get("routed_experts", deployment.weight_dtype), gpu)
        self.attn_rate = gpu.bf16_flops * eff.attention * params.mfu
        self.byte_rate = gpu.hbm_bandwidth_bytes_s * eff.hbm * params.bw_efficiency
        # weight streaming through the GEMM library at decode shapes (skinny GEMMs), where measured apart
        self.gemm_byte_rate = gpu.hbm_bandwidth_bytes_s * eff.gemm_hbm * params.bw_efficiency
        self.expert_byte_rate = self.gemm_byte_rate  # routed experts' weights (4-bit weight-only: below)
        act = float(params.activation_bytes)
        h = model.hidden_size
        n_layers = model.num_hidden_layers
        n_full = model.count_layers("full_attention")
        n_slide = model.count_layers("sliding_attention")
        n_mla = model.count_layers("mla")
        n_lin = model.count_layers("linear_attention")
        parts = _part_bytes(deployment)
        attn_tp = 1 if dp_attention else tp  # attention weights and heads split over this many GPUs

        # --- GEMM weight bytes per GPU, summed over layers (pipeline stages run one after another) -------
        # dense-in-T GEMMs: every weight read once per step, 2 FLOPs per weight per token. The attention's share on
        # one rank is the ledger's (kneecap.model.params.tp_layout: K/V heads copied when TP exceeds them, MLA's
        # down-projections whole on every rank); under DP attention all of it.
        attn_share = 1.0
        if not dp_attention and pcount.get("attention"):
            attn_share = params_per_rank(model, tp)["attention"] / pcount["attention"]
        attn_w = parts.get("attention", 0.0) * attn_share + parts.get("linear_attention", 0.0) / tp
        mlp_w = parts.get("dense_mlp", 0.0) / tp + parts.get("shared_experts", 0.0) / tp + parts.get("router", 0.0)
        other_w = parts.get("other", 0.0) / tp
        pscale = deployment.params_override / model.total_params if deployment.params_override else 1.0
        # two GEMM groups: the attention projections (under DP attention: whole weights, 1/tp of the tokens)
        # and the rest (MLP, shared experts, router, linear-attention projections)
        self.attn_gemm_params = pcount.get("attention", 0) * attn_share * pscale
        self.attn_gemm_bytes = parts.get("attention", 0.0) * attn_share
        self.gemm_params = (
            pcount.get("linear_attention", 0) / tp
            + pcount.get("dense_mlp", 0) / tp
            + pcount.get("shared_experts", 0) / tp
            + pcount.get("router", 0)
            + pcount.get("other", 0) / tp
        ) * pscale
        self.gemm_weight_bytes = attn_w + mlp_w + other_w - self.attn_gemm_bytes
        # activation bytes per token through those GEMMs: hidden in and out of the attention and MLP
        # blocks, plus the MLP intermediate (gate/up written, read back by down)
        inter = model.intermediate_size or 4 * h
        n_dense = n_layers - model.num_moe_layers
        self.gemm_act_bytes_per_token = act * (4 * h * n_layers + 3 * inter / tp * n_dense)
        # LM head over the sampled rows; embedding gather per token
        head_params = (pcount.get("lm_head", 0) or pcount.get("embed", 0)) * pscale / tp
        self.head_params = head_params
        self.head_bytes = (parts.get("lm_head", 0.0) or parts.get("embed", 0.0)) / tp
        self.embed_bytes_per_token = h * act
        self.sample_bytes_per_seq = float(model.vocab_size * LOGIT_BYTES * SAMPLING_PASSES)

        # --- MoE routed experts ---------------------------------------------------------------------
        self._marlin_flop_rate = 0.0  # Marlin's ceiling on 4-bit experts' GEMMs where measured (0: none)
        self.moe_flop_cap = math.inf  # the routed experts' GEMM FLOP/s ceiling under the bound engine (for_engine)
        self.moe_pricer = None  # the fused-MoE call priced from kernel tables under the bound engine (for_engine)
        self._moe_dtype = dtypes.get("routed_experts", deployment.weight_dtype.lower())
        self.num_experts = model.num_experts
        self.top_k = model.num_experts_per_tok
        routed = parts.get("routed_experts", 0.0)
        if model.is_moe and model.num_moe_layers and model.num_experts and routed:
            per_expert_all = routed / (model.num_experts * model.num_moe_layers)  # one expert, one layer, whole
            self.num_moe_layers = model.num_moe_layers
            # bytes of one expert held per GPU: sharded over tp, or over tp/ep GPUs with ep expert groups
            moe_tp = max(1, tp // ep) if ep > 1 else tp
            self.expert_bytes = per_expert_all / moe_tp
            self.expert_params = model.expert_params * pscale / moe_tp
            self.expert_inter = model.expert_params / (3 * h) / moe_tp  # an expert's intermediate width on this GPU
            # 4-bit experts run weight-only (W4A16) without FP4 hardware: their own weight-streaming rate where measured
            expert_dtype = dtypes.get("routed_experts", deployment.weight_dtype.lower())
            w4a16 = expert_dtype in ("mxfp4", "nvfp4") and not gpu.fp4_flops
            if w4a16 and eff.moe_w4a16_hbm:
                self.expert_byte_rate = gpu.hbm_bandwidth_bytes_s * eff.moe_w4a16_hbm * params.bw_efficiency
            # the Marlin MoE kernel's compute ceiling for them, applied where the engine runs Marlin (for_engine)
            if w4a16 and eff.moe_marlin_w4a16:
                self._marlin_flop_rate = gpu.bf16_flops * eff.moe_marlin_w4a16 * params.mfu
        else:
            self.num_moe_layers = 0
            self.expert_bytes = self.expert_params = self.expert_inter = 0.0
        self.hidden = h

        # --- kernels per step (module docstring: counted from the engines' decoder-layer forwards) ------
        # one activation-quantisation kernel per GEMM group whose weights are fp8/fp4 (W8A8, W4A4), per group
        def quantised(dt: str, c: str) -> bool:
            return c != "bf16" or dt in ("fp8", "fp8-block", "int8")

        q_attn = quantised(dtypes.get("attention", deployment.weight_dtype.lower()), self.cls_attn)
        q_mlp = quantised(mlp_dtype.lower(), self.cls_mlp)
        q_moe = quantised(dtypes.get("routed_experts", deployment.weight_dtype.lower()), self.cls_moe)
        q_shared = quantised(dtypes.get("shared_experts", mlp_dtype.lower()), self.cls_mlp)
        per_attn = {"mla": 11 + (4 if q_attn else 0)}
        kernels = 6
        moe_layers = self.num_moe_layers
        for i, kind in enumerate(model.layer_types):
            k = 2 + per_attn.get(kind, 5 + (2 if q_attn else 0))
            is_moe_layer = (
                i >= n_layers - moe_layers
            )  # MoE layers are the last num_moe_layers (DeepSeek: first 3 dense)
            if is_moe_layer:
                k += 7 + (2 if q_moe else 0) + ((3 + (2 if q_shared else 0)) if model.num_shared_experts else 0)
            else:
                k += 3 + (2 if q_mlp else 0)
            kernels += k
        self.kernels_per_pass = kernels
        # of a MoE layer's kernels, those inside one fused_moe call as the kernel tables time it (top-k, align, two
        # grouped GEMMs, activation, sum, and the activation quantisation of fp8 experts): a table's time includes
        # their gaps (sim/moe_kernels.py), so a call priced from a table gives them back
        self._moe_call_gap_s = (6 + (2 if q_moe else 0)) * params.kernel_gap_s
        self.kernel_s = kernels * params.kernel_gap_s

        # --- attention ------------------------------------------------------------------------------
        kv_b = kv_dtype_bytes(deployment.kv_dtype)
        d = model.head_dim
        latent = 0
        heads = max(1, model.num_attention_heads // attn_tp)
        kvh = kv_heads_per_gpu(model.num_key_value_heads, attn_tp)
        # (FLOPs, bytes) per attention pair / cached token read, summed over layers of each kind
        self.f_full = 4.0 * heads * model.head_dim * n_full
        self.b_full = 2.0 * kvh * model.head_dim * kv_b * n_full
        self.f_win = 4.0 * heads * model.head_dim * n_slide
        self.b_win = 2.0 * kvh * model.head_dim * kv_b * n_slide
        if n_mla:
            latent = (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)
            self.f_mla_dec = 2.0 * heads * (2 * (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * n_mla
            v_dim = model.head_dim - (model.qk_rope_head_dim or 0)  # d_h: values carry no RoPE part
            self.f_mla_pre = 2.0 * heads * (model.head_dim + v_dim) * n_mla
            self.b_mla = float(latent * kv_b * n_mla)
        else:
            self.f_mla_dec = self.f_mla_pre = self.b_mla = 0.0
        self.state_bytes_per_seq = 2.0 * state_bytes_per_sequence(model, attn_tp, 1) if n_lin else 0.0
        # --- element-wise kernels, priced by their bytes at the memory rate (module docstring) -------------
        # two fused add + RMSNorm per layer (read x and the residual, write both: 4h), SiLU-and-mul in the dense
        # layers (read 2I, write I; the MoE layers' own is in _moe_seconds), rotary (read and write q and k) and
        # the KV-cache write (read k and v, write them at the cache dtype) per attention layer
        rope_mla = model.qk_rope_head_dim or 0
        attn_elem = (n_full + n_slide) * (2 * (heads + kvh) * d * act + 2 * kvh * d * (act + kv_b)) + n_mla * (
            2 * (heads + 1) * rope_mla * act + (latent if n_mla else 0) * (act + kv_b)
        )
        self.elem_bytes_per_token = act * (8 * h * n_layers + 3 * inter / tp * n_dense)
        self.elem_attn_bytes_per_token = float(attn_elem)
        # --- kernel table: GEMM, prefill and decode attention rates by shape (sim/kernels.py) ---------------
        self.table = table_for(gpu, eff)
        # the engine's prefill attention kernel where its family has a table for this GPU (sim/attention.py; bound by
        # for_engine); None: the kernel table's measured prefill curve
        self.prefill_curve = None
        self.n_attn_layers = max(1, n_full + n_slide + n_mla)
        self.bf16_peak = gpu.bf16_flops * params.mfu
        kv_layer = self.b_full + self.b_win + self.b_mla  # cached bytes per token, all attention layers, this GPU
        self.kv_bytes_per_token_layer = kv_layer / self.n_attn_layers
        # each GEMM group's weight shapes on this GPU, (N, K) per GEMM (TP-sharded: N/TP or K/TP), for its rate
        if n_mla or not n_full + n_slide:  # MLA's several projections: one GEMM of K = hidden, priced by its size
            attn_shapes = (((self.attn_gemm_params / max(1, n_layers)) / h, h),)
        else:
            attn_shapes = (((heads + 2 * kvh) * d, h), (h, heads * d))
        i_eff = self.gemm_params / (3.0 * h * max(1, n_layers))  # a gated MLP of this width per layer on this GPU
        mlp_shapes = ((2 * i_eff, h), (h, i_eff))
        ie = self.expert_inter or 1.0
        self._shapes = {
            "attn": attn_shapes,
            "mlp": mlp_shapes,
            "gate_up": ((2 * ie, h),),
            "down": ((h, ie),),
            "head": ((max(1.0, self.head_params / h), h),),
        }
        self._rate_cache: dict = {}
        self.window = model.sliding_window or 0
        # each GPU attends 1/tp of the sequences under DP attention (heads are whole there)
        self.attn_share = 1.0 / tp if dp_attention else 1.0
        self.dp_ranks = tp if dp_attention else 1  # attention data-parallel ranks (_dp_busiest)
        # how a request is given its rank (EngineProfile.dp_placement): "round_robin" makes the engine track each
        # request's rank and hand seconds() the step's load per rank (rank_by_rank)
        self.dp_placement = "least_tokens"

        # --- communication --------------------------------------------------------------------------
        self.act_bytes_per_token = float(h * act)
        busbw = eff.allreduce_busbw_bytes_s or gpu.interconnect_bytes_s * eff.allreduce_link_fraction
        busbw *= params.link_efficiency
        link = gpu.interconnect_bytes_s * eff.allreduce_link_fraction * params.link_efficiency
        hop = params.hop_latency_s if params.hop_latency_s is not None else HOP_LATENCY_S.get(gpu.interconnect, 1.0e-6)
        if tp > 1 and busbw <= 0:
            raise KneecapError(
                f"GPU {gpu.name} has no interconnect bandwidth for --tp {tp}", "use --tp 1 or a GPU with a link figure"
            )
        n_allreduce = (n_layers if dp_attention else 2 * n_layers) if tp > 1 else 0
        self.tp_latency_s = n_allreduce * (params.allreduce_base_latency_s + 2 * (tp - 1) * hop)
        self.tp_s_per_byte = n_allreduce * 2.0 * (tp - 1) / tp / busbw if n_allreduce else 0.0
        # one all-reduce above the engine's own kernel's limit: NCCL's fastest algorithm and protocol (NCCL_RING)
        self.n_allreduce = n_allreduce
        custom = gpu.interconnect != "pcie" or tp == 2
        self.custom_ar_max_bytes = CUSTOM_ALLREDUCE_MAX_BYTES if custom else 0.0
        hw = "pcie" if gpu.interconnect == "pcie" else "nvlink"
        ring = 2.0 * (tp - 1) / tp if tp > 1 else 0.0
        ll_cap = NCCL_LL_MAX_BUSBW.get(NCCL_GENERATION.get(gpu.name, ""), float("inf"))
        candidates = []
        for proto, (base, hw_lat) in NCCL_RING.items():
            if hw not in hw_lat:
                continue
            bw = min(ll_cap, 0.5 * busbw) if proto == "LL" else (0.92 * busbw if proto == "LL128" else busbw)
            candidates.append((base + 2 * (tp - 1) * hw_lat[hw], ring / bw))
        self.nccl_allreduce = tuple(candidates)
        if dp_attention and self.num_moe_layers and ep > 1:
            # dispatch + combine per MoE layer; each rank sends its own tokens' top-k copies
            self.a2a_latency_s = 2 * self.num_moe_layers * (params.allreduce_base_latency_s + (ep - 1) * hop)
            self.a2a_s_per_token = (
                2 * self.num_moe_layers * self.top_k * self.act_bytes_per_token * (ep - 1) / ep / link / tp
            )
            # DP attention has no all-reduce after the MoE block either: tokens come back by the combine
            self.tp_latency_s = self.tp_s_per_byte = 0.0
            # or, where the engine gathers every rank's tokens instead (the profile's moe_dp_comm, for_engine): per
            # MoE layer an all-gather of the tokens' activations (at the experts' input dtype) with their top-k ids and
            # weights (int32 + fp32 each), and a reduce-scatter of the bf16 outputs, each a ring of (ep-1)/ep of the
            # step's tokens through this rank at the collectives' bus bandwidth
            gathered = _moe_input_bytes(dtypes.get("routed_experts", deployment.weight_dtype.lower())) * h
            gathered += 8.0 * self.top_k
            self._allgather_comm = (
                2 * self.num_moe_layers * (params.allreduce_base_latency_s + (ep - 1) * hop),
                self.num_moe_layers * (gathered + act * h) * (ep - 1) / ep / busbw,
            )
        else:
            self.a2a_latency_s = self.a2a_s_per_token = 0.0
            self._allgather_comm = None
        self.moe_gathers = False  # every rank runs the MoE over all the step's tokens (for_engine: moe_dp_comm)
        self.pp = pp
        self.pp_latency_s = (pp - 1) * (params.allreduce_base_latency_s + hop) if pp > 1 else 0.0
        self.pp_s_per_byte = (pp - 1) / max(link, 1.0) if pp > 1 else 0.0
        # decoder layers per stage as fractions of all of them (module docstring, PP): the largest stage holds
        # ceil(L / pp) layers, the last one floor(L / pp) plus the final norm, LM head and sampling
        self.pp_stage_max_frac = math.ceil(n_layers / pp) / n_layers if n_layers else 1.0
        self.pp_stage_last_frac = (n_layers // pp) / n_layers if n_layers else 1.0
        self.overhead_s = params.overhead_s
        # engine profile (bound by for_engine): CPU per sequence, overlap, CUDA-graph capture sizes
        self.cpu_per_seq_s = 0.0
        self.overlap_cpu = False
        self.pp_host_sync = False  # PP: a rank's host waits for its own stage (module docstring, PP)
        self.graph_sizes: tuple[int, ...] = ()
        self.eager_launch_s = 0.0  # host seconds per kernel of a step outside a CUDA graph (engine profile)
        self.graph_mixed_tokens = 0
        self.serial_launch = False  # eager launches on the thread of the per-step CPU work (engine profile)
        self.graph_padding = True  # a decode batch of a size not captured pads up (True) or runs eagerly (False)
        # fp16 weights on a GPU with a faster fp16-accumulate rate: an engine that accumulates in fp16 (engine profile
        # fp16_accumulate, llama.cpp's cuBLAS path) runs their bf16-path GEMMs at that peak (for_engine)
        fp16_acc = getattr(gpu, "fp16_acc_flops", None)
        self._fp16_acc_scale = (
            fp16_acc / gpu.bf16_flops
            if fp16_acc and deployment.weight_dtype.lower() in ("fp16", "f16", "float16")
            else 1.0
        )

    def for_engine(self, profile) -> "StepTimeModel":
        """This model bound to an engine profile (kneecap.sim.config.EngineProfile); self if nothing changes."""
        if profile is None:
            return self
        if getattr(profile, "fp16_accumulate", False) and self._fp16_acc_scale != 1.0:
            other = copy.copy(self)
            scale, other._fp16_acc_scale = self._fp16_acc_scale, 1.0
            other._rates = dict(self._rates)
            flat, peak, curve = self._rates["bf16"]
            other._rates["bf16"] = (flat * scale, peak * scale, curve)
            if self.cls == "bf16":
                other.flop_rate, other.gemm_peak, other.gemm_curve = other._rates["bf16"]
            other._rate_cache = {}
            return other.for_engine(profile)
        gathers = self._allgather_comm is not None and moe_dp_gathers(
            getattr(profile, "moe_dp_comm", ""), self.deployment.gpu.name, self.ep, self.top_k
        )
        if gathers != self.moe_gathers:
            other = copy.copy(self)
            other.moe_gathers = gathers
            if gathers:
                other.a2a_latency_s, other.a2a_s_per_token = self._allgather_comm
            return other.for_engine(profile)
        kernel = getattr(profile, "moe_kernel", "")
        pricer = (
            pricer_for(
                self.deployment.gpu,
                kernel,
                self._moe_dtype,
                self.num_experts,
                self.expert_inter,
                self.hidden,
                self.top_k,
                profile.name,
            )
            if kernel and self.num_moe_layers and self.ep == 1
            else None
        )
        if pricer is not self.moe_pricer:
            other = copy.copy(self)
            other.moe_pricer = pricer
            return other.for_engine(profile)
        d, gpu = self.deployment, self.deployment.gpu
        curve = prefill_attention(
            profile.name,
            profile.version,
            gpu.name,
            gpu.bf16_flops,
            d.model.architecture,
            d.model.head_dim,
            bool(d.model.kv_lora_rank),
        )
        if curve != self.prefill_curve:
            other = copy.copy(self)
            other.prefill_curve = curve
            return other.for_engine(profile)
        marlin = self._marlin_flop_rate if getattr(profile, "marlin_w4a16_moe", False) else 0.0
        cap = marlin or math.inf
        if cap != self.moe_flop_cap:
            other = copy.copy(self)
            other.moe_flop_cap = cap
            return other.for_engine(profile)
        sizes = tuple(sorted(profile.cudagraph_sizes))
        fixed = self.params.overhead_s if profile.cpu_fixed_s is None else profile.cpu_fixed_s
        eager, mixed = profile.eager_launch_s, profile.graph_mixed_tokens
        sync = getattr(profile, "pp_host_sync", False)
        serial = getattr(profile, "serial_host_launch", False)
        pad = getattr(profile, "graph_padding", True)
        placement = getattr(profile, "dp_placement", "least_tokens")
        if placement != self.dp_placement:
            other = copy.copy(self)
            other.dp_placement = placement
            return other.for_engine(profile)
        if (
            self.cpu_per_seq_s,
            self.overlap_cpu,
            self.graph_sizes,
            self.overhead_s,
            self.eager_launch_s,
            self.graph_mixed_tokens,
            self.pp_host_sync,
            self.serial_launch,
            self.graph_padding,
        ) == (profile.cpu_per_seq_s, profile.overlap_cpu, sizes, fixed, eager, mixed, sync, serial, pad):
            return self
        other = copy.copy(self)
        other.cpu_per_seq_s, other.overlap_cpu, other.graph_sizes = profile.cpu_per_seq_s, profile.overlap_cpu, sizes
        other.overhead_s = fixed
        other.eager_launch_s, other.graph_mixed_tokens = eager, mixed
        other.pp_host_sync = sync
        other.serial_launch = serial
        other.graph_padding = pad
        return other

    # --- pieces --------------------------------------------------------------------------------
    def distinct_experts(self, num_tokens: float) -> float:
        return distinct_experts(self.num_experts, self.top_k, num_tokens)

    def comm_seconds(self, num_tokens: float) -> float:
        """TP all-reduces, EP all-to-alls and PP sends of one pass over `num_tokens` tokens."""
        nbytes = num_tokens * self.act_bytes_per_token
        if self.tp_s_per_byte and nbytes > self.custom_ar_max_bytes:  # NCCL: its fastest algorithm at this size
            tp = self.n_allreduce * min(lat + spb * nbytes for lat, spb in self.nccl_allreduce)
        else:
            tp = self.tp_latency_s + self.tp_s_per_byte * nbytes
        return (
            tp
            + self.pp_latency_s
            + self.pp_s_per_byte * nbytes
            + ((self.a2a_latency_s + self.a2a_s_per_token * num_tokens) if num_tokens > 0 else 0.0)
        )

    def _moe_seconds(self, t: float) -> float:
        if not self.num_moe_layers or t <= 0:
            return 0.0
        if self.moe_pricer is not None:  # the engine's fused-MoE kernel, priced from its published tables
            block = self.moe_pricer.seconds(t, self.params.mfu, self.params.bw_efficiency)
            if block is not None:
                return max(block - self._moe_call_gap_s, 0.0) * self.num_moe_layers
        assign = t * self.top_k  # token-expert assignments
        if self.ep > 1:
            # tokens: the whole batch (TP attention, replicated) or this rank's 1/tp share (DP attention);
            # the busiest of ep ranks: mean + sqrt(2 ln ep) sd of a binomial(assign, 1/ep) load
            # the whole batch's assignments land on ep ranks; the busiest sets the grouped GEMM's time
            mean = assign / self.ep
            load = mean + math.sqrt(2.0 * math.log(self.ep)) * math.sqrt(assign * (1.0 / self.ep) * (1 - 1.0 / self.ep))
            hit = self.distinct_experts(t) / self.ep
        else:
            load = assign
            hit = self.distinct_experts(t)
        flops = 2.0 * self.expert_params * load
        # a by-M curve (efficiency.json) is per GEMM: the rows per touched expert; the kernel table prices the grouped
        # GEMM by its whole work (one kernel over every expert's rows) at one expert's weight shape
        m_rows = (load / hit if hit > 0 else load) if self._rates[self.cls_moe][2] is not None else load
        cap = self.moe_flop_cap  # the Marlin MoE kernel's ceiling where the engine runs it (module docstring)
        c_gu = 2.0 * flops / 3.0 / min(self.gemm_rate(m_rows, self.cls_moe, "gate_up"), cap)
        c_dn = flops / 3.0 / min(self.gemm_rate(m_rows, self.cls_moe, "down"), cap)
        # operator by operator, as the engines run a MoE block (vLLM fused_moe: grouped GEMM w13, silu_and_mul,
        # grouped GEMM w2, moe_sum; TensorRT-LLM's CUTLASS MoE: expand rows, GEMM1, activation, GEMM2, finalize):
        # each grouped GEMM is max(compute, its weights + activations in and out); the gated activation (reads 2I,
        # writes I per assignment) and the top-k combine (reads h per assignment, writes h per token) are
        # memory-bound kernels of their own, not hidden under the GEMMs' compute
        act, h, inter = self.params.activation_bytes, self.hidden, self.expert_inter
        w = self.expert_bytes * hit / self.expert_byte_rate
        c1, m1 = c_gu, w * 2.0 / 3.0 + act * (h + 2 * inter) * load / self.byte_rate  # gate_up: 2 of 3 matrices
        c2, m2 = c_dn, w / 3.0 + act * (inter + h) * load / self.byte_rate  # down
        # tokens this rank combines: its own under an all-to-all, every rank's once they are gathered
        rows = t / self.ep if (self.ep > 1 and self.dp_attention and not self.moe_gathers) else t
        elem = act * (3 * inter * load + h * load + h * rows) / self.byte_rate
        return ((c1 if c1 > m1 else m1) + (c2 if c2 > m2 else m2) + elem) * self.num_moe_layers

    def _head_seconds(self, t: float, s: float) -> float:
        """LM head over the s sampled rows, sampling, and the embedding gather of t tokens."""
        hc = 2.0 * self.head_params * s / self.gemm_rate(s, self.cls_head, "head")
        hm = (
            self.head_bytes / self.gemm_byte_rate
            + (self.sample_bytes_per_seq * s + self.embed_bytes_per_token * t) / self.byte_rate
        )
        return hc if hc > hm else hm

    def gemm_rate(self, rows: float, cls: str | None = None, group: str | None = None) -> float:
        """Achievable GEMM FLOP/s for a GEMM of `rows` rows (M) on the `cls` tensor-core path (None: the deployment's
        weight dtype's): a by-M curve of efficiency.json where one exists (shape-free); else, for a GEMM group
        ("attn", "mlp", "gate_up", "down", "head"), the kernel table's rate at each of its weight shapes (the group's
        FLOP-weighted harmonic mean: its time is the sum of its GEMMs'); else flat."""
        if cls is None or cls == self.cls:
            cls = self.cls
            flat, peak, curve = self.flop_rate, self.gemm_peak, self.gemm_curve
        else:
            flat, peak, curve = self._rates[cls]
        if curve is not None:
            f = curve_at(curve, rows)
            return peak * f if f > 0 else flat
        if group is None:
            return flat
        key = (rows, cls, group)
        rate = self._rate_cache.get(key)
        if rate is None:
            curves = self.table.gemm_curves(cls)
            if curves is None:
                rate = flat
            else:
                shapes = self._shapes[group]
                work = sum(n * k for n, k in shapes)
                rate = peak * work / sum(n * k / curves.fraction(rows, n, k) for n, k in shapes)
            if len(self._rate_cache) > 65536:
                self._rate_cache.clear()
            self._rate_cache[key] = rate
        return rate

    @property
    def rank_by_rank(self) -> bool:
        """Whether a step is priced from each DP-attention rank's own load (ranks placed round robin, no PP)."""
        return self.dp_ranks > 1 and self.dp_placement == "round_robin" and self.pp == 1

    def _attn_side_seconds(self, ta: float) -> float:
        """The part of _fixed_seconds that one DP-attention rank's `ta` tokens set: the attention projections and
        the attention's element-wise kernels."""
        c = 2.0 * self.attn_gemm_params * ta / self.gemm_rate(ta, self.cls_attn, "attn") if ta > 0 else 0.0
        m = self.attn_gemm_bytes / self.gemm_byte_rate
        return (c if c > m else m) + self.elem_attn_bytes_per_token * ta / self.byte_rate

    def _rank_decode_seconds(self, kv_full: float, kv_window: float) -> float:
        """Decode attention of one DP-attention rank's decodes over `kv_*` cached tokens (the slopes hold the even
        share 1 / ranks: scaled back up to the one rank's)."""
        if kv_full <= 0 and kv_window <= 0:
            return 0.0
        dp = self.dp_ranks
        sf, sw = self._slopes((kv_full + kv_window) * dp)
        return (sf * kv_full + sw * kv_window) * dp

    def _busiest_rank(self, ranks) -> tuple:
        """Of the step's per-rank loads (tokens, decode kv full, decode kv window, prefill pairs full, pairs window,
        prefill kv full, kv window), the busiest rank's: (its tokens, its decode attention seconds, its prefill
        attention seconds), the rank whose attention side lasts longest (the first of equals)."""
        best = None
        best_s = -1.0
        for ta, dkf, dkw, pf, pw, kf, kw in ranks:
            dec = self._rank_decode_seconds(dkf, dkw)
            pre = self._prefill_attention_seconds(pf, pw, kf, kw, 1.0)
            total = self._attn_side_seconds(ta) + dec + pre
            if total > best_s:
                best, best_s = (ta, dec, pre), total
        return best

    def _fixed_seconds(self, t: float, s: float, gemm_t: float, attn_t: float | None = None) -> float:
        """Everything but the context-dependent attention: GEMMs, experts, head, sampling, state, comm. attn_t: the
        tokens of the busiest DP-attention rank's attention side (default: its even share of gemm_t)."""
        if t <= 0:
            return 0.0
        c = 2.0 * self.gemm_params * gemm_t / self.gemm_rate(gemm_t, self.cls_mlp, "mlp")
        m = self.gemm_weight_bytes / self.gemm_byte_rate + self.gemm_act_bytes_per_token * gemm_t / self.byte_rate
        g = c if c > m else m
        ta = gemm_t * self.attn_share if attn_t is None else attn_t
        c = 2.0 * self.attn_gemm_params * ta / self.gemm_rate(ta, self.cls_attn, "attn")
        m = self.attn_gemm_bytes / self.gemm_byte_rate
        g += c if c > m else m
        g += self._head_seconds(t, s)
        g += self._moe_seconds(gemm_t)
        g += self.state_bytes_per_seq * s * self.attn_share / self.byte_rate
        ea = t * self.attn_share if attn_t is None else attn_t
        g += (self.elem_bytes_per_token * t + self.elem_attn_bytes_per_token * ea) / self.byte_rate
        return g + self.kernel_s + self.comm_seconds(t)

    def decode_attention_bytes_s(self, kv_tokens: float) -> float:
        """K/V bytes/s of a decode attention pass over `kv_tokens` cached tokens on this GPU: the kernel table's rate
        at one layer's bytes (sim/kernels.py), times the bandwidth scale."""
        nbytes = self.kv_bytes_per_token_layer * kv_tokens * self.attn_share
        return self.table.decode_attention_bytes_s(nbytes) * self.params.bw_efficiency

    def _slopes(self, kv_tokens: float = 0.0) -> tuple[float, float]:
        """Seconds per decode-context token: (full + MLA layers, sliding layers); max of compute and memory, the
        memory side at the kernel table's decode rate for a pass over `kv_tokens` cached tokens."""
        sh = self.attn_share
        rate = self.decode_attention_bytes_s(kv_tokens)
        full = max(self.f_full / self.attn_rate, self.b_full / rate) + max(
            self.f_mla_dec / self.attn_rate, self.b_mla / rate
        )
        win = max(self.f_win / self.attn_rate, self.b_win / rate)
        return full * sh, win * sh

    def prefill_attention_rate(self, flops_per_layer: float) -> float:
        """FLOP/s of a prefill attention pass of `flops_per_layer` FLOPs in one layer: the fraction of the bf16 peak
        the engine's kernel family reaches at that size and the model's head dim (sim/attention.py), or where no
        family table applies, the kernel table's at that size (sim/kernels.py)."""
        curve = self.prefill_curve
        kt = self.table.prefill_attention_fraction
        frac = curve.fraction(flops_per_layer, kt) if curve else kt(flops_per_layer)
        return self.bf16_peak * frac

    def _prefill_attention_seconds(
        self, pairs_full: float, pairs_win: float, kv_full: float, kv_win: float, share: float | None = None
    ) -> float:
        """Prefill attention of the step's prompt chunks on the busiest GPU (share: its fraction of them; default
        the even share)."""
        sh = self.attn_share if share is None else share
        flops = (self.f_full + self.f_mla_pre) * pairs_full + self.f_win * pairs_win
        if flops <= 0:
            return 0.0
        rate = self.prefill_attention_rate(flops * sh / self.n_attn_layers)
        t = max(self.f_full * pairs_full / rate, self.b_full * kv_full / self.byte_rate)
        t += max(self.f_mla_pre * pairs_full / rate, self.b_mla * kv_full / self.byte_rate)
        t += max(self.f_win * pairs_win / rate, self.b_win * kv_win / self.byte_rate)
        return t * sh

    def padded(self, num_tokens: int, num_seqs: int) -> int:
        """GEMM rows of a pure-decode step under CUDA graphs: padded up to the next capture size (engines that pad)."""
        sizes = self.graph_sizes
        if num_tokens != num_seqs or not sizes or num_tokens > sizes[-1] or not self.graph_padding:
            return num_tokens
        return sizes[bisect_left(sizes, num_tokens)]

    def eager_floor(self, num_tokens: int, num_seqs: int, requests: int | None = None) -> float:
        """The host's launch time of a step that runs outside a CUDA graph (0 when it replays one, or the engine
        launches from C++): a prefill or mixed step above the engine's graph_mixed_tokens, or a pure decode above its
        largest capture size, or, for an engine that does not pad, of a size it did not capture (requests: the
        decode batch's requests, by which TensorRT-LLM keys its graphs; default num_tokens) (engine profile;
        sim/config.py EAGER_LAUNCH_S)."""
        if not self.eager_launch_s:
            return 0.0
        if num_tokens == num_seqs:  # pure decode: eager only above the largest capture size (none known: captured)
            sizes = self.graph_sizes
            eager = bool(sizes) and (
                num_tokens > sizes[-1] or (not self.graph_padding and (requests or num_tokens) not in sizes)
            )
        else:
            eager = num_tokens > self.graph_mixed_tokens
        return self.kernels_per_pass * self.eager_launch_s if eager else 0.0

    def _cpu(self, s: float, m: int) -> float:
        # under DP attention every rank runs its own scheduler over its own 1/tp of the sequences, in parallel
        return m * self.overhead_s + self.cpu_per_seq_s * s * self.attn_share

    def _combine(self, gpu, cpu, m: int):
        if m > 1 or self.overlap_cpu:  # (pp > 1 goes through _pp_round)
            return gpu if gpu > cpu else cpu
        return gpu + cpu

    def _pp_round(self, full, cpu: float, m: int, t_mb: float, s_mb: float):
        """One round of m micro-batches of t_mb tokens (s_mb sequences) each through pp stages (module docstring,
        PP). full: one micro-batch's pass through every stage with its pp - 1 sends (a float, or a numpy array for a
        run of decode steps); cpu: the host work of all m micro-batches. The round is the longest of: m passes
        of the slowest stage (the GPUs' throughput); one micro-batch's ring (its pass, then its host work before
        it can go again); the m micro-batches' host work (one scheduler thread)."""
        sends = self.pp_latency_s + self.pp_s_per_byte * t_mb * self.act_bytes_per_token
        head = self._head_seconds(t_mb, s_mb) + 6 * self.params.kernel_gap_s  # final norm, LM head, sampling
        hop = sends / (self.pp - 1)  # a stage after the first waits on its own stream for its input
        cpu_one = cpu / m
        layers = full - sends - head
        sync = cpu_one if self.pp_host_sync else 0.0  # a rank before the last: its stage, then its host work
        if isinstance(full, float):
            stage = max(layers * self.pp_stage_max_frac + sync, layers * self.pp_stage_last_frac + head) + hop
            return max(m * stage, full + cpu_one, cpu)
        import numpy as np

        stage = np.maximum(layers * self.pp_stage_max_frac + sync, layers * self.pp_stage_last_frac + head) + hop
        return np.maximum(np.maximum(m * stage, full + cpu_one), cpu)

    def seconds(
        self,
        num_tokens: int,
        pairs_full: float,
        pairs_window: float,
        kv_tokens_full: float,
        kv_tokens_window: float,
        num_seqs: int,
        *,
        num_decodes: int | None = None,
        decode_kv_full: float | None = None,
        decode_kv_window: float | None = None,
        microbatches: int | None = None,
        ranks=None,
    ) -> float:
        """Duration of one step. pairs_*: attention (query, cached-token) pairs of every sequence; kv_tokens_*:
        cached tokens read. num_decodes / decode_kv_*: which part of those is decodes (default: all of it when
        every sequence contributes one token, else none). microbatches: how many pipeline micro-batches the
        step's work splits into (default min(pp, num_seqs): one sequence's chunk stays in one micro-batch). ranks: under
        DP attention with requests placed round robin (rank_by_rank), each rank's load (tokens, decode kv full, decode
        kv window, prefill pairs full, prefill pairs window, prefill kv full, prefill kv window; speculative verify
        pairs beyond the decodes' kv count as prefill pairs): the step's attention side is its busiest rank's."""
        if num_tokens <= 0:
            return 0.0
        if num_decodes is None:
            num_decodes = num_seqs if num_tokens == num_seqs else 0
            decode_kv_full = kv_tokens_full if num_decodes else 0.0
            decode_kv_window = kv_tokens_window if num_decodes else 0.0
        dkf, dkw = decode_kv_full or 0.0, decode_kv_window or 0.0
        # pairs == kv tokens for a decode
        pf, pw = pairs_full - dkf, pairs_window - dkw
        kf, kw = kv_tokens_full - dkf, kv_tokens_window - dkw
        m = microbatches if microbatches is not None else min(self.pp, num_seqs)  # micro-batches in the round
        m = max(1, min(m, self.pp, num_tokens))
        # every sequence decoding (a speculative verify step: the same 1 + K query tokens each) is a uniform batch, and
        # engines replay a CUDA graph for it as for a plain decode: vLLM captures uniform decode batches of
        # 1 + num_speculative_tokens queries a request (its uniform_decode_query_len), TensorRT-LLM the verify and
        # draft stages in one graph (its DeepSeek-R1 MTP tech blog)
        graph_rows = num_tokens if num_decodes == num_seqs else num_seqs
        gemm_t = self.padded(num_tokens, graph_rows) if m == 1 else num_tokens
        if ranks is not None and self.rank_by_rank:
            ta, dec, pre = self._busiest_rank(ranks)
            if num_tokens == num_seqs:  # a decode step's CUDA graph is the busiest rank's batch (_graph_rows)
                top = int(max(r[0] for r in ranks))
                gemm_t = self._graph_rows(num_tokens, top)
                gpu = self._fixed_seconds(num_tokens, num_seqs, gemm_t, ta) + dec + pre
                return self._finish_step(gpu, num_seqs, top, top, top)
            gpu = self._fixed_seconds(num_tokens, num_seqs, gemm_t, ta) + dec + pre
            return self._finish_step(gpu, num_seqs, num_tokens, graph_rows, num_seqs)
        sf, sw = self._slopes((dkf + dkw) / m)
        attn_t, share = self._dp_busiest(num_tokens, num_seqs, num_decodes)
        gpu = (
            self._fixed_seconds(num_tokens / m, num_seqs / m, gemm_t / m, None if attn_t is None else attn_t / m)
            + (sf * dkf + sw * dkw) / m
            + self._prefill_attention_seconds(pf / m, pw / m, kf / m, kw / m, share)
        )
        cpu = self._cpu(num_seqs, m)
        if self.pp > 1:
            return self._pp_round(float(gpu), cpu, m, num_tokens / m, num_seqs / m)
        floor = self.eager_floor(num_tokens, graph_rows, num_seqs)
        if floor and self.serial_launch and self.overlap_cpu:  # one host thread: launches, then the per-step work
            return gpu if gpu > cpu + floor else cpu + floor
        return self._combine(gpu if gpu > floor else floor, cpu, m)

    def _graph_rows(self, num_tokens: int, top: int) -> int:
        """Rows the MoE and the other all-rank GEMMs see in a DP-attention decode step of `num_tokens` whose busiest
        rank decodes `top`: every rank pads its batch to the capture size that holds the busiest rank's (SGLang 0.5.7
        model_executor/cuda_graph_runner.py:373-394 can_run and :775-785 replay_prepare: the graph's batch is
        max(global_num_tokens), where the MLP gathers the ranks' tokens, its default), so dp x that size; the
        tokens themselves when the busiest rank's batch is above the largest capture size (no graph)."""
        padded = self.padded(top, top)
        sizes = self.graph_sizes
        if not sizes or top > sizes[-1] or not self.graph_padding:
            return num_tokens
        return max(num_tokens, padded * self.dp_ranks)

    def _finish_step(self, gpu: float, num_seqs: int, floor_tokens: int, floor_rows: int, floor_requests: int) -> float:
        """A one-micro-batch step of `gpu` seconds on the GPU with its host work and launch floor (seconds();
        floor_*: eager_floor's arguments)."""
        cpu = self._cpu(num_seqs, 1)
        floor = self.eager_floor(floor_tokens, floor_rows, floor_requests)
        if floor and self.serial_launch and self.overlap_cpu:
            return gpu if gpu > cpu + floor else cpu + floor
        return self._combine(gpu if gpu > floor else floor, cpu, 1)

    def _dp_busiest(self, num_tokens: int, num_seqs: int, num_decodes: int) -> tuple[float | None, float | None]:
        """Under DP attention, the busiest rank of a step with prompt chunks: (its attention-side tokens, its share of
        the step's prefill attention); (None, None) when the even share holds (no DP attention, or decodes only).

        Each DP rank schedules its own requests, and a new request goes whole to one rank (TensorRT-LLM's
        tensorrt_llm/_torch/pyexecutor/executor_request_queue.py, _schedule_attention_dp_requests and
        _balance_requests_across_ranks: to the rank with the fewest active tokens, at most
        ceil(requests / ranks) each), so a step's n prompt chunks sit on
        min(n, ranks) ranks while its decodes spread over all of them. Every rank meets the others at each MoE
        layer's collectives, so the step's attention side lasts as long as that busiest rank's: its decodes' even
        share plus 1 / min(n, ranks) of the prompt tokens.

        SGLang places requests differently, with the same result for a step's prompts: its data-parallel controller
        deals each new request to the next rank in turn, whatever their load (0.5.7 server_args.py:379,
        load_balance_method "round_robin" by default; managers/data_parallel_controller.py:507-515,
        round_robin_scheduler), and round robin does not look at the ranks' running requests, so its decodes need not
        be spread evenly: for such an engine (EngineProfile.dp_placement "round_robin") the engine tracks each
        request's rank and seconds() prices the busiest rank's own load instead (rank_by_rank, _busiest_rank)."""
        dp = self.dp_ranks
        prompt = num_tokens - num_decodes
        if dp <= 1 or prompt <= 0:
            return None, None
        holders = min(dp, max(1, num_seqs - num_decodes))
        return num_decodes / dp + prompt / holders, 1.0 / holders

    def draft_seconds(self, num_seqs: int, spec_tokens: int) -> float:
        """Drafting `spec_tokens` tokens for `num_seqs` decoding sequences: each draft step is one decoder layer's
        GEMMs over the sequences plus the shared LM head (an MTP module is one transformer block sharing the
        embedding and output head, DeepSeek-V3 report sec. 2.2; an EAGLE head is one decoder layer)."""
        if num_seqs <= 0 or spec_tokens <= 0:
            return 0.0
        n = float(num_seqs)
        head = self._head_seconds(0.0, n)  # the LM head and sampling over the n rows, no embedding gather
        body = (
            self._fixed_seconds(n, n, n) - self.comm_seconds(n) - head - self.embed_bytes_per_token * n / self.byte_rate
        )
        layer = body / max(1, self.deployment.model.num_hidden_layers)
        return spec_tokens * (layer + head)

    def decode_run_seconds(self, num_seqs: int, contexts, num_steps: int, ranks=None):
        """Durations (numpy array) of `num_steps` consecutive pure-decode steps of the same `num_seqs` sequences
        whose contexts (cached tokens after step 0) are `contexts` (numpy int array); each step adds one token each.
        ranks: each sequence's DP-attention rank (numpy int array) where the model prices rank by rank."""
        import numpy as np

        if ranks is not None and self.rank_by_rank:
            return self._decode_run_by_rank(num_seqs, contexts, num_steps, ranks)
        j = np.arange(num_steps, dtype=np.float64)
        ctx0 = contexts.astype(np.float64)
        full = float(ctx0.sum()) + num_seqs * j  # pairs == kv tokens read for a decode
        m = self.pp if num_seqs >= self.pp else num_seqs
        sf, sw = self._slopes(float(full[num_steps // 2]) / m)  # the decode rate at the run's middle step
        if self.window and sw:
            # sum over sequences of min(ctx + j, W): exact, via sorted contexts
            w = float(self.window)
            srt = np.sort(ctx0)
            csum = np.concatenate(([0.0], np.cumsum(srt)))
            cut = np.searchsorted(srt, w - j, side="left")  # count with ctx < W - j
            window = csum[cut] + cut * j + (num_seqs - cut) * w
        else:
            window = np.zeros(num_steps)
        m = self.pp if num_seqs >= self.pp else num_seqs
        gemm_t = self.padded(num_seqs, num_seqs) if m == 1 else num_seqs
        gpu = self._fixed_seconds(num_seqs / m, num_seqs / m, gemm_t / m) + (sf * full + sw * window) / m
        return self._finish_decode_run(gpu, num_seqs, m)

    def _window_sums(self, ctx0, j):
        """Per step j, the sum over sequences of min(ctx + j, W) (exact, via sorted contexts); zeros without a
        sliding window."""
        import numpy as np

        if not self.window:
            return np.zeros(len(j))
        w = float(self.window)
        srt = np.sort(ctx0)
        csum = np.concatenate(([0.0], np.cumsum(srt)))
        cut = np.searchsorted(srt, w - j, side="left")  # count with ctx < W - j
        return csum[cut] + cut * j + (len(srt) - cut) * w

    def _decode_run_by_rank(self, num_seqs: int, contexts, num_steps: int, ranks):
        """decode_run_seconds rank by rank (rank_by_rank): each step lasts as long as its busiest rank's attention
        side (its decodes' projections and K/V reads), the rest of the step over all the sequences."""
        import numpy as np

        j = np.arange(num_steps, dtype=np.float64)
        ctx0 = contexts.astype(np.float64)
        mid = num_steps // 2
        dp = self.dp_ranks
        top = int(np.bincount(ranks, minlength=dp).max())
        gemm_t = self._graph_rows(num_seqs, top)
        totals, gpus = [], []
        for r in range(dp):
            sel = ranks == r
            n_r = int(sel.sum())
            c_r = ctx0[sel]
            full = float(c_r.sum()) + n_r * j
            window = self._window_sums(c_r, j) if n_r else np.zeros(num_steps)
            sf, sw = self._slopes(float(full[mid] + window[mid]) * dp)
            dec = (sf * full + sw * window) * dp
            totals.append(self._attn_side_seconds(n_r) + dec)
            gpus.append(self._fixed_seconds(num_seqs, num_seqs, gemm_t, n_r) + dec)
        busiest = np.argmax(np.stack(totals), axis=0)
        gpu = np.stack(gpus)[busiest, np.arange(num_steps)]
        return self._finish_decode_run(gpu, num_seqs, 1, top)

    def _finish_decode_run(self, gpu, num_seqs: int, m: int, graph_batch: int | None = None):
        """decode_run_seconds' steps of `gpu` seconds (numpy array) on the GPU with their host work and launch floor
        (graph_batch: the batch whose CUDA graph the step replays, default num_seqs)."""
        import numpy as np

        cpu = self._cpu(num_seqs, m)
        if self.pp > 1:
            return self._pp_round(gpu, cpu, m, num_seqs / m, num_seqs / m)
        g = num_seqs if graph_batch is None else graph_batch
        floor = self.eager_floor(g, g)
        if floor and self.serial_launch and self.overlap_cpu:  # one host thread: launches, then the per-step work
            return np.maximum(gpu, cpu + floor)
        if floor:
            gpu = np.maximum(gpu, floor)
        if m > 1 or self.overlap_cpu:
            return np.maximum(gpu, cpu)
        return gpu + cpu
