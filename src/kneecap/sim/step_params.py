"""Step-time constants as users hand them in: a calibration file written by `kneecap calibrate`, any
{"step_time": {...}} JSON, a flat JSON mapping, or k=v pairs. The one file the simulator's setup reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.list_file import strict_json
from kneecap.sim.steptime import StepTimeParams


def parse_step_params(spec: str | None, flag: str = "--step-params"):
    """'mfu=0.4,bw_efficiency=0.7' or a JSON file ({"step_time": {...}} or a flat mapping) -> StepTimeParams;
    `flag` is the option the user gave it with, which errors name."""
    if not spec:
        return StepTimeParams()
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        try:
            data = strict_json(path.read_text(encoding="utf-8"), f"step-time file {spec}")
        except FileNotFoundError:
            raise KneecapError(
                f"step-time file {spec} not found", f"pass {flag} a JSON file or k=v pairs, e.g. mfu=0.4"
            ) from None
        except IsADirectoryError:
            raise KneecapError(
                f"step-time file {spec} is a folder",
                f"pass {flag} the calibration JSON inside it (kneecap calibrate --out FILE), or k=v pairs",
            ) from None
        except OSError as exc:
            raise KneecapError(
                f"cannot read step-time file {spec}: {exc.strerror or exc}", f"check {flag} names a readable file"
            ) from None
        except UnicodeDecodeError:
            raise KneecapError(
                f"step-time file {spec} is not UTF-8 text",
                f"pass {flag} a JSON file such as kneecap calibrate --out FILE writes",
            ) from None
        except json.JSONDecodeError as exc:
            raise KneecapError(f"step-time file {spec} is not JSON ({exc.msg})", "fix the file") from None
        if isinstance(data, dict) and isinstance(data.get("step_time"), dict):
            data = data["step_time"]
        if not isinstance(data, dict):
            raise KneecapError(f"step-time file {spec} holds no mapping", 'write e.g. {"mfu": 0.4}')
        return StepTimeParams.from_dict(data)
    values = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key, sep, raw = part.partition("=")
        if not sep:
            raise KneecapError(f"{flag} item {part!r} is not key=value", f"pass e.g. {flag} mfu=0.4,overhead_s=0.003")
        try:
            values[key.strip()] = None if raw.strip().lower() == "none" else float(raw)
        except ValueError:
            raise KneecapError(f"{flag} {key}={raw!r} is not a number", "pass e.g. mfu=0.4") from None
    count = values.get("activation_bytes")
    if isinstance(count, float) and count.is_integer():  # a whole count; anything else StepTimeParams refuses
        values["activation_bytes"] = int(count)
    return StepTimeParams.from_dict(values)
