"""Roofline step time: how long one engine step (one forward pass over a batch) takes, from first principles.

Owns the formula and its named, overridable constants; not batching (scheduler.py) nor the clock
(engine.py). No per-GPU profiling: everything comes from the Model, the Gpu datasheet figures and
the efficiency factors below.

    step_s = max(compute_s, memory_s) + tp_comm_s + pp_comm_s + overhead_s

    compute_s = FLOPs / (dense peak FLOP/s of the GEMM dtype x mfu)
      FLOPs   = 2 x active_params x tokens / tp                       (Kaplan et al. 2020, C ~ 2N per token)
              + 4 x heads x head_dim x pairs / tp  per full/sliding layer (QK^T and PV, 2 FLOPs per MAC)
              + 2 x heads x (2 x kv_lora_rank + qk_rope_head_dim) x pairs / tp  per MLA layer (absorbed MLA:
                scores over the 576-wide latent+rope, values over the 512-wide latent; DeepSeek-V2 paper, sec. 2.1)
      pairs   = (query token, cached token) pairs: a decode of context c adds c; a prefill chunk of n
                tokens after p cached adds n*p + n(n+1)/2 (causal); sliding layers cap each at the window.
    memory_s  = bytes read / (HBM bandwidth x bw_efficiency)
      bytes   = weight bytes touched / tp
                (dense: every weight once per step; MoE: per MoE layer the expected number of distinct
                 routed experts a batch of n tokens hits with top-k of E, E x (1 - (1 - k/E)^n), plus
                 all dense/shared/attention weights)
              + KV bytes of every sequence in the batch (its whole context, per GPU after TP sharding)
              + linear-attention state (read and written once per sequence per step)
    tp_comm_s = 2 all-reduces per layer (after attention, after the MLP; Megatron-LM, Shoeybi et al. 2019)
                of tokens x hidden x activation_bytes, ring all-reduce:
                latency + 2(tp-1)/tp x bytes / (link bytes/s per direction x link_efficiency),
                latency = base + 2(tp-1) x per-hop (NCCL src/graph/tuning.cc, Ring/LL: baseLat 3.6 us;
                hwLat 0.47 us per hop over NVLink, 1.0 us over PCIe).
    pp_comm_s = (pp-1) point-to-point sends of tokens x hidden x activation_bytes. Stages run one after
                another for one batch (no micro-batch overlap): PP buys memory, not speed, here.
    overhead_s = fixed per step (scheduling, sampling, kernel launch, Python).

Dtype of the GEMMs: bf16/fp16 -> bf16 peak; fp8/fp8-block/int8 (W8A8) -> fp8 peak; nvfp4/mxfp4 ->
fp4 peak where the GPU has it (else fp8, else bf16: weight-only dequantisation); int4/awq/gptq
(W4A16) -> bf16 peak.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.model.kv import kv_bytes_per_token_per_gpu, kv_dtype_bytes, kv_heads_per_gpu, state_bytes_per_sequence
from kneecap.model.weights import weight_bits, weight_bytes

# NCCL ring all-reduce, LL protocol, latency per hop in seconds (NCCL src/graph/tuning.cc hwLat, Ring/LL).
HOP_LATENCY_S = {"nvlink": 0.47e-6, "xgmi": 0.47e-6, "pcie": 1.0e-6}


@dataclass(frozen=True)
class StepTimeParams:
    """The step-time model's constants; every one overridable (and fitted by `kneecap calibrate`)."""

    # Fraction of dense peak FLOP/s that GEMMs + attention reach. 0.5 is the usual large-batch
    # prefill figure (PaLM paper, Chowdhery et al. 2022, reports 46% MFU in training; vLLM/SGLang
    # prefill on H100 reaches 40-60%). Not a measured constant of any engine: calibrate it.
    mfu: float = 0.5
    # Fraction of datasheet HBM bandwidth a decode step reaches. ~0.8 is what memory-bound kernels
    # reach on H100 (NVIDIA's STREAM-like measurements and FlashInfer/vLLM decode kernels report
    # 75-90%). Calibrate it.
    bw_efficiency: float = 0.8
    # Fraction of the link's per-direction bandwidth an all-reduce reaches (NCCL bus bandwidth):
    # NVIDIA/nccl#1264 measures ~783 of 900 GB/s on HGX H100 NVLink4 (0.87); PCIe rings reach less.
    link_efficiency: float = 0.8
    # NCCL ring/LL base latency, seconds (src/graph/tuning.cc baseLat[Ring][LL] = 3.6 us).
    allreduce_base_latency_s: float = 3.6e-6
    # Per-hop latency, seconds; None -> by interconnect (HOP_LATENCY_S).
    hop_latency_s: float | None = None
    # Fixed per-step cost: scheduling, sampling, launches. A few ms is what vLLM V1 steps cost with CUDA
    # graphs on small batches (the vLLM V1 announcement names CPU overhead as the bottleneck it cut);
    # 2 ms is a round middle value. Calibrate it.
    overhead_s: float = 0.002
    # Bytes per activation element sent in all-reduces and pipeline sends (bf16).
    activation_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("mfu", "bw_efficiency", "link_efficiency"):
            value = getattr(self, name)
            if not (0 < value <= 1):
                raise KneecapError(f"step-time {name} must be in (0, 1], got {value!r}", f"pass e.g. {name}=0.5")
        for name in ("allreduce_base_latency_s", "overhead_s"):
            if getattr(self, name) < 0:
                raise KneecapError(f"step-time {name} must be >= 0, got {getattr(self, name)!r}", f"pass {name}=0 or more")
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


