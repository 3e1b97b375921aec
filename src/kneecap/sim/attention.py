"""Prefill attention by kernel family (data/kernels/attention/<family>-<gpu>.json): which kernel an engine runs for
a model's prefill on a GPU, and what fraction of the bf16 peak that kernel reaches for a pass of a given size and
head dim.

Owns reading the attention tables and the choice of family; not the step formula (steptime.py) nor the per-GPU
kernel table (kernels.py), whose measured prefill curve prices every case this module has no table for.

Tables: a kernel's forward TFLOP/s with the causal mask by sequence length, one curve per head dim, as published
(each file names its figure). FlashAttention-3 and FlashAttention-2 on an H100 SXM: arXiv 2407.08608 Figure 5, batch
x length = 16k tokens per call and heads x head dim = 2048, so a call's FLOPs (4 x batch x heads x L^2 x d / 2) grow
with L alone. A pass is priced by its FLOPs, as kernels.py prices the measured H200 curve: the fraction of the
table GPU's peak at those FLOPs, linear in log FLOPs between the tabulated lengths and held outside them; between two
tabulated head dims linear in head dim, outside them the nearest (a batch of sequences in one varlen call is priced
by its total work). On another GPU of the table's architecture the FLOPs are first scaled by the table GPU's peak over
this GPU's (the same FLOPs are a shorter pass on a faster part), the fraction kept: the same kernel on the same SMs.
A GPU with its own measured kernel table (the H200) keeps its measured prefill curve instead (table_for_family): a
step time is held to the kernels measured on that card (tests/sim/test_kernel_table.py), not to another card's.

Which family (prefill_family), from the engine's source at the modelled release:
  vLLM V1 (0.8 and later) on CUDA picks FLASH_ATTN for compute capability 8.0 and up, except that a model with
  attention sinks (gpt-oss) runs TRITON_ATTN on any GPU but sm90 (vllm/platforms/cuda.py get_attn_backend_cls:
  "if has_sink and not cls.is_device_capability(90)"); FLASH_ATTN runs FlashAttention-3 on sm90 and FlashAttention-2
  elsewhere (vllm/attention/utils/fa_utils.py get_flash_attn_version: "3 if (device_capability.major == 9 and
  is_fa_version_supported(3)) else 2"). MLA models (DeepSeek) run prefill as multi-head attention through the same
  flash_attn_varlen_func with q/k head dim 192 and v 128 (v/1/attention/backends/mla/common.py
  _flash_attn_varlen_diff_headdims, which pads v to 192 except on FA3 on sm90), priced at head dim 192.
  SGLang (0.4.6 and later) on Hopper runs its "fa3" backend for MLA models and for the architectures its
  is_fa3_default_architecture lists (Llama, Qwen2/Qwen3 and Qwen3-MoE, Gemma 2/3, OLMo 2, GLM-4-MoE, Llama 4), unless
  EAGLE drafts a tree (topk > 1); elsewhere FlashInfer, Triton or aiter (sglang/srt/server_args.py, the automatic
  attention-backend choice: "We will turn on FA3 on hopper ...").
No table, no family: an engine other than these (SGLang's FlashInfer, TensorRT-LLM's own kernels, vLLM V0),
a GPU other than Hopper (FlashAttention-2 on an A100, whose published figure was not found as numbers; the Triton
unified kernel; AMD's CK/aiter kernels; Blackwell), or a family whose table was measured on another architecture:
the GPU's kernel table prices it (kernels.py: measured on the H200, moved to other GPUs as that module states). Why
not another family's curve scaled: FlashAttention-2 on Hopper runs Ampere's instructions (about half FA3's rate at 16k
tokens in the same figure) while on an A100 it is that GPU's tuned kernel, so the ratio between two families on one
architecture says nothing about a third; the kernel table is at least a measured pass on a real card. A head dim
outside the tabulated ones takes the nearest curve (64 for smaller heads, 256 for larger).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kneecap.sim.kernels import _interp_log  # linear in log x, held at the ends

ATTENTION_DIR = Path(__file__).resolve().parents[1] / "data" / "kernels" / "attention"
# GPUs by compute capability, where a family's choice depends on it (the catalog names of data/gpus.json)
SM90 = frozenset(("h100-sxm", "h100-pcie", "h100-nvl", "h200"))
SM8X = frozenset(("a100-40", "a100-80", "l4", "l40s", "rtx-4090"))  # Ampere sm80, Ada sm89
# the tables' GPU -> the GPUs of the same architecture (same SMs) a table applies to, its FLOPs scaled by the peaks
SAME_ARCHITECTURE = {"h100-sxm": SM90}
SINK_ARCHITECTURES = frozenset(("GptOssForCausalLM",))  # attention sinks (vLLM gpt_oss.py passes sinks=...)
# SGLang's is_fa3_default_architecture (python/sglang/srt/utils.py), its text models
SGLANG_FA3_ARCHITECTURES = frozenset(
    (
        "LlamaForCausalLM",
        "Llama4ForConditionalGeneration",
        "Olmo2ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Glm4MoeForCausalLM",
    )
)


@dataclass(frozen=True)
class AttentionTable:
    """One kernel family's published causal forward rates on one GPU (module docstring)."""

    family: str
    gpu: str
    source: str
    peak_flops: float
    head_dims: tuple[int, ...]  # ascending
    flops: tuple[tuple[float, ...], ...]  # per head dim: FLOPs of each tabulated call, ascending
    fractions: tuple[tuple[float, ...], ...]  # per head dim: TFLOP/s over the table GPU's peak

    def fraction(self, head_dim: float, flops: float) -> float:
        """Fraction of the table GPU's bf16 peak a causal pass of `flops` FLOPs at `head_dim` reaches."""
        dims, x = self.head_dims, max(flops, 1.0)
        if head_dim <= dims[0] or head_dim >= dims[-1]:  # the nearest curve outside the tabulated head dims
            j = 0 if head_dim <= dims[0] else -1
            return _interp_log(self.flops[j], self.fractions[j], x)
        i = bisect_right(dims, head_dim)  # only the two neighbouring curves (this runs every prefill step)
        lo = _interp_log(self.flops[i - 1], self.fractions[i - 1], x)
        hi = _interp_log(self.flops[i], self.fractions[i], x)
        return lo + (hi - lo) * (head_dim - dims[i - 1]) / (dims[i] - dims[i - 1])


