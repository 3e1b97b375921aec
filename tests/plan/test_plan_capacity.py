"""plan_capacity: the KV capacity preflight checks a Plan against, for one sequence length."""

from __future__ import annotations

from kneecap.model.kv import blocks_for
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.engines import vllm_layout
from kneecap.plan.preflight import plan_capacity


def test_a_uniform_plan_holds_whole_blocks_of_its_pool_and_more_at_a_larger_tp():
    plan, pool = plan_deployment(DeploymentRequest(preset="gqa-70b", gpu="h100-sxm", tp=2))
    cap = plan_capacity(plan, pool, 2000)
    bs, per_token = plan.deployment.block_size, plan.kv_bytes_per_token_per_gpu
    assert pool is None and cap.uniform and cap.block_size == bs
    assert cap.kv_capacity_tokens == plan.ledger.kv_pool_bytes // (per_token * bs) * bs > 0
    assert [tp for tp, _, _ in cap.tp_capacities] == sorted(tp for tp, _, _ in cap.tp_capacities)
    assert all(tp > 2 and gpus >= tp for tp, gpus, _ in cap.tp_capacities) and cap.tp_capacities
    assert all(c > cap.kv_capacity_tokens for _, _, c in cap.tp_capacities)


def test_a_vllm_hybrid_counts_whole_requests_in_its_grown_blocks():
    request = DeploymentRequest(preset="qwen3.5-397b-a17b", gpu="rtx-pro-6000", tp=8, weight_dtype="fp8", engine="vllm")
    plan, pool = plan_deployment(request)
    short, long = plan_capacity(plan, pool, 2000), plan_capacity(plan, pool, 64000)
    layout = vllm_layout(plan.deployment)
    assert not short.uniform and short.block_size == layout.block_size != plan.deployment.block_size
    for tokens, cap in ((2000, short), (64000, long)):
        requests = pool.num_blocks // layout.blocks_per_request(tokens)
        assert requests * blocks_for(tokens, layout.block_size) * layout.block_size <= cap.kv_capacity_tokens
    assert short.kv_capacity_tokens != long.kv_capacity_tokens  # linear state is per request, not per token
