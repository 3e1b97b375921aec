"""A real llama.cpp server for the tests: a tiny random-weight GGUF served by xllamacpp in a subprocess.

Session-scoped: written and started once, stopped by PID at the end (also when a test fails;
the child also gets SIGTERM if this process dies). Per-slot context = CTX_SIZE / PARALLEL.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kneecap.testing.llamacpp_server import LlamaCppServer, LlamaCppServerConfig, start_llamacpp_server
from kneecap.testing.tiny_gguf import TinyLlamaConfig, write_tiny_gguf

PARALLEL = 4
CTX_SIZE = 4096
PADDED_VOCAB = 32000  # Llama 2's vocabulary size: token-id prompts from a real model's id range are valid


@dataclass(frozen=True)
class LlamaCpp:
    base_url: str
    pid: int
    parallel: int
    ctx_size: int
    model_path: str
    server: LlamaCppServer


@pytest.fixture(scope="session")
def tiny_gguf_path(tmp_path_factory):
    pytest.importorskip("gguf")
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf", TinyLlamaConfig(), seed=0)


def _serve(model_path, tmp_path_factory):
    pytest.importorskip("xllamacpp")
    config = LlamaCppServerConfig(model_path=str(model_path), parallel=PARALLEL, ctx_size=CTX_SIZE, threads=1)
    server = start_llamacpp_server(config, log_dir=tmp_path_factory.mktemp("llamacpp-log"), startup_timeout_s=60)
    try:
        yield LlamaCpp(server.base_url, server.pid, PARALLEL, CTX_SIZE, str(model_path), server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llamacpp(tiny_gguf_path, tmp_path_factory):
    """The character-level model (vocabulary of 355 tokens)."""
    yield from _serve(tiny_gguf_path, tmp_path_factory)


@pytest.fixture(scope="session")
def llamacpp_32k(tmp_path_factory):
    """The same model with its vocabulary padded to 32,000 never-generated tokens."""
    pytest.importorskip("gguf")
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf32k") / "tiny-llama-32k.gguf",
                           TinyLlamaConfig(pad_vocab_to=PADDED_VOCAB), seed=0)
    yield from _serve(path, tmp_path_factory)
