"""Kernel tables (data/kernels/<gpu>.json): GEMM and attention rates by shape, measured on a real card.

Owns reading a table and answering, for one GPU, three questions by shape: what fraction of the dtype's peak a GEMM
of M rows over an N x K weight reaches; what fraction of the bf16 peak a prefill attention pass of a given size
reaches; what bytes/s a decode attention pass over a given number of cached bytes streams. Not the step formula
(steptime.py) nor the flat best-shape figures (efficiency.py).

GEMM (M, N, K): each measured weight shape has its curve of fraction-of-peak over M, linear in log M between
measured rows. A weight of another size is priced through the measured shapes whose N x K bracket it, each at
the M that gives the same work (M x N x K), linear in log(N x K) between the two; outside the measured sizes, the
nearest shape. So a TP-sharded layer's narrow GEMM (N/TP or K/TP) runs at the rate of the smaller work it is.
Rows below MIN_TRUSTED_M: the table's figures there carry a launch and event pair per kernel that a CUDA-graph
replay does not pay (the table's own note), so the fraction measured at MIN_TRUSTED_M is held below it and the
weight stream (steptime.py's gemm_byte_rate) bounds the time from below.
Prefill attention: fraction of the bf16 peak by the FLOPs of one layer's pass (4 x heads x pairs x head_dim),
linear in log FLOPs between the measured sequence lengths, held outside them (a batch of sequences in one varlen
kernel is priced by its total work). Decode attention: K/V bytes/s by the bytes one layer's pass reads, linear in
log bytes between the measured (batch, length) rows, held outside them.
A GPU without its own table takes one by analogy (efficiency.json "kernel_table") or the H200 table's shape
scaled to its own flat figures: GEMM and prefill attention fractions x (its best-shape fraction / the table's
best), decode bytes/s x (its achievable memory rate / the H200's measured copy rate). By analogy, decode bytes/s
scale the same way. That scaling is an assumption, stated where used.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parents[1] / "data" / "kernels"
REFERENCE_TABLE = "h200"  # the table whose shape GPUs without one take
MIN_TRUSTED_M = 128  # GEMM rows from which the table's launch and event overhead is a few percent or less
MIN_TRUSTED_DECODE_BATCH = 32  # decode attention: smaller batches' figures are mostly the launch and event pair


def interp_log(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Linear in log x through (xs, ys) ascending; held at the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * math.log(x / x0) / math.log(x1 / x0)


@dataclass(frozen=True)
class GemmCurves:
    """One dtype's measured GEMM fractions of peak: per weight shape (N x K) a curve over M (M >= MIN_TRUSTED_M)."""

    m: tuple[float, ...]
    sizes: tuple[float, ...]  # N x K of each shape, ascending
    fractions: tuple[tuple[float, ...], ...]  # per shape, fraction of the peak at each m
    scale: float = 1.0  # another GPU's best-shape fraction over this table's best (1.0: the table's own GPU)

    def at_shape(self, i: int, m: float) -> float:
        return interp_log(self.m, self.fractions[i], max(m, self.m[0]))

    def fraction(self, m: float, n: float, k: float) -> float:
        """Fraction of the dtype's peak a GEMM of m rows over an n x k weight reaches (module docstring)."""
        nk = n * k
        sizes = self.sizes
        if nk <= sizes[0]:
            f = self.at_shape(0, m * nk / sizes[0])
        elif nk >= sizes[-1]:
            f = self.at_shape(len(sizes) - 1, m * nk / sizes[-1])
        else:
            i = bisect_right(sizes, nk)
            fa = self.at_shape(i - 1, m * nk / sizes[i - 1])
            fb = self.at_shape(i, m * nk / sizes[i])
            w = math.log(nk / sizes[i - 1]) / math.log(sizes[i] / sizes[i - 1])
            f = fa + (fb - fa) * w
        return f * self.scale

    @property
    def best(self) -> float:
        return max(max(f) for f in self.fractions)


@dataclass(frozen=True)
class KernelTable:
    """A GPU's kernel rates by shape (module docstring); `source` says where the measurement comes from."""

    name: str
    source: str
    gemm: tuple[tuple[str, GemmCurves], ...]  # (dtype class, curves)
    prefill_flops: tuple[float, ...]  # FLOPs of one layer's pass, ascending
    prefill_fraction: tuple[float, ...]  # of the bf16 peak
    decode_bytes: tuple[float, ...]  # K/V bytes one layer's pass reads, ascending
    decode_bytes_s: tuple[float, ...]
    copy_bytes_s: float  # the table GPU's measured device-to-device copy rate (read + written)
    peaks: dict  # {dtype class: the table GPU's datasheet dense FLOP/s the fractions are of}
    attention_scale: float = 1.0
    bandwidth_scale: float = 1.0

    def gemm_curves(self, cls: str) -> GemmCurves | None:
        return dict(self.gemm).get(cls)

    def prefill_attention_fraction(self, flops: float) -> float:
        return interp_log(self.prefill_flops, self.prefill_fraction, max(flops, 1.0)) * self.attention_scale

    def decode_attention_bytes_s(self, nbytes: float) -> float:
        return interp_log(self.decode_bytes, self.decode_bytes_s, max(nbytes, 1.0)) * self.bandwidth_scale

    @property
    def prefill_best(self) -> float:
        return max(self.prefill_fraction)


