"""Unit constants and formatting: the only place GiB, GB, MiB and time-unit factors live.

Everything inside kneecap counts bytes (int) and seconds (float); these helpers convert
only at the edges (flags in, rendering out). GB = 10^9 bytes (datasheets), GiB = 2^30 bytes
(drivers, allocators).
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
KB = 1000
MB = 1000**2
GB = 1000**3

MS_PER_S = 1000.0


def to_gib(num_bytes: int | float) -> float:
    """Bytes -> GiB (2^30)."""
    return num_bytes / GiB


def to_gb(num_bytes: int | float) -> float:
    """Bytes -> GB (10^9)."""
    return num_bytes / GB


def gib_to_bytes(gib: float) -> int:
    """GiB (2^30) -> whole bytes, rounded down."""
    return int(gib * GiB)


def fmt_gib(num_bytes: int | float, digits: int = 2) -> str:
    return f"{num_bytes / GiB:,.{digits}f} GiB"


def fmt_bytes(num_bytes: int | float) -> str:
    """Human-readable bytes in binary units, e.g. '320 KiB', '2.50 GiB'."""
    n = float(num_bytes)
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= factor:
            value = n / factor
            return f"{value:,.0f} {unit}" if value == int(value) else f"{value:,.2f} {unit}"
    return f"{int(n):,} B"


def fmt_int(n: int) -> str:
    return f"{n:,}"
