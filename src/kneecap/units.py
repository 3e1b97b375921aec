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


def fmt_over(value: float, limit: float, digits: int = 4, decimals: int | None = None) -> str:
    """'VALUE > LIMIT' for a value past its limit, with as many digits as it takes for the two to read
    differently ('300.04 > 300', never '300.0 > 300'): at least `digits` significant digits, or at least
    `decimals` places after the point where given (rates: '0.210 > 0.2')."""
    limit_text = f"{limit:g}"
    for extra in range(12):
        text = f"{value:.{decimals + extra}f}" if decimals is not None else f"{value:.{digits + extra}g}"
        if float(text) != float(limit_text):
            return f"{text} > {limit_text}"
    return f"{value!r} > {limit!r}"
