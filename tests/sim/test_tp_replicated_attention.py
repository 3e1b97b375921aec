"""The simulator reads on each rank the attention weights the ledger puts there (kneecap.model.params.tp_layout):
MLA's down-projections whole on every rank, K/V heads copied when TP exceeds them."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model.params import params_per_rank
from kneecap.model.resolve import load_model
from kneecap.sim.steptime import StepTimeModel


def steptime(preset, tp, **kw):
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu("h200"), tp=tp, weight_dtype="fp8", **kw))


def test_deepseek_v3_reads_its_mla_down_projections_whole_on_every_rank():
    st = steptime("deepseek-v3", 8)
    model = st.deployment.model
    attention = dict(model.param_parts)["attention"]
    a_proj = 61 * 7_168 * (1_536 + 512 + 64)  # q_a_proj + kv_a_proj_with_mqa, 61 layers
    assert st.attn_gemm_params == pytest.approx(params_per_rank(model, 8)["attention"])
    assert st.attn_gemm_params == pytest.approx(attention / 8 + a_proj * 7 / 8 + 61 * (1_536 + 512) * 7 / 8)


def test_qwen3_235b_reads_a_kv_head_on_each_of_8_ranks():
    st = steptime("qwen3-235b-a22b", 8)
    attention = dict(st.deployment.model.param_parts)["attention"]
    kv_copies = 94 * 4 * 2 * 4_096 * 128  # 8 ranks hold one KV head each of 4: 4 copies, K and V, 94 layers
    qk_norms = 94 * 2 * 128
    assert st.attn_gemm_params == pytest.approx((attention - qk_norms + kv_copies) / 8 + qk_norms)


def test_dp_attention_reads_all_of_it():
    st = steptime("qwen3-235b-a22b", 8, dp_attention=True)
    assert st.attn_gemm_params == dict(st.deployment.model.param_parts)["attention"]
