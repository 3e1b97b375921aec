"""Fused-MoE kernel tables (data/kernels/moe/*.json): what a whole fused-MoE block costs, from published timings.

Owns reading those tables and pricing one fused-MoE call (top-k, moe_align_block_size, the gate_up and down grouped
GEMMs, SiLU-and-mul, the top-k sum) for a deployment's shape; not the rest of the step (steptime.py) and not which
engine runs which kernel (sim/config.py EngineProfile.moe_kernel).

The data: vLLM's benchmarks/kernels/benchmark_moe.py and SGLang's tuning_fused_moe_triton.py time the whole
fused_moe call at a model's shape, GPU, dtype and TP with uniform random routing; pull requests that add tuned
configs paste those tables (each file names its source: vllm-project/vllm#24700 Mixtral bf16 TP 2 and Qwen3-30B-A3B
fp8 on H100, vllm-project/vllm#44818 Gemma4 bf16 on H200, vllm-project/vllm#40542 Kimi-VL-A3B bf16 on A100,
sgl-project/sglang#11730 Qwen3-235B-A22B fp8 TP 8 on H200). The Triton kernel runs each expert's rows in tiles of
BLOCK_SIZE_M (16-128) rows, padded per expert, at the expert's narrow N: its efficiency follows the rows each expert
gets, not the step's tokens.

The mechanism. A call over T tokens with top-k routing to E experts of intermediate width N (per GPU) and hidden K
gives r = T x k / E rows per expert. Its additive roofline on a GPU is
    ideal = FLOPs / peak + bytes / HBM bytes/s
    FLOPs = 2 x T x k x 3 N K (gate_up 2N x K, down K x N); bytes = the distinct experts the batch touches,
    E (1 - (1 - k/E)^T), x 3 N K x bytes per weight, plus the activations (2 B each: K in, 2N out of gate_up, 2N in
    and N out of the activation, N in and K out of down per assignment, K per token out of the sum),
with the datasheet peak of the dtype's tensor-core path (bf16, or fp8 for fp8 weights) and datasheet HBM bytes/s.
Each table point gives the kernel's factor over that roofline, eta = measured / ideal, at its r. A deployment's call
is priced as eta(r) x its own ideal: eta taken from the table of the same kernel and dtype on the same GPU class
(Hopper: H100, H200, H20; Ampere: A100) whose measured rows per expert cover r and whose N is nearest (in log N;
the same GPU first on a tie), linear in log r between the table's points; where no table of the class covers r,
the nearest N's factor is held at its end (as kernels.py holds its GEMM curves outside the measured M: beyond the
largest measured rows per expert each expert only fills more BLOCK_SIZE_M tiles of the same config, so the call's
efficiency stops changing with r; vLLM's prefill chunks reach 8192 tokens, 512 rows per expert at E=128, k=8, twice
the largest measured). So a shape or GPU of the class without
its own table is priced by analogy: the kernel is taken to reach the same fraction of the roofline at the same rows
per expert and similar N, and the GPU's own peak and bandwidth move it (the roofline's two terms are what change
between GPUs of one class; the kernel's tiling is the same code).

Where it is not used, and why (steptime.py's grouped-GEMM rule prices the call instead):
- r < MIN_ROWS_PER_EXPERT (decode batches smaller than E / k tokens): several tables are flat there (Gemma4 on H200
  185 us from 1 to 4 tokens, Kimi-VL on A100 183 us at 1) — harness and launch costs the step model prices
  separately, by its kernel gaps and the touched experts' weight stream;
- a GPU class, dtype or kernel without a table (Blackwell, AMD, block-FP8, MXFP4/Marlin, TensorRT-LLM's CUTLASS MoE);
- expert parallelism (each rank's experts run behind an all-to-all dispatch in other kernels and layouts).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kneecap.sim.kernels import _interp_log  # linear in log x, held at the ends

MOE_DIR = Path(__file__).resolve().parents[1] / "data" / "kernels" / "moe"
# Below one row per expert on average the published timings are flat (module docstring): not priced from tables.
MIN_ROWS_PER_EXPERT = 1.0
ACT_BYTES = 2  # bf16 activations between the kernels
# GPU class of each catalog GPU whose fused-MoE timings carry over (same SM generation, same Triton tiles)
GPU_CLASS = {
    **dict.fromkeys(("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h20"), "hopper"),
    **dict.fromkeys(("a100-40", "a100-80"), "ampere"),
}
WEIGHT_BYTES = {"bf16": 2.0, "fp8_w8a8": 1.0, "fp8_block": 1.0 + 4.0 / (128 * 128)}
FP8_DTYPES = ("fp8_w8a8", "fp8_block")


def table_dtype(weight_dtype: str) -> str | None:
    """The table dtype of experts held in `weight_dtype` (kneecap's dtype names); None: none measured for it."""
    d = weight_dtype.lower()
    if d in ("bf16", "bfloat16", "fp16", "float16", "f16"):
        return "bf16"
    return {"fp8": "fp8_w8a8", "fp8-block": "fp8_block"}.get(d)


def distinct_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Experts touched by `tokens` tokens under uniform top-k routing: E (1 - (1 - k/E)^T)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens) if tokens > 0 else 0.0


def ideal_seconds(
    peak_flops: float, hbm_bytes_s: float, dtype: str, num_experts: int, n: float, k: float, top_k: int, tokens: float
) -> float:
    """The additive roofline of one fused-MoE call (module docstring)."""
    assign = tokens * top_k
    flops = 2.0 * assign * 3.0 * n * k
    weights = distinct_experts(num_experts, top_k, tokens) * 3.0 * n * k * WEIGHT_BYTES[dtype]
    acts = ACT_BYTES * (assign * (2.0 * k + 6.0 * n) + tokens * k)
    return flops / peak_flops + (weights + acts) / hbm_bytes_s