def call_flops(tokens_per_call: float, hidden: float, seq_len: float) -> float:
    """FLOPs of one tabulated call: tokens / L sequences of L tokens, hidden / d heads of dim d, causal (the figure's
    own count, 4 x batch x heads x L^2 x d / 2)."""
    return 4.0 * (tokens_per_call / seq_len) * hidden * seq_len * seq_len / 2.0


@cache
def load_attention_table(name: str) -> AttentionTable:
    """data/kernels/attention/<name>.json as an AttentionTable."""
    doc = json.loads((ATTENTION_DIR / f"{name}.json").read_text())
    peak = float(doc["peak_flops"])
    curves = sorted(doc["curves"], key=lambda c: c["head_dim"])
    flops, fractions = [], []
    for c in curves:
        f = tuple(call_flops(doc["tokens_per_call"], doc["hidden"], L) for L in c["seq_len"])
        flops.append(f)
        fractions.append(tuple(t * 1e12 / peak for t in c["tflops"]))
    return AttentionTable(
        family=doc["family"],
        gpu=doc["gpu"],
        source=doc["source"],
        peak_flops=peak,
        head_dims=tuple(int(c["head_dim"]) for c in curves),
        flops=tuple(flops),
        fractions=tuple(fractions),
    )


def attention_tables() -> tuple[str, ...]:
    """Names of the committed attention tables."""
    return tuple(sorted(p.stem for p in ATTENTION_DIR.glob("*.json")))


def table_for_family(family: str, gpu_name: str) -> AttentionTable | None:
    """The family's table that applies to this GPU (its own, or one of the same architecture); None if none does.
    A GPU with its own measured kernel table (data/kernels/<gpu>.json) takes only a family table measured on itself:
    its own measured prefill pass is the nearer fact than another card's figure moved by the peaks."""
    own_only = (ATTENTION_DIR.parent / f"{gpu_name}.json").exists()
    for name in attention_tables():
        t = load_attention_table(name)
        if t.family != family:
            continue
        if t.gpu == gpu_name or (not own_only and gpu_name in SAME_ARCHITECTURE.get(t.gpu, ())):
            return t
    return None


def prefill_family(engine: str, engine_version: str, gpu_name: str, architecture: str, mla: bool = False) -> str | None:
    """The prefill attention kernel family the engine runs for this model on this GPU (module docstring); None where
    it is not established here. engine/engine_version: the engine profile's name and version text; mla: the model
    caches a compressed latent (DeepSeek's multi-head latent attention)."""
    if engine == "sglang":
        return "fa3" if gpu_name in SM90 and (mla or architecture in SGLANG_FA3_ARCHITECTURES) else None
    if engine != "vllm" or engine_version.startswith("vLLM V0"):
        return None
    if gpu_name in SM90:
        return "fa3"
    if gpu_name in SM8X:
        return "triton" if architecture in SINK_ARCHITECTURES else "fa2"
    return None


@dataclass(frozen=True)
class PrefillAttention:
    """A GPU's prefill attention curve for one family and head dim: fraction of the GPU's bf16 peak by a pass's FLOPs
    (the table's FLOPs axis scaled by the peaks, module docstring)."""

    table: AttentionTable
    head_dim: float
    flops_scale: float  # the table GPU's peak over this GPU's

    def fraction(self, flops: float) -> float:
        return self.table.fraction(self.head_dim, flops * self.flops_scale)


@cache
def prefill_attention(
    engine: str,
    engine_version: str,
    gpu_name: str,
    gpu_bf16_flops: float,
    architecture: str,
    head_dim: float,
    mla: bool = False,
) -> PrefillAttention | None:
    """The priced curve for the engine's family on this GPU, or None where no table applies (kernels.py then)."""
    family = prefill_family(engine, engine_version, gpu_name, architecture, mla)
    table = table_for_family(family, gpu_name) if family else None
    if table is None:
        return None
    return PrefillAttention(table, float(head_dim), table.peak_flops / gpu_bf16_flops)
