"""A Deployment: one model on one kind of GPU with a parallel layout and dtypes.

Shared by the planner, the simulator and the load-plan runner, so that `plan` and
`simulate` size the KV pool from the same inputs. Values only; the ledger lives in kneecap.plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.hardware import Gpu
from kneecap.model.spec import Model
from kneecap.units import GiB


@dataclass(frozen=True)
class Deployment:
    """Model x GPU x layout. Byte quantities are per GPU."""

    model: Model
    gpu: Gpu
    tp: int = 1  # tensor-parallel degree
    pp: int = 1  # pipeline stages (layers split over stages)
    weight_dtype: str = "bf16"  # see kneecap.model.weights for the names
    kv_dtype: str = "bf16"  # "bf16" | "fp16" | "fp8"
    block_size: int = 16  # tokens per KV block (paged allocation)
    hbm: str | int = "datasheet"  # "datasheet" | "device" | "framework" | explicit bytes per GPU
    overhead_bytes: int = 4 * GiB  # activations + workspace + CUDA graphs, per GPU
    frag_fraction: float = 0.05  # fragmentation headroom: fraction of what is left after weights + overhead
    mem_util: float = 1.0  # fraction of HBM the engine may use
    params_override: int | None = None  # --params: total parameters to use for weight bytes
    # expert parallelism: routed experts split whole over ep of the tp GPUs (each expert on one rank, sharded
    # tp/ep ways) instead of every expert sharded tp ways; per-GPU expert bytes are the same either way
    ep: int = 1
    # attention data parallelism (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp, vLLM DP+EP):
    # each of the tp GPUs holds the whole attention weights and attends only its own sequences, whose KV it keeps
    # (a KV pool per DP rank); the MoE layers run expert-parallel over the same GPUs
    dp_attention: bool = False
    # the engine whose layout of the other weights DP attention follows ("sglang", "tensorrt-llm", "vllm"): which
    # parts every rank holds whole beside the attention (kneecap.plan.ledger.DP_ATTENTION_WHOLE_PARTS); None: the
    # parts all three hold whole
    dp_attention_engine: str | None = None
    # text-only serving of a multimodal checkpoint (vLLM --language-model-only): its encoder is not loaded
    language_only: bool = False
    # vLLM's start-up profile of a vision tower, which overhead_bytes includes: (images, peak bytes, kept bytes) per
    # GPU (kneecap.plan.ledger.vision_profile); None for a text model or text-only serving
    vision_profile: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "block_size", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise KneecapError(
                    f"--{name.replace('_', '-')} must be a whole number >= 1, got {value!r}",
                    f"pass e.g. --{name.replace('_', '-')} 1",
                )
        for flag, asked, drop in (
            (f"--ep {self.ep}", self.ep > 1, "--ep"),
            ("--dp-attention", self.dp_attention, "--dp-attention"),
        ):
            if asked and not self.model.is_moe:
                raise KneecapError(
                    f"{flag} needs a mixture-of-experts model; {self.model.name} is dense", f"drop {drop}"
                )
        if not (0 < self.mem_util <= 1):
            raise KneecapError(f"--mem-util must be in (0, 1], got {self.mem_util!r}", "pass e.g. --mem-util 0.9")
        if not (0 <= self.frag_fraction < 1):
            raise KneecapError(f"--frag must be in [0, 1), got {self.frag_fraction!r}", "pass e.g. --frag 0.05")
        if self.overhead_bytes < 0:
            raise KneecapError(
                f"--overhead-gib must be >= 0, got {self.overhead_bytes / GiB!r}", "pass e.g. --overhead-gib 4"
            )
        if self.pp > self.model.num_hidden_layers:
            raise KneecapError(
                f"--pp {self.pp} exceeds the model's {self.model.num_hidden_layers} layers",
                f"use --pp <= {self.model.num_hidden_layers}",
            )

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attention_tp(self) -> int:
        """GPUs one sequence's attention (heads, KV) is split over: 1 under DP attention, else tp."""
        return 1 if self.dp_attention else self.tp

    @property
    def attention_dp(self) -> int:
        """Attention data-parallel ranks, each with its own sequences and KV pool: tp under DP attention, else 1."""
        return self.tp if self.dp_attention else 1

    @property
    def expert_parallel(self) -> int:
        """Expert-parallel degree the MoE layers run with: tp under DP attention (as SGLang and TensorRT-LLM), else ep."""
        return max(self.ep, self.tp) if self.dp_attention else self.ep

    @property
    def hbm_bytes(self) -> int:
        """HBM per GPU under the chosen accounting, before --mem-util."""
        return self.hbm if isinstance(self.hbm, int) else self.gpu.memory_bytes(self.hbm)