def _peak(gpu, dtype: str) -> float:
    return (gpu.fp8_flops or 0.0) if dtype in FP8_DTYPES else gpu.bf16_flops


@dataclass(frozen=True)
class MoeTable:
    """One published table: its shape, GPU, kernel, dtype, and the kernel's factor over the roofline by rows/expert."""

    name: str
    url: str
    gpu: str
    kernel: str
    dtype: str
    num_experts: int
    n: int
    hidden: int
    top_k: int
    tokens: tuple[int, ...]
    kernel_us: tuple[float, ...]
    rows: tuple[float, ...] = ()  # rows per expert at each trusted point (r >= MIN_ROWS_PER_EXPERT), ascending
    eta: tuple[float, ...] = ()  # measured / ideal at those points

    def eta_at(self, r: float) -> float:
        """The factor at r rows per expert, linear in log r between measured points, held at their ends."""
        return _interp_log(self.rows, self.eta, r)


def _read(path: Path) -> MoeTable:
    from kneecap.hardware import get_gpu

    doc = json.loads(path.read_text())
    t = MoeTable(
        name=path.stem,
        url=doc["source"]["url"],
        gpu=doc["gpu"],
        kernel=doc["kernel"],
        dtype=doc["dtype"],
        num_experts=int(doc["num_experts"]),
        n=int(doc["n_per_gpu"]),
        hidden=int(doc["hidden"]),
        top_k=int(doc["top_k"]),
        tokens=tuple(int(x) for x in doc["tokens"]),
        kernel_us=tuple(float(x) for x in doc["kernel_us"]),
    )
    if len(t.tokens) != len(t.kernel_us) or list(t.tokens) != sorted(t.tokens):
        raise ValueError(f"{path}: tokens and kernel_us must pair up, tokens ascending")
    gpu = get_gpu(t.gpu)
    rows, eta = [], []
    for m, us in zip(t.tokens, t.kernel_us):
        r = m * t.top_k / t.num_experts
        if r >= MIN_ROWS_PER_EXPERT:
            ideal = ideal_seconds(
                _peak(gpu, t.dtype), gpu.hbm_bandwidth_bytes_s, t.dtype, t.num_experts, t.n, t.hidden, t.top_k, m
            )
            rows.append(r)
            eta.append(us * 1e-6 / ideal)
    return MoeTable(**{**t.__dict__, "rows": tuple(rows), "eta": tuple(eta)})


@cache
def tables() -> tuple[MoeTable, ...]:
    """Every committed table, read once."""
    return tuple(_read(p) for p in sorted(MOE_DIR.glob("*.json")))


@dataclass(frozen=True)
class FusedMoePricer:
    """One deployment's fused-MoE call priced from the tables of its kernel, dtype and GPU class (module docstring)."""

    peak_flops: float
    hbm_bytes_s: float
    dtype: str
    num_experts: int
    n: float
    hidden: float
    top_k: int
    candidates: tuple[MoeTable, ...]  # nearest N first

    def table_for(self, tokens: float) -> MoeTable | None:
        """The table that prices a call of `tokens` tokens: the nearest N among those whose rows cover r."""
        r = tokens * self.top_k / self.num_experts
        if r < MIN_ROWS_PER_EXPERT:
            return None
        for t in self.candidates:
            if t.rows[0] <= r <= t.rows[-1]:
                return t
        return self.candidates[0]  # outside every measured range: the nearest N, its factor held at its ends

    def seconds(self, tokens: float, flop_scale: float = 1.0, byte_scale: float = 1.0) -> float | None:
        """Seconds of one fused-MoE call over `tokens` tokens on one GPU; None where no table prices it. The scales
        move the roofline's peak and bytes/s (the step model's mfu and bw_efficiency, 1.0 as published)."""
        t = self.table_for(tokens)
        if t is None:
            return None
        ideal = ideal_seconds(
            self.peak_flops * flop_scale,
            self.hbm_bytes_s * byte_scale,
            self.dtype,
            self.num_experts,
            self.n,
            self.hidden,
            self.top_k,
            tokens,
        )
        return t.eta_at(tokens * self.top_k / self.num_experts) * ideal


@cache
def pricer_for(
    gpu, kernel: str, weight_dtype: str, num_experts: int, n: float, hidden: float, top_k: int
) -> FusedMoePricer | None:
    """The pricer for a deployment's experts (gpu: a kneecap.hardware.Gpu); None where no table of the same kernel,
    dtype and GPU class exists (steptime.py's grouped-GEMM rule then prices the call)."""
    dtype = table_dtype(weight_dtype)
    cls = GPU_CLASS.get(gpu.name)
    if not kernel or dtype is None or cls is None or num_experts <= 0 or n <= 0 or _peak(gpu, dtype) <= 0:
        return None
    same = [t for t in tables() if t.kernel == kernel and t.dtype == dtype and GPU_CLASS.get(t.gpu) == cls and t.rows]
    if not same:
        return None
    same.sort(key=lambda t: (abs(math.log(n / t.n)), t.gpu != gpu.name, t.name))
    return FusedMoePricer(
        _peak(gpu, dtype), gpu.hbm_bandwidth_bytes_s, dtype, num_experts, n, hidden, top_k, tuple(same)
    )
