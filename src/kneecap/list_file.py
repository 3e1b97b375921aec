"""A file a user hands a flag that holds a list (recommend's --classes and --behaviour-gate, simulate's --grid):
YAML, or JSON when it is named .json; the list stands alone or under one key. Owns reading it, with one line
naming the flag and file on any error."""

from __future__ import annotations

import json
from pathlib import Path

from kneecap.errors import KneecapError


def read_list_file(
    path: str | Path, flag: str, key: str | None, what: str, hint: str, *, mappings: bool = False
) -> list:
    """The non-empty list in `path` (given as `flag`), bare or under `key`; `what` names its items in errors.
    With `mappings`, every item must be a mapping."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KneecapError(
            f"cannot read {flag} file {path}: {getattr(exc, 'strerror', None) or exc}",
            f"pass an existing YAML or JSON file of {what}, saved as UTF-8",
        ) from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError / ValueError: say which file and why, one line
        raise KneecapError(f"{flag} file {path} does not parse ({' '.join(str(exc).split())})", hint) from None
    items = data.get(key) if key is not None and isinstance(data, dict) else data
    if not isinstance(items, list) or not items or (mappings and not all(isinstance(i, dict) for i in items)):
        raise KneecapError(f"{flag} file {path} holds no list of {what}", hint)
    return items
