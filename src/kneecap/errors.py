"""The one error type users see: a message saying what is wrong and a hint saying how to fix it.

The CLI turns a KneecapError into one line on stderr and exit code 2 (never a traceback).
Core modules raise it; they never print or exit.
"""

from __future__ import annotations


class KneecapError(Exception):
    """A user-facing error: `message` names the problem, `hint` says how to fix it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f" — {self.hint}"
        return " ".join(text.split())  # guarantee a single line


# A pydantic error's type -> what the field expects, in words (pydantic_core error types:
# https://docs.pydantic.dev/latest/errors/validation_errors/).
_EXPECTED = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "a list",
    "none_required": "null",
}


def field_path(loc: tuple, doc: object, missing: bool = False) -> tuple:
    """A pydantic error location as the keys and indexes of the user's document `doc`: the names pydantic adds
    for union branches and validators (`int`, `float`, `function-after[...]`, a model's class name) are not keys
    of the document there, so they are dropped. `missing`: the last key is one the document lacks (kept)."""
    out: list = []
    node = doc
    for i, p in enumerate(loc):
        if isinstance(node, dict) and p in node:
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(node):
            node = node[p]
        elif not (missing and i == len(loc) - 1):
            continue
        out.append(p)
    return tuple(out)


def path_text(path: tuple) -> str:
    """('levels', 0, 'ttft_ms', 'p99') -> 'levels[0].ttft_ms.p99'."""
    text = ""
    for p in path:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text


def _shown(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return repr(value)[:40]


def _is_choice(err: dict) -> bool:
    """A literal / enum error, whose message lists the allowed values ("Input should be 'auto'")."""
    return err["type"] in ("literal_error", "enum") and str(err["msg"]).startswith("Input should be ")


def validation_problem(errors: list[dict], doc: object) -> tuple[tuple, str]:
    """pydantic's errors (ValidationError.errors()) on `doc` -> (the first bad field's path in `doc`, its problem
    in words): one field failing every branch of a union ('a whole number' / 'a number') is one problem, 'expected
    a number, got the string 'abc''; any other message is pydantic's."""
    first = errors[0]
    path = field_path(first["loc"], doc, first["type"] == "missing")
    same = [e for e in errors if field_path(e["loc"], doc, e["type"] == "missing") == path]
    if all(e["type"] in _EXPECTED or _is_choice(e) for e in same):
        wanted: list[str] = []
        for e in same:
            words = str(e["msg"]).removeprefix("Input should be ") if _is_choice(e) else _EXPECTED[e["type"]]
            if words not in wanted:
                wanted.append(words)
        if "a number" in wanted and "a whole number" in wanted:
            wanted.remove("a whole number")
        expected = " or ".join(wanted) if len(wanted) < 3 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
        return path, f"expected {expected}, got {_shown(first.get('input'))}"
    if first["type"] == "missing":
        return path, "required, but missing"
    return path, str(first["msg"]).removeprefix("Value error, ")
