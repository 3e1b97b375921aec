"""Presets: published config.json fields shipped as data files (kneecap/data/presets/<name>.json).

Owns finding and reading those files; each is a config.json-like dict under "config" (HF field names)
plus its citation ("_source") and the published parameter counts, and is built through the same
adapter as a user's config.json (hf_config.from_hf_config), so a preset and the file it copies cannot
disagree. A preset may fix total_params ("total_params_override": the synthetic gqa-70b of seed 003).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import replace
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.model.hf_config import from_hf_config
from kneecap.model.spec import Model
from kneecap.model.weights import weight_bytes

PRESET_DIR = Path(__file__).resolve().parent.parent / "data" / "presets"


def preset_names() -> list[str]:
    """Names of the shipped presets, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def preset_data(name: str) -> dict:
    """The raw preset document (config, _source, published counts)."""
    path = PRESET_DIR / f"{name.lower()}.json"
    if not path.is_file():
        names = preset_names()
        near = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise KneecapError(f"unknown preset {name!r}", f"{hint}presets: {', '.join(names)}")
    return json.loads(path.read_text(encoding="utf-8"))


def is_preset(name: str) -> bool:
    return (PRESET_DIR / f"{name.lower()}.json").is_file()


def load_preset(name: str) -> Model:
    """Build the Model of a preset through the config.json adapter."""
    doc = preset_data(name)
    source = f"preset {name.lower()} ({doc.get('_source', 'no source recorded')})"
    model = from_hf_config(
        doc["config"],
        name=name.lower(),
        source=source,
        checkpoint_bytes=doc.get("checkpoint_bytes"),
        extra_notes=tuple(doc.get("notes", ())),
    )
    override = doc.get("total_params_override")
    if override:
        dtype = model.weight_dtype or "bf16"
        model = replace(
            model,
            total_params=override,
            active_params=override,
            param_parts=(("other", override),),
            part_dtypes=(("other", dtype),),
            part_bytes=(("other", weight_bytes(override, dtype)),),
        )
    return model
