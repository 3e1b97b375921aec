"""Achievable efficiency by GPU (data/efficiency.json): GEMM, attention, HBM and all-reduce figures.

Owns reading the file and resolving a GPU's figures (its own measurement, else its family's);
not the step-time formula that uses them (steptime.py). Every figure carries its source in the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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

    def gemm(self, dtype_class: str) -> float:
        return {"bf16": self.gemm_bf16, "fp8": self.gemm_fp8, "fp4": self.gemm_fp4}[dtype_class]


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(EFFICIENCY_FILE.read_text())


def family_of(gpu_name: str, interconnect: str) -> str:
    return "amd" if gpu_name.startswith("mi") or interconnect == "xgmi" else "nvidia"


def efficiency_for(gpu_name: str, interconnect: str = "nvlink") -> Efficiency:
    """The GPU's own figures where data/efficiency.json has them, else its family's."""
    doc = _doc()
    entry = doc["gpus"].get(gpu_name, {})
    family = entry.get("family") or family_of(gpu_name, interconnect)
    base = doc["families"][family]
    vals = {k: float(entry.get(k, base[k])) for k in KEYS}
    vals["gemm_hbm"] = float(entry.get("gemm_hbm", base.get("gemm_hbm", vals["hbm"])))  # else the hbm fraction
    busbw = entry.get("allreduce_busbw_bytes_s")
    return Efficiency(**vals, allreduce_busbw_bytes_s=None if busbw is None else float(busbw),
                      allreduce_link_fraction=float(base["allreduce_link_fraction"]), family=family)
