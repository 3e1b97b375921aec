"""Unit constants and formatting: the only place GiB, GB, MiB and time-unit factors live.

Everything inside kneecap counts bytes (int) and seconds (float), converted
only at the edges (flags in, rendering out). GB = 10^9 bytes (datasheets), GiB = 2^30 bytes
(drivers, allocators).
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3

MS_PER_S = 1000.0


def fmt_bytes(num_bytes: int | float) -> str:
    """Human-readable bytes in binary units, e.g. '320 KiB', '2.50 GiB'."""
    n = float(num_bytes)
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= factor:
            value = n / factor
            return f"{value:,.0f} {unit}" if value == int(value) else f"{value:,.2f} {unit}"
    return f"{int(n):,} B"
