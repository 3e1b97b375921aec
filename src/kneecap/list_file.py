"""A file a user hands a flag that holds a list (recommend's --classes and --behaviour-gate, simulate's --grid):
YAML, or JSON when it is named .json; the list stands alone or under one key. Owns reading it, with one line
naming the flag and file on any error."""

from __future__ import annotations

import json
from pathlib import Path

from kneecap.errors import KneecapError


def duplicate_yaml_key(root) -> tuple[str, int] | None:
    """The first mapping key given twice in a composed YAML document (yaml.compose's node tree), with the 1-based
    line of its second appearance; None when every key is given once. PyYAML keeps the last of two equal keys
    without a word, so a pasted or retyped line would change a setting silently."""
    import yaml

    stack, seen_nodes = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in keys:
                        return key.value, key.start_mark.line + 1
                    keys.add(key.value)
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


class _Twice(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _refuse_twice(pairs: list) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _Twice(key)
        seen[key] = value
    return seen


def strict_json(text: str, where: str) -> object:
    """json.loads, except that a key given twice in one object is a one-line error naming `where` (the file, as
    the user gave it), the key and the line of its second appearance: json keeps the last of two equal keys
    without a word, as PyYAML does. A syntax error is json's JSONDecodeError, as json.loads raises it."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_twice)
    except _Twice as twice:
        line = _second_key_line(text, twice.key)
        raise KneecapError(
            f"{where}{f':{line}' if line else ''}: {twice.key!r} is given twice in one object",
            "keep one of them (JSON readers keep only the last, silently)",
        ) from None


def _second_key_line(text: str, key: str) -> int | None:
    """1-based line where, first in the file, one object names `key` a second time (None if nowhere)."""
    stack: list[dict | None] = []  # per open object its {key: count}; None for an open list
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            value, end = json.decoder.scanstring(text, i + 1)
            j = end
            while j < n and text[j] in " \t\r\n":
                j += 1
            if stack and j < n and text[j] == ":" and isinstance(stack[-1], dict):
                counts = stack[-1]
                counts[value] = counts.get(value, 0) + 1
                if value == key and counts[value] == 2:
                    return text.count("\n", 0, i) + 1
            i = end
            continue
        if c == "{":
            stack.append({})
        elif c == "[":
            stack.append(None)
        elif c in "}]" and stack:
            stack.pop()
        i += 1
    return None


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
            data = strict_json(text, f"{flag} file {path}")
        else:
            import yaml

            data = yaml.safe_load(text)
            twice = duplicate_yaml_key(yaml.compose(text))
    except KneecapError:
        raise
    except Exception as exc:  # yaml.YAMLError / ValueError: say which file and why, one line
        raise KneecapError(f"{flag} file {path} does not parse ({' '.join(str(exc).split())})", hint) from None
    if p.suffix.lower() != ".json" and twice is not None:
        raise KneecapError(
            f"{flag} file {path}:{twice[1]}: {twice[0]!r} is given twice in one mapping",
            "keep one of them (YAML would keep only the last, silently)",
        )
    items = data.get(key) if key is not None and isinstance(data, dict) else data
    if not isinstance(items, list) or not items or (mappings and not all(isinstance(i, dict) for i in items)):
        raise KneecapError(f"{flag} file {path} holds no list of {what}", hint)
    return items
