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


def require_positive(name: str, value: float | int, flag: str | None = None) -> None:
    """Raise a KneecapError unless `value` > 0."""
    if value is None or value <= 0:
        where = flag or name
        raise KneecapError(f"{where} must be positive, got {value!r}", f"pass a number > 0 to {where}")
