"""The weights every tensor-parallel rank holds whole (kneecap.model.params.tp_layout): the ledger's per-GPU weights
against the tensors vLLM builds on one rank (plan/vllm_load, read from its model files), and the MLA and MoE parts
every engine keeps whole on each rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneecap.model.params import params_per_rank, tp_layout
from kneecap.model.resolve import load_model
from kneecap.plan import vllm_load
from kneecap.plan.build import DeploymentRequest, plan_deployment

CONFIGS = Path(__file__).parent / "configs"
MODEL_CONFIGS = Path(__file__).parents[1] / "model" / "configs"


def plan(model: str, tp: int, weight_dtype: str = "bf16", gpu: str = "h100-sxm"):
    request = DeploymentRequest(model=model, gpu=gpu, tp=tp, context=4096, weight_dtype=weight_dtype)
    return plan_deployment(request).plan


def ledger_weights(model: str, tp: int, weight_dtype: str = "bf16") -> int:
    return plan(model, tp, weight_dtype).ledger.weights_bytes


def replayed_weight_bytes(model, tp: int) -> int:
    """The parameters' bytes among the tensors vLLM 0.11 builds on one rank (no buffers, no RoPE temporaries)."""
    ops = vllm_load.vllm_load_ops(model, tp, (0, 11))
    assert not isinstance(ops, str), ops
    return sum(op[2] for op in ops if op[0] == "a" and op[1] is None and len(op) == 3)


@pytest.mark.parametrize(
    "config, tps",
    [
        # 8 heads, 4 KV heads: at TP 8 every rank holds one KV head, each copied twice over the ranks
        ("google--gemma-2-2b-it.json", (1, 2, 4, 8)),
        # q/k norms over head_dim, whole on every rank; TP 16 exceeds its 8 KV heads
        ("Qwen--Qwen3-8B.json", (1, 2, 4, 8, 16)),
        # q/k/v biases, split with their heads
        ("Qwen--Qwen2.5-7B-Instruct.json", (1, 2, 4)),
    ],
)
def test_ledger_weights_per_gpu_are_the_tensors_vllm_builds_on_a_rank(config, tps):
    path = str(CONFIGS / config)
    model = load_model(path)
    for tp in tps:
        assert ledger_weights(path, tp) == replayed_weight_bytes(model, tp), (config, tp)


def test_kv_heads_copied_when_tp_exceeds_them():
    model = load_model(str(CONFIGS / "google--gemma-2-2b-it.json"))  # 26 layers, hidden 2,304, 4 KV heads of 256
    split, _ = tp_layout(model, 8)["attention"]
    copies = 8 - 4  # eight ranks hold one KV head each: four more than the model has
    assert split - dict(model.param_parts)["attention"] == 26 * copies * 2 * 2_304 * 256


def test_deepseek_v3_mla_down_projections_and_router_are_whole_on_every_rank():
    # config.json as published: hidden 7,168, q_lora_rank 1,536, kv_lora_rank 512, qk_rope_head_dim 64, 61 layers,
    # 58 of them MoE with 256 routed experts (vLLM deepseek_v2.py DeepseekV2MLAAttention: fused_qkv_a_proj with
    # disable_tp=True, q_a_layernorm, kv_a_layernorm; DeepseekV2MoE: gate = ReplicatedLinear)
    path = str(MODEL_CONFIGS / "deepseek-ai--DeepSeek-V3.json")
    model = load_model(path)
    layout = tp_layout(model, 8)
    a_proj = 61 * 7_168 * (1_536 + 512 + 64)  # q_a_proj + kv_a_proj_with_mqa: 923.5e6 parameters
    assert a_proj == 923_467_776
    assert layout["attention"][1] == a_proj + 61 * (1_536 + 512)
    assert layout["router"] == (0, 58 * (256 * 7_168 + 256))
    # the ledger at TP 8 in fp8: what the even split missed, the a-projections 7/8 of 923 MB at one byte a weight
    p = plan(path, 8, "fp8", gpu="h200")
    assert p.ledger.weights_bytes - p.weights_total_bytes / 8 > a_proj * 7 / 8 > 0.8e9


def test_qwen3_235b_router_and_kv_copies_at_tp8():
    # 94 layers, 128 experts, hidden 4,096, 4 KV heads of 128: the router (bf16 as shipped) is whole on every rank,
    # and at TP 8 every rank holds one of the 4 KV heads
    plain = plan_deployment(
        DeploymentRequest(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, context=4096, weight_dtype="fp8")
    ).plan
    router = 94 * 128 * 4_096 * 2
    kv_copies = 94 * 4 * 2 * 4_096 * 128  # fp8: a byte a weight, 4 copies beyond the model's heads, over 8 ranks
    norms = 2 * (94 * 2 * 4_096 + 4_096 + 94 * 2 * 128)
    expected = plain.weights_total_bytes / 8 + (router + norms) * 7 / 8 + kv_copies / 8
    assert plain.ledger.weights_bytes == pytest.approx(expected, rel=1e-5)


def test_a_rank_at_tp1_holds_every_parameter():
    model = load_model(str(MODEL_CONFIGS / "deepseek-ai--DeepSeek-V3.json"))
    assert params_per_rank(model, 1) == {part: n for part, n in model.param_parts if n}
