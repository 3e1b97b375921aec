"""GPUs: the Gpu record and the catalog lookup.

The catalog itself is data with a source per figure: kneecap/data/gpus.json. This module
only loads it and answers "which GPU is this name?". Memory is kept twice because the
two differ in ways that matter: the datasheet figure (vendor GB = 10^9 bytes) and the bytes
the driver reports (nvidia-smi / rocm-smi), plus what a framework sees where known.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    """One accelerator model. All figures per GPU; bandwidths in bytes/s; FLOP/s dense (no sparsity)."""

    name: str  # catalog key, e.g. "h100-sxm"
    label: str  # vendor name, e.g. "NVIDIA H100 80GB HBM3 (SXM)"
    datasheet_bytes: int  # vendor memory figure as bytes: "192 GB" -> 192 * 10^9
    device_bytes: int | None  # total the driver reports (nvidia-smi MiB x 2^20, rocm-smi bytes)
    framework_bytes: int | None  # total a framework reports (torch total_memory / vLLM log), where sourced
    hbm_bandwidth_bytes_s: float
    bf16_flops: float
    fp8_flops: float | None  # None: no native fp8 tensor-core path on this generation
    fp4_flops: float | None
    interconnect: str  # "nvlink" | "xgmi" | "pcie"
    interconnect_bytes_s: float  # per GPU, per direction
    aliases: tuple[str, ...] = field(default_factory=tuple)
    sources: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def memory_bytes(self, which: str = "datasheet") -> int:
        """HBM bytes per GPU under the chosen accounting: 'datasheet' | 'device' | 'framework'."""
        if which == "datasheet":
            return self.datasheet_bytes
        if which == "device":
            return self.device_bytes if self.device_bytes is not None else self.datasheet_bytes
        if which == "framework":
            if self.framework_bytes is not None:
                return self.framework_bytes
            return self.memory_bytes("device")
        raise ValueError(which)
