"""The $/GPU-hour table: kneecap/data/prices.json (each price with its page, transcriber and date) or a
user's --prices FILE of the same shape ({"prices": {gpu: {"usd_per_gpu_hour": x, ...}}} or {gpu: x}).

Owns loading and checking prices; not which GPUs exist (kneecap.hardware) nor what a deployment costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.list_file import strict_json
from kneecap.hardware import get_gpu

DEFAULT_PRICES = Path(__file__).resolve().parents[1] / "data" / "prices.json"


@dataclass(frozen=True)
class Price:
    gpu: str  # catalog name
    usd_per_gpu_hour: float | None  # None: not sourced (left out by default)
    source: str = ""
    date: str = ""
    note: str = ""  # why there is no price, or what to keep in mind about it


def _entry(gpu: str, raw, origin: str) -> Price:
    name = get_gpu(gpu).name  # unknown GPU -> one-line error with did-you-mean
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = {"usd_per_gpu_hour": raw}
    if not isinstance(raw, dict):
        raise KneecapError(
            f"{origin}: price of {gpu!r} is neither a number nor an object",
            'write e.g. {"prices": {"h100-sxm": {"usd_per_gpu_hour": 3.29, "source": "URL"}}}',
        )
    value = raw.get("usd_per_gpu_hour")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise KneecapError(
                f"{origin}: usd_per_gpu_hour of {gpu!r} must be a positive number, got {value!r}",
                "write dollars per GPU-hour, e.g. 3.29",
            )
        value = float(value)
    return Price(
        gpu=name,
        usd_per_gpu_hour=value,
        source=str(raw.get("source", "")),
        date=str(raw.get("date", "")),
        note=str(raw.get("note", "")),
    )


def load_prices(path: str | Path | None = None) -> dict[str, Price]:
    """{catalog GPU name: Price} from the shipped table, or from `path` (which replaces it entirely)."""
    origin = str(path) if path else "kneecap/data/prices.json"
    p = Path(path) if path else DEFAULT_PRICES
    try:
        doc = strict_json(p.read_text(), f"--prices file {origin}")
    except FileNotFoundError:
        raise KneecapError(
            f"--prices file {origin} not found", "pass a JSON file of {gpu: dollars per GPU-hour}"
        ) from None
    except (OSError, ValueError) as exc:
        raise KneecapError(
            f"--prices file {origin} is not readable JSON ({exc})", 'write e.g. {"h100-sxm": 3.29, "a100-80": 1.59}'
        ) from None
    if not isinstance(doc, dict):
        raise KneecapError(f"--prices file {origin} is not a JSON object", 'write e.g. {"h100-sxm": 3.29}')
    table = doc.get("prices", doc)
    if not isinstance(table, dict):
        raise KneecapError(
            f"--prices file {origin}: 'prices' is not an object", 'write e.g. {"prices": {"h100-sxm": 3.29}}'
        )
    out: dict[str, Price] = {}
    for gpu, raw in table.items():
        if str(gpu).startswith("_"):
            continue
        price = _entry(str(gpu), raw, origin)
        out[price.gpu] = price
    return out
