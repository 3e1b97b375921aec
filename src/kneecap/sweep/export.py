"""--export vllm: every level of a finished sweep written as `vllm bench serve --save-result` JSON
(kneecap.metrics.export_vllm builds each document) into DIR/vllm/level-N.json, so dashboards built for
vLLM's results read kneecap's. Owns the files only."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from kneecap.sweep.resume import RecordsFile
from kneecap.errors import KneecapError
from kneecap.metrics.export_vllm import to_vllm_result

FORMATS = ("vllm",)


def check_format(name: str | None) -> None:
    if name is not None and name not in FORMATS:
        raise KneecapError(f"--export {name!r} is not a known format", "pass --export vllm")


def export_vllm(folder: Path, summary: dict, *, model_id: str, burstiness: float = 1.0) -> list[Path]:
    """One file per level that ran for a while; returns the paths written."""
    out = Path(folder) / "vllm"
    out.mkdir(exist_ok=True)
    records = RecordsFile(Path(folder) / "requests.jsonl")
    date = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")  # vLLM's own date format
    written = []
    for level in summary["levels"]:
        if not level.get("duration_s") or level.get("partial"):
            continue
        doc = to_vllm_result(level, records.level_records(level["level"]), model_id=model_id, date=date,
                             burstiness=burstiness)
        path = out / f"level-{level['level']}.json"
        path.write_text(json.dumps(doc, indent=2) + "\n")
        written.append(path)
    return written
