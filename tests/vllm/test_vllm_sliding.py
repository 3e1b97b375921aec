"""`kneecap plan --cpu-kvcache-space-gib N` prints the line vLLM's CPU build logs for sliding-window models, exactly.

Tiny random-weight Gemma-2-style (alternating), Gemma-3-style (5 sliding : 1 full) and gpt-oss-style (alternating
window, MoE) models, written by tiny_sliding.py. vLLM 0.32 counts a sliding group's blocks per request as the window
plus the tokens of the batch in flight (capped at --max-model-len), plus one block: at --max-model-len 1024 that is
the whole request, and with --max-num-batched-tokens 256 at 2048 it is 4 of 16 blocks. Each server is started only
until it logs "CPU KV cache size: ..." (about 20-50 s on 2 cores), then stopped by PID.
"""

from __future__ import annotations

import json

import pytest

from tiny_sliding import write_sliding
from vllm_server import KV_CACHE_SPACE_GIB, KV_FULL_LINE, KV_LOG_LINE, logged_kv_line

CASES = [
    ("gemma2", 1024, ()),
    ("gemma3", 1024, ()),
    ("gemma3", 2048, ("--max-num-batched-tokens", "256")),
    ("gpt-oss", 1024, ()),
]


@pytest.fixture(scope="module")
def models(vllm_python, tmp_path_factory):
    return {
        kind: write_sliding(kind, tmp_path_factory.mktemp(f"tiny-{kind}"), vllm_python)
        for kind in sorted({c[0] for c in CASES})
    }


@pytest.mark.parametrize(
    "kind, max_model_len, extra", CASES, ids=[f"{k}-{n}{'-batch' if e else ''}" for k, n, e in CASES]
)
def test_plan_prints_the_kv_line_vllm_logged_for_a_sliding_window_model(
    cli, vllm_python, models, tmp_path, kind, max_model_len, extra
):
    model = models[kind]
    line, seconds = logged_kv_line(
        vllm_python, model, tmp_path / "vllm.log", max_model_len=max_model_len, extra_args=extra
    )
    print(f"\nvLLM logged its KV pool {seconds:.0f} s after start: {line.strip()}")
    logged = KV_FULL_LINE.search(line).group(0)
    args = (
        "plan",
        "--model",
        str(model / "config.json"),
        "--cpu-kvcache-space-gib",
        str(KV_CACHE_SPACE_GIB),
        "--context",
        str(max_model_len),
        *extra,
    )
    text, as_json = cli(*args), cli(*args, "--json")
    assert text.code == as_json.code == 0, (text.stderr, as_json.stderr)
    printed = [ln.strip() for ln in text.stdout.splitlines() if ln.strip().startswith("CPU KV cache size:")]
    assert printed == [logged], (printed, line)
    doc = json.loads(as_json.stdout)
    assert doc["engine"]["log_kv_cache_tokens"] == int(KV_LOG_LINE.search(line).group(1).replace(",", ""))
