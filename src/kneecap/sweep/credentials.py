"""The API key: read from an environment variable or a file, never from a flag value, never written.

`resolve_api_key` finds it; `Scrubber` removes it from any text that is about to be printed or
written (a server may echo the key back in an error body). Error messages here name the
variable or file, never its content.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from kneecap.errors import KneecapError

# Looked up in this order when neither --api-key-env nor --api-key-file is given.
DEFAULT_KEY_ENVS = ("KNEECAP_API_KEY", "OPENAI_API_KEY")
REPLACEMENT = "***"


def resolve_api_key(
    env_name: str | None = None, file_path: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The key to send as `Authorization: Bearer`, or None when none is configured.

    An explicitly named variable or file that is missing or empty is an error (the user asked for
    a key); the default variables are optional.
    """
    environ = os.environ if environ is None else environ
    if file_path is not None:
        path = Path(file_path).expanduser()
        try:
            key = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise KneecapError(
                f"cannot read the API key file {str(path)!r}: {exc.strerror or exc}",
                "check --api-key-file points at a readable file holding only the key",
            ) from None
        except UnicodeDecodeError:
            raise KneecapError(
                f"the API key file {str(path)!r} is not UTF-8 text", "put only the key, as text, in the file"
            ) from None
        if not key or "\n" in key:
            raise KneecapError(
                f"the API key file {str(path)!r} must hold exactly one non-empty line",
                "write only the key into the file",
            )
        return _printable(key, f"the API key file {str(path)!r}", "write only the key into the file")
    if env_name is not None:
        key = environ.get(env_name, "").strip()
        if not key:
            raise KneecapError(
                f"environment variable {env_name} (named by --api-key-env) is unset or empty",
                f"export {env_name}=... before running, or drop --api-key-env",
            )
        return _printable(key, f"environment variable {env_name}", f"export {env_name} holding only the key")
    for name in DEFAULT_KEY_ENVS:
        key = environ.get(name, "").strip()
        if key:
            return _printable(key, f"environment variable {name}", f"export {name} holding only the key")
    return None


def _printable(key: str, where: str, fix: str) -> str:
    """The key, unless it holds a control character (a line break, a tab, an escape), which no HTTP header may
    carry: an error naming where it came from (never its content) instead of a failed connection."""
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise KneecapError(f"the API key in {where} holds a control character (a line break or tab?)", fix)
    return key


class Scrubber:
    """Replaces every occurrence of the secret in a string (no-op when there is no secret)."""

    def __init__(self, secret: str | None):
        self._secret = secret or None

    def __call__(self, text: str | None) -> str | None:
        if not text or self._secret is None or self._secret not in text:
            return text
        return text.replace(self._secret, REPLACEMENT)
