"""How numbers look in a report: fixed digits per quantity, a dash for 'no data', never a fake zero.

Table headers carry the unit ('TTFT p99 (ms)'); key/value lines carry it in the value
('1,234.5 tok/s'). Byte quantities go through kneecap.units (GiB = 2^30).
"""

from __future__ import annotations

import math

from kneecap.units import GiB

MISSING = "—"  # shown where a value is absent (no samples, key not in the summary)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num(value: object, digits: int = 1) -> str:
    """A plain number with thousands separators, or MISSING."""
    if not is_number(value):
        return MISSING
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1000:
        return f"{int(round(value)):,}"
    return f"{value:,.{digits}f}"


def count(value: object) -> str:
    if not is_number(value):
        return MISSING
    return f"{int(value):,}"


def ms(value: object) -> str:
    """Milliseconds: 1 decimal under 100 ms, whole ms above."""
    if not is_number(value):
        return MISSING
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def rate(value: object) -> str:
    """tok/s or req/s: 2 decimals under 10, 1 under 1000, whole above."""
    if not is_number(value):
        return MISSING
    if abs(value) < 10:
        return f"{value:,.2f}"
    if abs(value) < 1000:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def pct(fraction: object, digits: int = 1, signed: bool = False) -> str:
    """A fraction (0.25) as a percentage ('25.0 %')."""
    if not is_number(fraction):
        return MISSING
    sign = "+" if signed else ""
    return f"{fraction * 100:{sign},.{digits}f} %"


def gib(num_bytes: object, digits: int = 2) -> str:
    """Bytes as GiB without the unit (for columns headed '(GiB)')."""
    if not is_number(num_bytes):
        return MISSING
    return f"{num_bytes / GiB:,.{digits}f}"


def with_unit(text: str, unit: str) -> str:
    return text if text == MISSING else f"{text} {unit}"


def _load_of(level: object) -> tuple[object, object]:
    """(concurrency, rate) of a typed level (LevelSummary) or of a dict holding them (a knee, a skipped level)."""
    if isinstance(level, dict):
        return level.get("concurrency"), level.get("rate")
    return getattr(level, "concurrency", None), getattr(level, "rate", None)


def load_label(level: object) -> tuple[str, float | None, str]:
    """(axis name, load value, unit) of one sweep level: closed loop by concurrency, open loop by rate."""
    concurrency, rate = _load_of(level)
    if is_number(concurrency):
        return "concurrency", float(concurrency), "concurrent requests"
    if concurrency == "max":
        return "concurrency", None, "all at once"
    if is_number(rate):
        return "rate", float(rate), "req/s"
    return "level", None, ""


def load_text(level: object) -> str:
    """'C=64', 'rate=2.5 req/s', 'C=max'."""
    concurrency, rate = _load_of(level)
    if concurrency is not None:
        return f"C={count(concurrency) if is_number(concurrency) else concurrency}"
    if rate is not None:
        return f"{num(rate, 2) if is_number(rate) else rate} req/s"
    return MISSING


def limit_and_breaches(cell: dict) -> list[str]:
    """A load-plan cell's reasons: the declared limit it crossed, then each SLO breach (as the run wrote them)."""
    return ([str(cell["limit"])] if cell.get("limit") else []) + [str(b) for b in cell.get("breaches") or []]
