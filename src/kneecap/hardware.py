"""GPUs: the Gpu record and the catalog lookup (get_gpu with aliases and did-you-mean, list_gpus).

The catalog itself is data with a source per figure: kneecap/data/gpus.json (unconfirmed figures
say UNCONFIRMED in their notes). This module only loads it and answers "which GPU is this name?".
Memory is kept three ways because they differ in ways that matter: the datasheet figure (vendor
GB = 10^9 bytes), the bytes the driver reports (nvidia-smi / rocm-smi), and what PyTorch reports
where a log was found.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache

from kneecap.errors import KneecapError


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
    # fp16 tensor-core FLOP/s with fp16 accumulation, where it differs from bf16_flops (fp32 accumulation): GeForce
    # parts run it at twice the rate; None: the same rate (data-center parts)
    fp16_acc_flops: float | None = None
    # streaming multiprocessors (torch multi_processor_count), where sourced: vLLM 0.17+ sizes its Triton top-k/top-p
    # buffer by them; None: not in the catalog
    sm_count: int | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    sources: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def vendor(self) -> str:
        """'NVIDIA' or 'AMD': the first word of the catalog label, which every entry starts with its vendor."""
        return self.label.split()[0]

    @property
    def is_amd(self) -> bool:
        """An AMD Instinct part (ROCm builds of the engines): engines apply some rules on ROCm only."""
        return self.vendor == "AMD"

    def memory_bytes(self, which: str = "datasheet") -> int:
        """HBM bytes per GPU under the chosen accounting: 'datasheet' | 'device' | 'framework'."""
        if which == "datasheet":
            return self.datasheet_bytes
        if which == "device":
            return self.device_bytes if self.device_bytes is not None else self.datasheet_bytes
        if which == "framework":
            return self.framework_bytes if self.framework_bytes is not None else self.memory_bytes("device")
        raise KneecapError(
            f"unknown HBM accounting {which!r}", "use --hbm datasheet, device, framework or a byte count"
        )

    def __post_init__(self) -> None:
        if not isinstance(self.datasheet_bytes, int) or self.datasheet_bytes <= 0:
            raise KneecapError(
                f"GPU {self.name!r}: datasheet_bytes must be a positive integer, got {self.datasheet_bytes!r}",
                "fix the entry in kneecap/data/gpus.json",
            )
        for name in ("device_bytes", "framework_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise KneecapError(
                    f"GPU {self.name!r}: {name} must be a positive integer or null, got {value!r}",
                    "fix the entry in kneecap/data/gpus.json",
                )
        for name in ("hbm_bandwidth_bytes_s", "bf16_flops", "interconnect_bytes_s"):
            if not getattr(self, name) or getattr(self, name) <= 0:
                raise KneecapError(
                    f"GPU {self.name!r}: {name} must be positive", "fix the entry in kneecap/data/gpus.json"
                )
        if not self.label or self.label.split()[0] not in VENDORS:
            raise KneecapError(
                f"GPU {self.name!r}: label {self.label!r} does not start with its vendor",
                f"start the label in kneecap/data/gpus.json with one of {', '.join(VENDORS)}",
            )
        if self.interconnect not in INTERCONNECTS:
            raise KneecapError(
                f"GPU {self.name!r}: unknown interconnect {self.interconnect!r}",
                f"use one of {', '.join(INTERCONNECTS)}",
            )

    @classmethod
    def from_dict(cls, entry: dict) -> "Gpu":
        """Build a Gpu from one gpus.json entry (lists become tuples)."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in entry.items() if k in known}
        return cls(**values)

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


INTERCONNECTS = ("nvlink", "xgmi", "pcie")
VENDORS = ("NVIDIA", "AMD")


def _normalize(name: str) -> str:
    """'NVIDIA H100_SXM' -> 'h100-sxm': lower case, '-' for spaces/underscores, vendor prefix dropped."""
    key = "-".join(name.strip().lower().replace("_", " ").replace("-", " ").split())
    for prefix in ("nvidia-", "amd-", "instinct-", "geforce-"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Gpu]:
    """Catalog key -> Gpu, loaded once from kneecap/data/gpus.json."""
    from importlib import resources

    raw = json.loads(resources.files("kneecap").joinpath("data", "gpus.json").read_text(encoding="utf-8"))
    return {entry["name"]: Gpu.from_dict(entry) for entry in raw["gpus"]}


@lru_cache(maxsize=1)
def _aliases() -> dict[str, str]:
    """Normalized name or alias -> catalog key."""
    table: dict[str, str] = {}
    for key, gpu in _catalog().items():
        for alias in (key, gpu.label, *gpu.aliases):
            table.setdefault(_normalize(alias), key)
            table.setdefault(_normalize(alias).replace("-", ""), key)
    return table


def list_gpus() -> list[Gpu]:
    """Every catalog GPU, in catalog order."""
    return list(_catalog().values())


def get_gpu(name: str) -> Gpu:
    """The catalog GPU for a name or alias ('h100', 'NVIDIA H100 SXM', 'mi300x'); KneecapError with suggestions otherwise."""
    aliases = _aliases()
    key = _normalize(name or "")
    found = aliases.get(key) or aliases.get(key.replace("-", ""))
    if found:
        return _catalog()[found]
    import difflib

    names = list(_catalog())
    close = difflib.get_close_matches(key, list(aliases), n=6, cutoff=0.5)
    suggestions = list(dict.fromkeys(aliases[c] for c in close))[:3]
    hint = f"did you mean {', '.join(suggestions)}?" if suggestions else ""
    hint = (hint + " " if hint else "") + f"known GPUs: {', '.join(names)} (`kneecap plan --list-gpus`)"
    raise KneecapError(f"unknown GPU {name!r}", hint)
