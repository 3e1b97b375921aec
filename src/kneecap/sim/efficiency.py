"""Achievable efficiency by GPU (data/efficiency.json): GEMM, attention, HBM and all-reduce figures.

Owns reading the file and resolving a GPU's figures (its own measurement, else its family's);
not the step-time formula that uses them (steptime.py). Every figure carries its source in the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kneecap.hardware import get_gpu

EFFICIENCY_FILE = Path(__file__).resolve().parents[1] / "data" / "efficiency.json"
KEYS = ("gemm_bf16", "gemm_fp8", "gemm_fp4", "attention", "hbm")


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet peaks (gpus.json) that tuned kernels reach on one GPU; bus bytes/s measured."""

    gemm_bf16: float
    gemm_fp8: float
    gemm_fp4: float
    attention: float
    hbm: float
    gemm_hbm: float  # a decode (skinny) GEMM's weight-streaming bytes/s over the datasheet bandwidth
    allreduce_busbw_bytes_s: float | None  # None: take allreduce_link_fraction x the link's per-direction bytes/s
    allreduce_link_fraction: float
    family: str
    # GEMM fraction of the dtype's peak by the GEMM's rows M, where a kernel table measured it:
    # {dtype class: ((M, fraction), ...)} ascending in M (data/efficiency.json "gemm_<dtype>_by_m")
    gemm_by_m: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()
    # routed experts held in 4-bit (MXFP4/NVFP4) and run weight-only on a GPU without FP4 hardware: their
    # weight bytes/s over the datasheet bandwidth, where measured ("moe_w4a16_hbm"); None: gemm_hbm
    moe_w4a16_hbm: float | None = None
    # such experts' GEMM compute ceiling where the engine runs them with the Marlin MoE kernel (Ampere mma.sync with
    # in-register dequantisation, issue-bound on Hopper): TFLOP/s over the bf16 peak, where measured
    # ("moe_marlin_w4a16"); None: no ceiling beyond the bf16 GEMM rate
    moe_marlin_w4a16: float | None = None
    # the kernel table (data/kernels/<name>.json) this GPU takes by analogy ("kernel_table"); None: its own, if any
    kernel_table: str | None = None

    def gemm(self, dtype_class: str) -> float:
        return {"bf16": self.gemm_bf16, "fp8": self.gemm_fp8, "fp4": self.gemm_fp4}[dtype_class]

    def gemm_curve(self, dtype_class: str) -> tuple[tuple[int, float], ...] | None:
        """The measured (M, fraction of peak) points for this dtype class, or None (the flat gemm() figure)."""
        return dict(self.gemm_by_m).get(dtype_class)


def curve_at(points: tuple[tuple[int, float], ...], m: float) -> float:
    """Piecewise-linear in M through (M, fraction) points; at a GEMM's smallest rows the fraction grows with M
    (the weights are streamed once whatever M), so below the first point it scales with M, above the last it holds."""
    m0, f0 = points[0]
    if m <= m0:
        return f0 * max(m, 0.0) / m0
    for m1, f1 in points[1:]:
        if m <= m1:
            return f0 + (f1 - f0) * (m - m0) / (m1 - m0)
        m0, f0 = m1, f1
    return f0


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(EFFICIENCY_FILE.read_text())


def efficiency_for(gpu_name: str) -> Efficiency:
    """The GPU's own figures where data/efficiency.json has them, else its vendor's family's."""
    doc = _doc()
    entry = doc["gpus"].get(gpu_name, {})
    family = entry.get("family") or get_gpu(gpu_name).vendor.lower()
    base = doc["families"][family]
    vals = {k: float(entry.get(k, base[k])) for k in KEYS}
    vals["gemm_hbm"] = float(entry.get("gemm_hbm", base.get("gemm_hbm", vals["hbm"])))  # else the hbm fraction
    busbw = entry.get("allreduce_busbw_bytes_s")
    curves = tuple(
        (
            cls,
            tuple(
                (int(m), float(f))
                for m, f in zip(entry[f"gemm_{cls}_by_m"]["m"], entry[f"gemm_{cls}_by_m"]["fraction"])
            ),
        )
        for cls in ("bf16", "fp8", "fp4")
        if f"gemm_{cls}_by_m" in entry
    )
    w4 = entry.get("moe_w4a16_hbm")
    marlin = entry.get("moe_marlin_w4a16")
    return Efficiency(
        **vals,
        allreduce_busbw_bytes_s=None if busbw is None else float(busbw),
        allreduce_link_fraction=float(base["allreduce_link_fraction"]),
        family=family,
        gemm_by_m=curves,
        moe_w4a16_hbm=None if w4 is None else float(w4),
        moe_marlin_w4a16=None if marlin is None else float(marlin),
        kernel_table=entry.get("kernel_table"),
    )
