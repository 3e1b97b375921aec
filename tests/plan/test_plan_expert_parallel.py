"""EP and DP attention in the ledger: experts split over ranks keep the per-GPU bytes; DP attention replicates the
attention weights on every GPU and keeps a KV pool per DP rank (whole heads, its own sequences)."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.model import kv as kvmath
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.ledger import attention_weight_fraction, dp_attention_whole_fraction
from kneecap.sim.steptime import StepTimeModel


def plan(**kw):
    return plan_deployment(
        DeploymentRequest(**{"preset": "deepseek-v3", "gpu": "h200", "tp": 8, "context": 4096, **kw})
    ).plan


def test_expert_parallel_keeps_the_per_gpu_weights_and_pool():
    tp, ep = plan(), plan(ep=8)
    assert ep.ledger.weights_bytes == tp.ledger.weights_bytes and ep.num_kv_blocks == tp.num_kv_blocks
    assert ep.deployment.expert_parallel == 8 and StepTimeModel(ep.deployment).ep == 8


def test_dp_attention_replicates_attention_weights_and_keeps_a_pool_per_rank():
    tp, dp = plan(), plan(dp_attention=True)
    d = dp.deployment
    attn = dp.weights_total_bytes * attention_weight_fraction(d)
    whole = dp.weights_total_bytes * dp_attention_whole_fraction(d)  # the attention and more (the embedding ...)
    assert attn > 0 and whole > attn
    # over the even split (TP alone already holds the norms, the router and MLA's down-projections whole)
    assert dp.ledger.weights_bytes - dp.weights_total_bytes / 8 == pytest.approx(whole * 7 / 8, rel=1e-6)
    assert tp.weights_total_bytes / 8 < tp.ledger.weights_bytes < dp.ledger.weights_bytes
    per_token = kvmath.kv_bytes_per_token_per_gpu(d.model, dp.kv_dtype_bytes, 1, 1)
    assert dp.kv_bytes_per_token_per_gpu == per_token  # MLA: the latent is whole either way
    assert dp.num_kv_blocks == 8 * (dp.ledger.kv_pool_bytes // (per_token * dp.block_size))
    assert dp.max_seqs_paged == 8 * (dp.ledger.kv_pool_bytes // dp.seq_bytes_paged)
    # smaller per-GPU pool (the replicated attention weights) but eight of them: far more sequences than TP
    assert dp.ledger.kv_pool_bytes < tp.ledger.kv_pool_bytes and dp.max_seqs_paged > 6 * tp.max_seqs_paged
    st = StepTimeModel(d)
    assert st.dp_attention and st.ep == 8 and st.attn_share == pytest.approx(1 / 8)


def test_gqa_dp_attention_holds_whole_heads_per_rank():
    tp = plan_deployment(DeploymentRequest(preset="qwen3-235b-a22b", gpu="h200", tp=8, context=4096)).plan
    dp = plan_deployment(
        DeploymentRequest(preset="qwen3-235b-a22b", gpu="h200", tp=8, context=4096, dp_attention=True)
    ).plan
    m = dp.deployment.model
    assert dp.kv_heads_per_gpu == m.num_key_value_heads and not dp.kv_replicated
    assert tp.kv_heads_per_gpu < dp.kv_heads_per_gpu  # TP 8 over 4 KV heads: one (replicated) head a GPU
    assert dp.kv_bytes_per_token_per_gpu == kvmath.kv_bytes_per_token(m, dp.kv_dtype_bytes)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(ep=3), "--ep 3 must divide --tp 8"),
        (dict(tp=1, dp_attention=True), "--tp is 1"),
        (
            dict(dp_attention=True, engine="sglang", dp_attention_engine="vllm"),
            "--dp-attention-engine vllm with --engine sglang",
        ),
        (dict(preset="llama-3.1-8b", ep=2, tp=2), "needs a mixture-of-experts model"),
        (dict(preset="llama-3.1-8b", tp=2, dp_attention=True), "needs a mixture-of-experts model"),
    ],
)
def test_bad_ep_or_dp_is_one_clear_error(kw, match):
    with pytest.raises(KneecapError, match=match):
        plan(**kw)


def test_plan_json_states_the_parallel_layout():
    doc = plan(dp_attention=True).to_json()
    assert doc["dp_attention"] is True and doc["ep"] == 8 and doc["tp"] == 8
    assert plan(ep=4).to_json()["ep"] == 4 and plan().to_json()["ep"] == 1