@cache
def load_table(name: str) -> KernelTable:
    """data/kernels/<name>.json as a KernelTable (fractions of the peaks the file states)."""
    doc = json.loads((KERNELS_DIR / f"{name}.json").read_text())
    peaks = {k: float(v) for k, v in doc["peaks"].items()}
    shapes = doc["gemm"]["shapes"]
    order = sorted(shapes, key=lambda s: shapes[s][0] * shapes[s][1])
    gemm = []
    for cls in ("bf16", "fp8"):
        g = doc["gemm"].get(cls)
        if not g:
            continue
        keep = [i for i, m in enumerate(g["m"]) if m >= MIN_TRUSTED_M]
        gemm.append(
            (
                cls,
                GemmCurves(
                    m=tuple(float(g["m"][i]) for i in keep),
                    sizes=tuple(float(shapes[s][0] * shapes[s][1]) for s in order),
                    fractions=tuple(tuple(g["tflops"][s][i] * 1e12 / peaks[cls] for i in keep) for s in order),
                ),
            )
        )
    pre = doc["attention_prefill"]
    per_pair = 4.0 * pre["heads"] * pre["head_dim"]
    pf = tuple(per_pair * L * L / 2.0 for L in pre["seq_len"])
    pfrac = tuple(f / (ms * 1e-3) / peaks["bf16"] for f, ms in zip(pf, pre["ms"]))
    dec = doc["attention_decode"]
    per_token = 2.0 * dec["kv_heads"] * dec["head_dim"] * 2  # K and V, bf16
    rows = sorted(
        (b * L * per_token, b * L * per_token / (us * 1e-6))
        for b, L, us in dec["rows"]
        if b >= MIN_TRUSTED_DECODE_BATCH
    )
    return KernelTable(
        name=name,
        source=doc["source"],
        gemm=tuple(gemm),
        prefill_flops=pf,
        prefill_fraction=pfrac,
        decode_bytes=tuple(r[0] for r in rows),
        decode_bytes_s=tuple(r[1] for r in rows),
        copy_bytes_s=float(doc["hbm_copy_bytes_s"]),
        peaks=peaks,
    )


def table_for(gpu, efficiency) -> KernelTable:
    """The GPU's kernel table: its own file; else the one efficiency.json names by analogy (the same compute die) or
    the reference table, moved to this GPU (module docstring: an assumption, stated)."""
    own = efficiency.kernel_table or (gpu.name if (KERNELS_DIR / f"{gpu.name}.json").exists() else None)
    if own == gpu.name:
        return load_table(own)
    flats = None if own else (efficiency.gemm_bf16, efficiency.gemm_fp8, efficiency.gemm_fp4, efficiency.attention)
    return _moved(
        own or REFERENCE_TABLE,
        gpu.name,
        (gpu.bf16_flops, gpu.fp8_flops or 0.0, gpu.fp4_flops or 0.0),
        gpu.hbm_bandwidth_bytes_s * efficiency.hbm,
        flats,
    )


@cache
def _moved(
    name: str,
    gpu_name: str,
    peaks: tuple[float, float, float],
    hbm_bytes_s: float,
    flats: tuple[float, float, float, float] | None,
) -> KernelTable:
    """Table `name` moved to another GPU. Sizes map by what sets each kernel's rate: a GEMM's rows by the GPU's
    ridge point (peak FLOP/s over achievable bytes/s: the same M is relatively more memory-bound where the ridge is
    higher), a prefill pass's FLOPs by the peak (the same FLOPs are a shorter pass on a faster GPU, where fixed costs
    weigh more), a decode pass's bytes/s by the achievable memory rate (hbm_bytes_s: datasheet x efficiency.json hbm)
    over the table GPU's copy rate. flats (bf16, fp8, fp4, attention best-shape fractions; None: by analogy, the
    table's own fractions): the curves' heights are scaled so that their best is the GPU's flat figure."""
    ref = load_table(name)
    ref_ridge = {c: ref.peaks[c] / ref.copy_bytes_s for c in ref.peaks}
    gemm = []
    # fp4 takes the fp8 curve's shape (no FP4 kernel table measured)
    for i, (cls, src) in enumerate((("bf16", "bf16"), ("fp8", "fp8"), ("fp4", "fp8"))):
        c = ref.gemm_curves(src)
        if c is None or not peaks[i]:
            continue
        m_scale = ref_ridge[src] / (peaks[i] / hbm_bytes_s)
        gemm.append(
            (
                cls,
                GemmCurves(
                    tuple(m * m_scale for m in c.m),
                    c.sizes,
                    c.fractions,
                    scale=1.0 if flats is None else flats[i] / c.best,
                ),
            )
        )
    f_scale = peaks[0] / ref.peaks["bf16"]
    return replace(
        ref,
        name=f"{name} moved to {gpu_name}" + (" (by analogy)" if flats is None else " (shape scaled)"),
        gemm=tuple(gemm),
        prefill_flops=tuple(f * f_scale for f in ref.prefill_flops),
        attention_scale=1.0 if flats is None else flats[3] / ref.prefill_best,
        bandwidth_scale=hbm_bytes_s / ref.copy_bytes_s,
    )
