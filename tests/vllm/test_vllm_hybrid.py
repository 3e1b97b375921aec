"""`kneecap plan` on a Mamba-2 hybrid gives the KV pool vLLM's CPU build logs with its default prefix caching.

vLLM 0.32 turns prefix caching on for hybrids and then keeps 3 state blocks per request in each Mamba-2 layer
group (kneecap.plan.engines.vllm_state_blocks). The server is started only until it logs "CPU KV cache size: N
tokens" (after loading the weights and sizing the pool, before its warm-up and /health), then stopped by PID: the
test needs the figure, not a served model.
"""

from __future__ import annotations

import json

import pytest

from tiny_hybrid import write_granite
from vllm_server import KV_CACHE_SPACE_GIB, KV_LOG_LINE, MAX_MODEL_LEN, logged_kv_line


@pytest.fixture(scope="module")
def granite_logged(vllm_python, tmp_path_factory):
    python = vllm_python
    model = write_granite(tmp_path_factory.mktemp("tiny-granite-h"), python)
    line, seconds = logged_kv_line(python, model, tmp_path_factory.mktemp("vllm-hybrid-log") / "vllm.log")
    print(f"\nvLLM logged its KV pool {seconds:.0f} s after start: {line.strip()}")
    return model, line


def test_plan_gives_the_kv_pool_vllm_logged_for_a_mamba2_hybrid_with_prefix_caching(cli, granite_logged):
    model, logged_line = granite_logged
    logged_tokens = int(KV_LOG_LINE.search(logged_line).group(1).replace(",", ""))
    args = (
        "plan",
        "--model",
        str(model / "config.json"),
        "--cpu-kvcache-space-gib",
        str(KV_CACHE_SPACE_GIB),
        "--context",
        str(MAX_MODEL_LEN),
    )
    as_json, text = cli(*args, "--json"), cli(*args)
    assert as_json.code == text.code == 0, (as_json.stderr, text.stderr)
    doc = json.loads(as_json.stdout)
    assert doc["engine"]["log_kv_cache_tokens"] == logged_tokens, (doc["engine"]["layout"], logged_line)
    printed = [line.strip() for line in text.stdout.splitlines() if line.strip().startswith("CPU KV cache size:")]
    assert len(printed) == 1 and printed[0] in logged_line, (printed, logged_line)
    # and prefix caching off would hold more: the note names both figures
    off = json.loads(cli(*args, "--json", "--no-prefix-caching").stdout)["engine"]["log_kv_cache_tokens"]
    assert off > logged_tokens and any(f"{off:,}" in n for n in doc["engine"]["notes"])


def test_the_pool_vllm_logged_given_back_with_engine_vllm_gives_its_tokens(cli, granite_logged):
    """vLLM's hybrid allocator keeps the Mamba state blocks in the pool it logs: the same bytes given back as a logged
    GPU pool (--kv-pool-gib, --engine vllm, the CPU build's 128-token blocks) are counted with them."""
    model, logged_line = granite_logged
    logged_tokens = int(KV_LOG_LINE.search(logged_line).group(1).replace(",", ""))
    r = cli(
        "plan",
        "--model",
        str(model / "config.json"),
        "--gpu",
        "h100",
        "--engine",
        "vllm",
        "--kv-pool-gib",
        str(KV_CACHE_SPACE_GIB),
        "--block-size",
        "128",
        "--context",
        str(MAX_MODEL_LEN),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"]["log_kv_cache_tokens"] == logged_tokens, logged_line
    assert doc["kv_capacity_tokens"] == doc["engine"]["kv_capacity_tokens"]  # kneecap's own, the same in both