def gemm_flops(deployment: Deployment) -> float:
    """Dense peak FLOP/s per GPU for the GEMM dtype implied by the weight dtype (see module docstring)."""
    gpu = deployment.gpu
    dtype = deployment.weight_dtype.lower()
    if dtype in ("fp8", "fp8-block", "int8"):
        return gpu.fp8_flops or gpu.bf16_flops
    if dtype in ("nvfp4", "mxfp4"):
        return gpu.fp4_flops or gpu.fp8_flops or gpu.bf16_flops
    return gpu.bf16_flops


class StepTimeModel:
    """Per-GPU coefficients of the roofline for one Deployment, precomputed once; `seconds()` per step."""

    def __init__(self, deployment: Deployment, params: StepTimeParams | None = None):
        self.deployment = deployment
        self.params = params = params or StepTimeParams()
        model, gpu, tp, pp = deployment.model, deployment.gpu, deployment.tp, deployment.pp
        if gpu.bf16_flops <= 0 or gpu.hbm_bandwidth_bytes_s <= 0:
            raise KneecapError(f"GPU {gpu.name} has no FLOP/s or bandwidth figure", "pick a GPU with datasheet figures")
        kv_bytes = kv_dtype_bytes(deployment.kv_dtype)
        heads_per_gpu = max(1, model.num_attention_heads // tp)
        n_full = model.count_layers("full_attention")
        n_slide = model.count_layers("sliding_attention")
        n_mla = model.count_layers("mla")
        # FLOPs per GPU, summed over all layers (pipeline stages run one after another)
        # --params rescales the total; the active share stays the model's own (active / total)
        active = model.active_params
        if deployment.params_override:
            active = model.active_params * deployment.params_override / model.total_params
        self.flops_per_token = 2.0 * active / tp
        self.flops_per_pair_full = 4.0 * heads_per_gpu * model.head_dim * n_full
        self.flops_per_pair_window = 4.0 * heads_per_gpu * model.head_dim * n_slide
        if n_mla:
            self.flops_per_pair_full += 2.0 * heads_per_gpu * (2 * model.kv_lora_rank + model.qk_rope_head_dim) * n_mla
        self.flop_rate = gemm_flops(deployment) * params.mfu
        # bytes per GPU
        total_params = deployment.params_override or model.total_params
        all_weight_bytes = weight_bytes(total_params, deployment.weight_dtype) / tp
        if model.is_moe and model.num_moe_layers and model.expert_params:
            self.expert_bytes = model.expert_params * weight_bits(deployment.weight_dtype) / 8.0 / tp
            routed = self.expert_bytes * model.num_experts * model.num_moe_layers
            self.dense_weight_bytes = max(0.0, all_weight_bytes - routed)
        else:
            self.expert_bytes = 0.0
            self.dense_weight_bytes = float(all_weight_bytes)
        self.num_experts = model.num_experts
        self.top_k = model.num_experts_per_tok
        self.num_moe_layers = model.num_moe_layers if self.expert_bytes else 0
        window_kinds = ("sliding_attention",)
        per_token_all = kv_bytes_per_token_per_gpu(model, kv_bytes, tp, 1)
        self.kv_window_bytes_per_token = 2 * kv_heads_per_gpu(model.num_key_value_heads, tp) * model.head_dim * kv_bytes * n_slide \
            if any(k in window_kinds for k in model.layer_types) else 0
        self.kv_full_bytes_per_token = per_token_all - self.kv_window_bytes_per_token
        self.state_bytes_per_seq = 2.0 * state_bytes_per_sequence(model, tp, 1)  # read + write
        self.window = model.sliding_window or 0
        self.byte_rate = gpu.hbm_bandwidth_bytes_s * params.bw_efficiency
        # communication
        self.act_bytes_per_token = float(model.hidden_size * params.activation_bytes)
        link = gpu.interconnect_bytes_s * params.link_efficiency
        hop = params.hop_latency_s if params.hop_latency_s is not None else HOP_LATENCY_S.get(gpu.interconnect, 1.0e-6)
        if tp > 1:
            if link <= 0:
                raise KneecapError(f"GPU {gpu.name} has no interconnect bandwidth for --tp {tp}", "use --tp 1 or a GPU with a link figure")
            n_allreduce = 2 * model.num_hidden_layers
            self.tp_latency_s = n_allreduce * (params.allreduce_base_latency_s + 2 * (tp - 1) * hop)
            self.tp_s_per_byte = n_allreduce * 2.0 * (tp - 1) / tp / link
        else:
            self.tp_latency_s = 0.0
            self.tp_s_per_byte = 0.0
        if pp > 1:
            pp_link = max(link, 1.0)
            self.pp_latency_s = (pp - 1) * (params.allreduce_base_latency_s + hop)
            self.pp_s_per_byte = (pp - 1) / pp_link
        else:
            self.pp_latency_s = 0.0
            self.pp_s_per_byte = 0.0
        self.overhead_s = params.overhead_s

    # --- pieces --------------------------------------------------------------------------------
    def weight_bytes_touched(self, num_tokens: float) -> float:
        """Weight bytes read per GPU by a step of `num_tokens` tokens (MoE: expected distinct experts)."""
        if num_tokens <= 0:
            return 0.0
        if not self.num_moe_layers:
            return self.dense_weight_bytes
        e, k = self.num_experts, self.top_k
        hit = e * (1.0 - (1.0 - k / e) ** num_tokens)
        return self.dense_weight_bytes + self.expert_bytes * hit * self.num_moe_layers

    def comm_seconds(self, num_tokens: float) -> float:
        nbytes = num_tokens * self.act_bytes_per_token
        return self.tp_latency_s + self.tp_s_per_byte * nbytes + self.pp_latency_s + self.pp_s_per_byte * nbytes

    def seconds(self, num_tokens: int, pairs_full: float, pairs_window: float, kv_tokens_full: float,
                kv_tokens_window: float, num_seqs: int) -> float:
        """Duration of one step. pairs_*: attention (query, cached-token) pairs; kv_tokens_*: cached tokens read."""
        if num_tokens <= 0:
            return 0.0
        compute_s = (self.flops_per_token * num_tokens + self.flops_per_pair_full * pairs_full
                     + self.flops_per_pair_window * pairs_window) / self.flop_rate
        memory_s = (self.weight_bytes_touched(num_tokens) + self.kv_full_bytes_per_token * kv_tokens_full
                    + self.kv_window_bytes_per_token * kv_tokens_window + self.state_bytes_per_seq * num_seqs) / self.byte_rate
        return (compute_s if compute_s > memory_s else memory_s) + self.comm_seconds(num_tokens) + self.overhead_s

    def decode_run_seconds(self, num_seqs: int, contexts, num_steps: int):
        """Durations (numpy array) of `num_steps` consecutive pure-decode steps of the same `num_seqs` sequences
        whose contexts (cached tokens after step 0) are `contexts` (numpy int array); each step adds one token each."""
        import numpy as np

        j = np.arange(num_steps, dtype=np.float64)
        ctx0 = contexts.astype(np.float64)
        full = float(ctx0.sum()) + num_seqs * j  # pairs == kv tokens read for a decode
        if self.window and (self.flops_per_pair_window or self.kv_window_bytes_per_token):
            # sum over sequences of min(ctx + j, W): exact, via sorted contexts
            w = float(self.window)
            srt = np.sort(ctx0)
            csum = np.concatenate(([0.0], np.cumsum(srt)))
            # sequences with ctx + j >= W contribute W; the rest ctx + j
            cut = np.searchsorted(srt, w - j, side="left")  # count with ctx < W - j
            window = csum[cut] + cut * j + (num_seqs - cut) * w
        else:
            window = np.zeros(num_steps)
        compute_s = (self.flops_per_token * num_seqs + self.flops_per_pair_full * full + self.flops_per_pair_window * window) / self.flop_rate
        memory_s = (self.weight_bytes_touched(num_seqs) + self.kv_full_bytes_per_token * full
                    + self.kv_window_bytes_per_token * window + self.state_bytes_per_seq * num_seqs) / self.byte_rate
        return np.maximum(compute_s, memory_s) + (self.comm_seconds(num_seqs) + self.overhead_s)
