"""A real llama.cpp server for the tests: a tiny random-weight GGUF served by xllamacpp in a subprocess.

Session-scoped: written and started once, stopped by PID at the end (also when a test fails;
the child also gets SIGTERM if this process dies). Per-slot context = CTX_SIZE / PARALLEL.
Besides the all-F32 model (`llamacpp`), one server per real weight type (`llamacpp_f16`: F16 weights, f16 KV
cache; `llamacpp_q8_0`: Q8_0 weights, q8_0 KV cache), each started at most once a session and logging
llama.cpp's own lines. Their model has head_dim 32 (hidden 128 / 4 heads), so Q8_0's 32-element blocks divide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llamacpp_server import LlamaCppServer, LlamaCppServerConfig, start_llamacpp_server
from tiny_gguf import TinyLlamaConfig, write_tiny_gguf

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
    weight_type: str = "f32"
    cache_type: str = "f16"


@pytest.fixture(scope="session")
def tiny_gguf_path(tmp_path_factory):
    pytest.importorskip("gguf")
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf", TinyLlamaConfig(), seed=0)


def _serve(model_path, tmp_path_factory, weight_type="f32", cache_type="f16", verbose=False):
    pytest.importorskip("xllamacpp")
    config = LlamaCppServerConfig(
        model_path=str(model_path),
        parallel=PARALLEL,
        ctx_size=CTX_SIZE,
        threads=1,
        cache_type=cache_type,
        verbose=verbose,
    )
    server = start_llamacpp_server(config, log_dir=tmp_path_factory.mktemp("llamacpp-log"), startup_timeout_s=60)
    try:
        yield LlamaCpp(
            server.base_url, server.pid, PARALLEL, CTX_SIZE, str(model_path), server, weight_type, cache_type
        )
    finally:
        server.stop()


TYPED_CONFIG = TinyLlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)


def _typed(weight_type: str, cache_type: str, tmp_path_factory):
    pytest.importorskip("gguf")
    path = write_tiny_gguf(
        tmp_path_factory.mktemp(f"gguf-{weight_type}") / f"tiny-llama-{weight_type}.gguf",
        TYPED_CONFIG,
        seed=0,
        weight_type=weight_type,
    )
    yield from _serve(path, tmp_path_factory, weight_type, cache_type, verbose=True)


@pytest.fixture(scope="session")
def llamacpp_f16(tmp_path_factory):
    """F16 weights (norms F32), llama.cpp's default f16 KV cache."""
    yield from _typed("f16", "f16", tmp_path_factory)


@pytest.fixture(scope="session")
def llamacpp_q8_0(tmp_path_factory):
    """Q8_0 weights (norms F32) and a q8_0 KV cache (--cache-type-k/-v q8_0)."""
    yield from _typed("q8_0", "q8_0", tmp_path_factory)


@pytest.fixture(params=["f32", "f16", "q8_0"])
def any_llamacpp(request):
    """The same test against the F32, F16 and Q8_0 servers (each started once a session)."""
    return request.getfixturevalue("llamacpp" if request.param == "f32" else f"llamacpp_{request.param}")


@pytest.fixture(scope="session")
def llamacpp(tiny_gguf_path, tmp_path_factory):
    """The character-level model (vocabulary of 355 tokens)."""
    yield from _serve(tiny_gguf_path, tmp_path_factory)


@pytest.fixture(scope="session")
def llamacpp_32k(tmp_path_factory):
    """The same model with its vocabulary padded to 32,000 never-generated tokens."""
    pytest.importorskip("gguf")
    path = write_tiny_gguf(
        tmp_path_factory.mktemp("gguf32k") / "tiny-llama-32k.gguf", TinyLlamaConfig(pad_vocab_to=PADDED_VOCAB), seed=0
    )
    yield from _serve(path, tmp_path_factory)
