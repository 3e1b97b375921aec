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
