"""The vLLM and SGLang pool models against hand-computed values (arithmetic shown in each case)."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.model.spec import Model
from kneecap.plan.engines import parse_version, sglang_pool, vllm_pool

GiB = 2**30
# An 8B-class dense model: 32 layers x 8 KV heads x 128 dim x 2 B x 2 (K, V) = 131,072 B per token.
M8 = Model(name="llama-8b-like", source="test", architecture="LlamaForCausalLM", num_hidden_layers=32, hidden_size=4096,
           num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
           layer_types=("full_attention",) * 32, total_params=8_000_000_000, active_params=8_000_000_000)
DEP = Deployment(M8, get_gpu("h100-sxm"))


def vllm(version="0.21", **kw):
    args = dict(total_bytes=80 * GiB, weights_bytes=16_000_000_000, mem_util=0.9, max_model_len=32768,
                activation_bytes=2 * GiB, non_torch_bytes=GiB // 2, cudagraph_bytes=GiB, version=version)
    args.update(kw)
    return vllm_pool(DEP, **args)


def test_vllm_pool_by_hand():
    # requested = int(80 GiB x 0.9) = 77,309,411,328
    # available = 77,309,411,328 - 16e9 - 2 GiB - 0.5 GiB - 1 GiB (graphs, v0.21) = 57,551,314,944
    # blocks = 57,551,314,944 // (16 x 131,072) = 27,442 -> 439,072 tokens; 439,072 / 32,768 = 13.40x
    p = vllm()
    assert p.budget_bytes == 77_309_411_328
    assert p.kv_pool_bytes == 57_551_314_944
    assert p.num_blocks == 27_442
    assert p.kv_capacity_tokens == 439_072
    assert p.log_lines[1] == "GPU KV cache size: 439,072 tokens"
    assert p.log_lines[2] == "Maximum concurrency for 32,768 tokens per request: 13.40x"


def test_vllm_before_0_21_does_not_subtract_cuda_graphs():
    # 58,625,056,768 available (no graph term) -> 27,954 blocks -> 447,264 tokens
    p = vllm(version="0.20.2")
    assert p.cudagraph_bytes == 0
    assert p.kv_capacity_tokens == 447_264


def test_sglang_pool_by_hand():
    # budget = int(80 GiB x 0.88) = 75,591,424,409; rest = budget - 16e9 - 0.5 GiB = 59,054,553,497
    # max_total_num_tokens = 59,054,553,497 // 131,072 = 450,550
    p = sglang_pool(DEP, total_bytes=80 * GiB, weights_bytes=16_000_000_000, mem_fraction=0.88,
                    max_model_len=32768, non_torch_bytes=GiB // 2)
    assert p.kv_capacity_tokens == 450_550
    assert "max_total_num_tokens=450550" in p.log_lines[1]


def test_no_room_is_a_one_line_error():
    with pytest.raises(KneecapError) as err:
        vllm(weights_bytes=80 * GiB)
    assert "no KV cache" in err.value.message


@pytest.mark.parametrize("bad", ["x.y", "0.2o"])
def test_bad_version(bad):
    with pytest.raises(KneecapError):
        parse_version(bad)


def test_fraction_bounds():
    with pytest.raises(KneecapError):
        vllm(mem_util=1.5)
