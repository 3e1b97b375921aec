"""Fused-MoE kernel tables (data/kernels/moe/*.json): what a whole fused-MoE block costs, from published timings.

Owns reading those tables and pricing one fused-MoE call (top-k, moe_align_block_size, the gate_up and down grouped
GEMMs, SiLU-and-mul, the top-k sum) for a deployment's shape; not the rest of the step (steptime.py) and not which
engine runs which kernel (sim/config.py EngineProfile.moe_kernel).

The data: vLLM's benchmarks/kernels/benchmark_moe.py and SGLang's tuning_fused_moe_triton.py time the whole
fused_moe call at a model's shape, GPU, dtype and TP with uniform random routing; pull requests that add tuned
configs paste those tables (each file names its source: vllm-project/vllm#24700 Mixtral bf16 TP 2 and Qwen3-30B-A3B
fp8 on H100, vllm-project/vllm#44818 Gemma4 bf16 on H200, vllm-project/vllm#40542 Kimi-VL-A3B bf16 on A100,
sgl-project/sglang#11730 Qwen3-235B-A22B fp8 TP 8 on H200, vllm-project/vllm#13932 DeepSeek-V3 block-FP8 at TP 1, 2, 4
and 8 on H100). The Triton kernel runs each expert's rows in tiles of
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

Block-FP8 experts (weight_block_size [128, 128]: DeepSeek-V3/R1, the Qwen3 FP8 checkpoints), vLLM only. vLLM 0.10.2 and
0.11.0 run them on Hopper without expert parallelism with this Triton kernel and its block scales: Fp8MoEMethod.apply
(model_executor/layers/quantization/fp8.py) calls fused_experts, as no all-to-all kernel is set up and
VLLM_USE_FLASHINFER_MOE_FP8 defaults to 0; fused_experts (fused_moe/fused_moe.py) hands the call to DeepGEMM only where
DeepGEMM is allowed (VLLM_USE_DEEP_GEMM: default 0 in 0.10.2, 1 in 0.11.0; the deep_gemm package, which vLLM's Docker
image installs and its wheel does not) and _valid_deep_gemm holds (fused_moe/deep_gemm_moe.py: at least 128 tokens and
an intermediate width per GPU above 512). So at N <= 512 (DeepSeek-V3/R1 at TP 8: 256; Qwen3-235B-A22B-FP8 at TP 4 and
8: 384 and 192) both releases run Triton at every batch; at N > 512 with DeepGEMM installed 0.11 runs DeepGEMM from 128
tokens, which is not told apart here (priced as Triton). The four tables (vllm-project/vllm#13932, timed in February
2025 with vLLM's own benchmark_moe.py) reach 3.3-4.6x their roofline at 4-64 rows per expert (5.6x at TP 1's 96), N 256
to 2048 alike. vLLM 0.11.0's fused_moe/configs hold a tuned config for DeepSeek's TP 8 shape on the H200
(E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json) and none for the H100; an H200 is priced
from the H100 tables by its own roofline, as every GPU of a class is. They are marked for vLLM only ("engines" in the
file): SGLang ships its own fused-MoE configs per Triton release
(python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_*, e.g. sgl-project/sglang#7687's H200 DeepSeek-V3
configs for Triton 3.3.1) and an SM90 swap-AB path for FP8 (sgl-project/sglang#15712), so vLLM's timing does not time
its kernel; SGLang's block-FP8 experts keep the grouped-GEMM rule.

Tuned or default config: not told apart. vLLM 0.10.2 and 0.11.0 run a tuned config only where the release ships a
file named for the shape (fused_moe/fused_moe.py get_config_file_name and get_moe_configs, lines 738-800 in 0.11.0:
"E=<E>,N=<N>,device_name=<name>[,dtype=<dtype>][,block_shape=[128,128]].json" under fused_moe/configs, N the
per-GPU intermediate width, w2's last dimension, and the name the GPU reports with spaces as underscores, e.g.
NVIDIA_A100-SXM4-80GB, NVIDIA_H100_80GB_HBM3, NVIDIA_H200); elsewhere try_get_optimal_moe_config falls back to
get_default_config (the same in both releases). Every vLLM deployment of this kernel that the validation set holds
has a shipped file in both releases (read in their wheels): Qwen3-235B-A22B bf16 at TP 8 (E=128,N=192) on the
A100-SXM4-80GB and the H100 SXM, DeepSeek-R1 block-FP8 at TP 8 on the H200
(E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]), Mixtral-8x7B bf16 at TP 2 on the H200
(E=8,N=7168). Some tables time the default config rather than a tuned one: the Qwen3-30B-A3B FP8 H100 table (neither
release ships E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json), the SGLang Qwen3-235B-A22B FP8
H200 table (its "without tuned kernel" block), and which config the DeepSeek-V3 H100 tables ran is not stated (neither
release ships an H100 block-FP8 file for E=256 at N 256 to 2048). A call with no shipped file is not priced
differently. At decode sizes the one whole-call timing found of that default on Ampere is as close to the roofline as
the tuned A100 table: vllm-project/vllm#19049 ("Before this PR": Qwen3-30B-A3B bf16, E=128, N=768, an A100 PCIe
40GB, the printed config BLOCK_SIZE_M 16, N 32, K 64, GROUP_SIZE_M 1, which is get_default_config's for M <= E) runs
611-943 us from 16 to 96 tokens, 1.17-1.21 x its roofline at 1-6 rows per expert, where the tuned Kimi-VL A100 table
is at 1.19-1.20 (1.5 and 6 rows per expert). No timing of that default against a tuned config at one shape of the
whole fused_moe call on Hopper, or on Ampere past 96 tokens, was found (vllm-project/vllm#40542, #44818, #37814 and
#35457 date from 2026, when vLLM's main had replaced that default (#34846, February 2026), and do not name a release
that keeps it; #44152 times single kernel launches; #34846's own old-against-new tables were not read in full).

Where it is not used, and why (steptime.py's grouped-GEMM rule prices the call instead):
- r < MIN_ROWS_PER_EXPERT (decode batches smaller than E / k tokens): several tables are flat there (Gemma4 on H200
  185 us from 1 to 4 tokens, Kimi-VL on A100 183 us at 1) — harness and launch costs the step model prices
  separately, by its kernel gaps and the touched experts' weight stream;
- a GPU class, dtype, kernel or engine without a table (Blackwell, AMD, MXFP4/Marlin, TensorRT-LLM's CUTLASS MoE,
  SGLang's block-FP8 experts; vLLM runs FP8 experts on Ampere with Marlin, fp8.py use_marlin below compute
  capability 8.9). No published MXFP4 Marlin MoE or triton_kernels matmul_ogs timing at gpt-oss's shape was found;
- expert parallelism (each rank's experts run behind an all-to-all dispatch in other kernels and layouts).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kneecap.sim.kernels import interp_log  # linear in log x, held at the ends

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
    engines: tuple[str, ...] = ()  # engines whose kernel and configs the table times (); (): every engine running it
    rows: tuple[float, ...] = ()  # rows per expert at each trusted point (r >= MIN_ROWS_PER_EXPERT), ascending
    eta: tuple[float, ...] = ()  # measured / ideal at those points

    def eta_at(self, r: float) -> float:
        """The factor at r rows per expert, linear in log r between measured points, held at their ends."""
        return interp_log(self.rows, self.eta, r)


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
        engines=tuple(doc.get("engines", ())),
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
    gpu, kernel: str, weight_dtype: str, num_experts: int, n: float, hidden: float, top_k: int, engine: str = ""
) -> FusedMoePricer | None:
    """The pricer for a deployment's experts (gpu: a kneecap.hardware.Gpu) under `engine` (an engine profile's name);
    None where no table of the same kernel, dtype and GPU class exists for that engine (steptime.py's grouped-GEMM rule
    then prices the call)."""
    dtype = table_dtype(weight_dtype)
    cls = GPU_CLASS.get(gpu.name)
    if not kernel or dtype is None or cls is None or num_experts <= 0 or n <= 0 or _peak(gpu, dtype) <= 0:
        return None
    same = [
        t
        for t in tables()
        if t.kernel == kernel
        and t.dtype == dtype
        and GPU_CLASS.get(t.gpu) == cls
        and t.rows
        and (not t.engines or engine in t.engines)
    ]
    if not same:
        return None
    same.sort(key=lambda t: (abs(math.log(n / t.n)), t.gpu != gpu.name, t.name))
    return FusedMoePricer(
        _peak(gpu, dtype), gpu.hbm_bandwidth_bytes_s, dtype, num_experts, n, hidden, top_k, tuple(same)
    )
