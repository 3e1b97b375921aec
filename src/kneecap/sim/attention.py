"""Prefill attention by kernel family (data/kernels/attention/<family>-<gpu>.json): which kernel an engine runs for
a model's prefill on a GPU, and what fraction of the bf16 peak that kernel reaches for a pass of a given size and
head dim.

Owns reading the attention tables and the choice of family; not the step formula (steptime.py) nor the per-GPU
kernel table (kernels.py), whose measured prefill curve prices every case this module has no table for.

Tables: a kernel's forward rate with the causal mask, as published (each file names its source), in one of two forms.
'curves': TFLOP/s by sequence length, one curve per head dim, read off a figure: FlashAttention-3 and FlashAttention-2
on an H100 SXM, arXiv 2407.08608 Figure 5, batch x length = 16k tokens per call and heads x head dim = 2048, so a call's
FLOPs (4 x batch x heads x L^2 x d / 2) grow with L alone. 'rows': measured calls, each with its shape (batch, query and
key lengths, heads, head dim) and time: FlashAttention-2 on an A100 (fa2-a100.json, the flash_attn_func timings at head
dim 128 published in the GitHub repository liangan1/GPU_travel), whose FLOPs are the causal pairs the step model counts
(a query block at the end of its keys: n p + n (n + 1) / 2). A pass is priced by its FLOPs, as kernels.py prices the
measured H200 curve: the fraction of the table GPU's peak at those FLOPs, linear in log FLOPs between the tabulated
calls and held above the largest; calls of the same work (FLOPs within 1%) are one point at their mean rate (the A100's
16 x 1k and 1 x 4k calls: a FLOPs axis cannot tell them apart, and they were timed 11% apart); between two tabulated
head dims linear in head dim, outside them the nearest (a batch of sequences in one varlen call is priced by its total
work). Below the table's smallest call (16k tokens per call in the figure, a 1k x 16 or 4k x 1 call on the A100), the
rate is not held: it follows the kernel table's measured curve from that call's FLOPs down (the family's fraction there
times the kernel table's fraction at the pass over its fraction at that call), since a short prompt's pass is far
smaller than any tabulated call and the kernel table measures how such passes fall off (one 1k-token sequence on the
H200 reaches a third of a 4k one's rate). On another GPU of the table's architecture the FLOPs are first scaled by the
table GPU's peak over this GPU's (the same FLOPs are a shorter pass on a faster part), the fraction kept: the same
kernel on the same SMs (the H100 SXM's tables for the other Hopper parts; the A100 80GB's for the 40GB, the same GA100
at the same peak). A GPU with its own measured kernel table (the H200) keeps its measured prefill curve instead
(table_for_family): a step time is held to the kernels measured on that card (tests/sim/test_kernel_table.py), not to
another card's.

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
A family established here without a table for the GPU, where a table of another family was measured on that GPU's
architecture, takes that table (prefill_attention): vLLM's Triton unified kernel for gpt-oss on an A100 is priced at
FlashAttention-2's A100 calls. An assumption, stated: no published timing of the Triton kernel on Ampere was found
(its authors, arXiv 2511.11581, measure it on an H100 and an MI250 only); without the A100 table it was priced at the
kernel table's curve, itself FlashAttention-2 code (PyTorch's flash SDPA) measured on an H200 and moved to the A100, so
the A100's own measured FlashAttention-2 calls are the nearer fact for the same question.
No table, no family: an engine other than these (SGLang's FlashInfer, TensorRT-LLM's own kernels, vLLM V0),
a GPU with no table of its architecture (Ada's FlashAttention-2 and Triton, AMD's CK/aiter kernels, Blackwell), or a
family whose table was measured on another architecture: the GPU's kernel table prices it (kernels.py: measured on
the H200, moved to other GPUs as that module states). Why not another architecture's curve scaled: FlashAttention-2
on Hopper runs Ampere's instructions (about half FA3's rate at 16k tokens in the same figure) while on an A100 it is
that GPU's tuned kernel, so the ratio between two families on one architecture says nothing about a third; the
kernel table is at least a measured pass on a real card. A head dim outside the tabulated ones takes the nearest
curve (64 for smaller heads, 256 for larger; the A100 table has head dim 128 alone, so gpt-oss's 64 takes it).
Decode attention is not priced here: vLLM 0.10-0.11 runs the same Triton unified kernel for gpt-oss's decodes on an A100
(its V1 Triton backend calls one kernel for prefills and decodes since vllm-project/vllm PR 16828), but no published
decode timing of it on Ampere was found, so decode attention keeps the kernel table's measured bytes/s (kernels.py).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from typing import Callable
from pathlib import Path

from kneecap.sim.kernels import interp_log  # linear in log x, held at the ends

ATTENTION_DIR = Path(__file__).resolve().parents[1] / "data" / "kernels" / "attention"
# GPUs by compute capability, where a family's choice depends on it (the catalog names of data/gpus.json)
SM90 = frozenset(("h100-sxm", "h100-pcie", "h100-nvl", "h200"))
SM8X = frozenset(("a100-40", "a100-80", "l4", "l40s", "rtx-4090"))  # Ampere sm80, Ada sm89
# the tables' GPU -> the GPUs of the same architecture (same SMs) a table applies to, its FLOPs scaled by the peaks
SAME_ARCHITECTURE = {"h100-sxm": SM90, "a100-80": frozenset(("a100-40", "a100-80"))}  # GA100: 108 SMs, 312 TFLOP/s
MERGE_REL = 0.01  # measured calls whose FLOPs differ by less than this are one point of a curve
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
            return interp_log(self.flops[j], self.fractions[j], x)
        i = bisect_right(dims, head_dim)  # only the two neighbouring curves (this runs every prefill step)
        lo = interp_log(self.flops[i - 1], self.fractions[i - 1], x)
        hi = interp_log(self.flops[i], self.fractions[i], x)
        return lo + (hi - lo) * (head_dim - dims[i - 1]) / (dims[i] - dims[i - 1])

    @property
    def smallest_flops(self) -> float:
        """The FLOPs below which no tabulated curve has a measured call."""
        return max(f[0] for f in self.flops)


def call_flops(tokens_per_call: float, hidden: float, seq_len: float) -> float:
    """FLOPs of one tabulated call: tokens / L sequences of L tokens, hidden / d heads of dim d, causal (the figure's
    own count, 4 x batch x heads x L^2 x d / 2)."""
    return 4.0 * (tokens_per_call / seq_len) * hidden * seq_len * seq_len / 2.0


def pass_pairs(seqlen_q: float, seqlen_kv: float) -> float:
    """Causal (query, key) pairs of one sequence whose last seqlen_q of seqlen_kv positions are queried
    (FlashAttention's bottom-right alignment): n p + n (n + 1) / 2 with n = seqlen_q queries after
    p = seqlen_kv - seqlen_q cached keys, the count the step model uses for a prefill chunk."""
    n, p = seqlen_q, seqlen_kv - seqlen_q
    return n * p + n * (n + 1) / 2.0


def row_flops(row: dict) -> float:
    """FLOPs of one measured call of a 'rows' table: 4 x batch x heads x head_dim x causal pairs per sequence."""
    return 4.0 * row["batch"] * row["heads"] * row["head_dim"] * pass_pairs(row["seqlen_q"], row["seqlen_kv"])


def _merged(points: list[tuple[float, float]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(FLOPs, fraction) points ascending, those within MERGE_REL of each other's FLOPs as one point at their means
    (two measured shapes of the same work give one rate on a FLOPs axis)."""
    groups: list[list[tuple[float, float]]] = []
    for x, y in sorted(points):
        if groups and x <= groups[-1][0][0] * (1.0 + MERGE_REL):
            groups[-1].append((x, y))
        else:
            groups.append([(x, y)])
    xs = tuple(sum(x for x, _ in g) / len(g) for g in groups)
    ys = tuple(sum(y for _, y in g) / len(g) for g in groups)
    return xs, ys


@cache
def load_attention_table(name: str) -> AttentionTable:
    """data/kernels/attention/<name>.json as an AttentionTable: 'curves' (a figure's TFLOP/s by sequence length at a
    fixed tokens per call and hidden size) or 'rows' (measured calls, each with its shape and time)."""
    doc = json.loads((ATTENTION_DIR / f"{name}.json").read_text())
    peak = float(doc["peak_flops"])
    by_dim: dict[int, list[tuple[float, float]]] = {}
    for c in doc.get("curves", ()):
        pts = by_dim.setdefault(int(c["head_dim"]), [])
        for L, t in zip(c["seq_len"], c["tflops"]):
            pts.append((call_flops(doc["tokens_per_call"], doc["hidden"], L), t * 1e12 / peak))
    for r in doc.get("rows", ()):
        f = row_flops(r)
        by_dim.setdefault(int(r["head_dim"]), []).append((f, f / (r["ms"] * 1e-3) / peak))
    dims = tuple(sorted(by_dim))
    curves = [_merged(by_dim[d]) for d in dims]
    return AttentionTable(
        family=doc["family"],
        gpu=doc["gpu"],
        source=doc["source"],
        peak_flops=peak,
        head_dims=dims,
        flops=tuple(c[0] for c in curves),
        fractions=tuple(c[1] for c in curves),
    )


def attention_tables() -> tuple[str, ...]:
    """Names of the committed attention tables."""
    return tuple(sorted(p.stem for p in ATTENTION_DIR.glob("*.json")))


def _applies(t: AttentionTable, gpu_name: str) -> bool:
    """The table was measured on this GPU or on one of its architecture; a GPU with its own measured kernel table
    (data/kernels/<gpu>.json) takes only a table measured on itself: its own measured prefill pass is the nearer fact
    than another card's figure moved by the peaks."""
    own_only = (ATTENTION_DIR.parent / f"{gpu_name}.json").exists()
    return t.gpu == gpu_name or (not own_only and gpu_name in SAME_ARCHITECTURE.get(t.gpu, ()))


def table_for_family(family: str, gpu_name: str) -> AttentionTable | None:
    """The family's table that applies to this GPU (its own, or one of the same architecture); None if none does."""
    for name in attention_tables():
        t = load_attention_table(name)
        if t.family == family and _applies(t, gpu_name):
            return t
    return None


def table_measured_on(gpu_name: str) -> AttentionTable | None:
    """A table of any family measured on this GPU or its architecture (the first by name); None if none is."""
    for name in attention_tables():
        t = load_attention_table(name)
        if _applies(t, gpu_name):
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
    family: str = ""  # the family the engine runs (the table's own, or another measured on this card: docstring)

    def fraction(self, flops: float, below: Callable[[float], float] | None = None) -> float:
        """Fraction of this GPU's peak a pass of `flops` FLOPs reaches. below: the kernel table's fraction by FLOPs on
        this GPU; a pass smaller than the table's smallest call follows its shape from there (module docstring)."""
        x = flops * self.flops_scale
        smallest = self.table.smallest_flops
        if below is None or x >= smallest:
            return self.table.fraction(self.head_dim, x)
        f0 = smallest / self.flops_scale
        return self.table.fraction(self.head_dim, smallest) * below(flops) / below(f0)


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
    """The priced curve for the engine's family on this GPU, or None where no table applies (kernels.py then): the
    family's own table, else (a family established here without a table for this GPU) a table of another family
    measured on this GPU's architecture (module docstring)."""
    family = prefill_family(engine, engine_version, gpu_name, architecture, mla)
    if family is None:
        return None
    table = table_for_family(family, gpu_name) or table_measured_on(gpu_name)
    if table is None:
        return None
    return PrefillAttention(table, float(head_dim), table.peak_flops / gpu_bf16_flops, family)
