"""The OpenAI-compatible endpoints a request can go through: one name each, their paths, one check (pure).

`completions` posts the prompt as it is to /v1/completions; `chat` posts it as one user message to
/v1/chat/completions, where the server applies the model's chat template first. `kneecap bench` sends through either
(client/openai.py), `kneecap simulate` prices the chat template's preparation on the API server's event loop
(sim/frontend.py), and the embedded server answers both (serve/openai_wire.py). Every layer takes the names from here.
"""

from __future__ import annotations

from kneecap.errors import KneecapError

COMPLETIONS = "completions"
CHAT = "chat"
ENDPOINTS = (COMPLETIONS, CHAT)
PATHS = {COMPLETIONS: "/v1/completions", CHAT: "/v1/chat/completions"}


def check_endpoint(endpoint: str) -> str:
    """`endpoint` if it is one kneecap speaks, else the one-line error every command gives."""
    if endpoint not in ENDPOINTS:
        raise KneecapError(
            f"unknown --endpoint {endpoint!r}", "pass --endpoint completions (/v1/completions) or --endpoint chat"
        )
    return endpoint


def endpoint_path(endpoint: str) -> str:
    """The URL path of `endpoint` (/v1/completions or /v1/chat/completions)."""
    return PATHS[check_endpoint(endpoint)]
