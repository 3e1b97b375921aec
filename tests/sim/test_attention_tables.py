"""Prefill attention by kernel family (data/kernels/attention/*.json, sim/attention.py): the simulator's price of every
tabulated attention shape against the published figure, and which family each engine runs where."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.attention import (
    ATTENTION_DIR,
    attention_tables,
    load_attention_table,
    pass_pairs,
    prefill_family,
)
from kneecap.sim.config import SGLANG_PROFILE, VLLM_PROFILE, VLLM_V0_PROFILE
from kneecap.sim.steptime import StepTimeModel, StepTimeParams

TABLES = attention_tables()
NO_HOST = StepTimeParams(overhead_s=0.0)
# the vLLM V1 profile runs each family on the GPUs its source picks it for (sim/attention.py); a table of a family
# vLLM does not pick on the table's GPU is priced through a profile bound to that family by hand (fa2 on the H100)


def doc(name: str) -> dict:
    return json.loads((ATTENTION_DIR / f"{name}.json").read_text())


def shaped_model(heads: int, head_dim: int, gpu: str) -> StepTimeModel:
    """One GPU's model with the figure's heads and head dim (a Llama-3.1-8B otherwise), bound to vLLM's profile."""
    base = load_model("llama-3.1-8b")
    model = replace(base, num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim)
    return StepTimeModel(Deployment(model=model, gpu=get_gpu(gpu)), NO_HOST).for_engine(VLLM_PROFILE)


def cases():
    for name in TABLES:
        d = doc(name)
        for c in d.get("curves", ()):
            for seq_len, tflops in zip(c["seq_len"], c["tflops"]):
                yield name, d, c["head_dim"], seq_len, tflops


def test_every_table_names_its_figure():
    assert {"fa3-h100", "fa2-h100", "fa2-a100"} <= set(TABLES)
    for name in TABLES:
        d = doc(name)
        assert ("Figure" in d["source"] and "arXiv" in d["source"]) or "https://github.com/" in d["source"], name
        assert d["causal"] is True
        assert get_gpu(d["gpu"]).bf16_flops == d["peak_flops"]
        assert name == f"{d['family']}-{d['gpu'].split('-')[0]}"


@pytest.mark.parametrize("name,d,head_dim,seq_len,tflops", list(cases()))
def test_prefill_attention_price_matches_the_published_kernel(name, d, head_dim, seq_len, tflops):
    """The figure's call (tokens/L sequences of L tokens, 2048/d heads of dim d, causal) priced by the step model
    within 5% of the published TFLOP/s; the time of one layer's pass, as the step composes it."""
    heads = d["hidden"] // head_dim
    st = shaped_model(heads, head_dim, d["gpu"])
    if st.prefill_curve is None or st.prefill_curve.table.family != d["family"]:
        st.prefill_curve = replace(st.prefill_curve, table=load_attention_table(name))  # a family vLLM runs elsewhere
    batch = d["tokens_per_call"] // seq_len
    pairs = batch * seq_len * seq_len / 2.0  # the figure's causal count
    measured_s = 4.0 * heads * head_dim * pairs / (tflops * 1e12)
    layers = st.deployment.model.num_hidden_layers
    priced_s = st._prefill_attention_seconds(pairs * 1.0, 0.0, batch * seq_len, 0.0) / layers
    assert priced_s == pytest.approx(measured_s, rel=0.05)


def test_the_family_changes_the_price():
    """Removing the mechanism (the kernel table's curve instead of the family's) moves the prices off the figure:
    FlashAttention-3 at head dim 64 runs well below the head-dim-128 H200 curve the kernel table holds."""
    st = shaped_model(32, 64, "h100-sxm")
    assert st.prefill_curve is not None and st.prefill_curve.table.family == "fa3"
    flops = 4.0 * 32 * 64 * 16384 * 16384 / 2
    assert st.prefill_curve.fraction(flops) < 0.8 * st.table.prefill_attention_fraction(flops)
    bare = StepTimeModel(st.deployment, NO_HOST)  # no engine: the kernel table's measured curve
    assert bare.prefill_curve is None
    assert bare.prefill_attention_rate(flops) > 1.25 * st.prefill_attention_rate(flops)


def test_head_dims_between_tables_interpolate():
    t = load_attention_table("fa3-h100")
    f = 1e11
    lo, hi = t.fraction(128, f), t.fraction(256, f)
    assert min(lo, hi) <= t.fraction(192, f) <= max(lo, hi)
    assert t.fraction(32, f) == t.fraction(64, f)  # held at the nearest tabulated head dim


def test_which_family_each_engine_runs():
    """vLLM V1: FA3 on Hopper, FA2 on the A100, Triton for a model with sinks on the A100 (but FA3 on Hopper);
    engines and releases not established here get no family (the kernel table prices them)."""
    v1, v0, sg = VLLM_PROFILE, VLLM_V0_PROFILE, SGLANG_PROFILE
    assert prefill_family(v1.name, v1.version, "h200", "LlamaForCausalLM") == "fa3"
    assert prefill_family(v1.name, v1.version, "h100-sxm", "GptOssForCausalLM") == "fa3"
    assert prefill_family(v1.name, v1.version, "a100-80", "LlamaForCausalLM") == "fa2"
    assert prefill_family(v1.name, v1.version, "a100-80", "GptOssForCausalLM") == "triton"
    assert prefill_family(v1.name, v1.version, "mi300x", "LlamaForCausalLM") is None
    assert prefill_family(v0.name, v0.version, "h100-sxm", "LlamaForCausalLM") is None
    # SGLang: FA3 on Hopper for its listed architectures and for MLA models; FlashInfer/Triton (no table) otherwise
    assert prefill_family(sg.name, sg.version, "h100-sxm", "LlamaForCausalLM") == "fa3"
    assert prefill_family(sg.name, sg.version, "h200", "DeepseekV3ForCausalLM", mla=True) == "fa3"
    assert prefill_family(sg.name, sg.version, "h100-sxm", "GptOssForCausalLM") is None
    assert prefill_family(sg.name, sg.version, "a100-80", "LlamaForCausalLM") is None


def row_cases():
    for name in TABLES:
        d = doc(name)
        for r in d.get("rows", ()):
            yield name, d, r


def row_seconds(st: StepTimeModel, r: dict) -> float:
    """One layer's priced pass for a measured call: batch sequences, each seqlen_q queries at the end of seqlen_kv."""
    pairs = r["batch"] * pass_pairs(r["seqlen_q"], r["seqlen_kv"])
    layers = st.deployment.model.num_hidden_layers
    return st._prefill_attention_seconds(pairs, 0.0, r["batch"] * r["seqlen_kv"], 0.0) / layers


@pytest.mark.parametrize("name,d,r", list(row_cases()))
def test_measured_calls_priced_near_their_times(name, d, r):
    """Each measured call of a 'rows' table (FlashAttention-2 on an A100) priced by the step model, with vLLM's
    profile on that GPU, near its published time. Calls of the same work share one point of the FLOPs axis: the
    A100 table's 16 x 1k and 1 x 4k self-attention calls (equal FLOPs) were timed 11% apart, so their shared point
    (the mean of the four rows' rates) prices each within 7%, not 5%; the others within 5%."""
    st = shaped_model(r["heads"], r["head_dim"], d["gpu"])
    assert st.prefill_curve is not None and st.prefill_curve.table.family == d["family"]

    def work(q: dict) -> float:
        return q["batch"] * q["heads"] * q["head_dim"] * pass_pairs(q["seqlen_q"], q["seqlen_kv"])

    shapes = {(q["batch"], q["seqlen_q"], q["seqlen_kv"]) for q in d["rows"] if abs(work(q) / work(r) - 1) < 0.01}
    assert row_seconds(st, r) == pytest.approx(r["ms"] * 1e-3, rel=0.07 if len(shapes) > 1 else 0.05)


@pytest.mark.parametrize("name", [n for n in TABLES if doc(n).get("rows")])
def test_each_point_of_same_work_priced_at_its_mean_rate(name):
    """The rows of one work (FLOPs within 1%) give one point: priced at the mean of their measured rates (1%)."""
    d = doc(name)
    r0 = d["rows"][0]
    st = shaped_model(r0["heads"], r0["head_dim"], d["gpu"])
    groups: dict[float, list[float]] = {}
    for r in d["rows"]:
        f = 4.0 * r["batch"] * r["heads"] * r["head_dim"] * pass_pairs(r["seqlen_q"], r["seqlen_kv"])
        key = next((k for k in groups if abs(k / f - 1) < 0.01), f)
        groups.setdefault(key, []).append(f / (r["ms"] * 1e-3))
    assert len(groups) == 2  # 16 x 1k with 1 x 4k; 4 x (1k after 3k)
    for f, rates in groups.items():
        priced = st.prefill_attention_rate(f)
        assert priced == pytest.approx(sum(rates) / len(rates), rel=0.01)


def test_the_a100_table_changes_the_price():
    """Removing the A100 table (the kernel table's curve, the H200's measured pass moved to the A100) moves the
    priced 16 x 1k call by more than 5%: the test above fails without the table."""
    r = doc("fa2-a100")["rows"][0]
    st = shaped_model(32, 128, "a100-80")
    bare = StepTimeModel(st.deployment, NO_HOST)
    assert st.prefill_curve is not None and bare.prefill_curve is None
    assert abs(row_seconds(bare, r) / row_seconds(st, r) - 1) > 0.05


def test_a_family_without_a_table_for_the_gpu_takes_the_card_s_measured_family_or_the_kernel_table():
    """Triton (gpt-oss's sinks) has no table anywhere: on an A100 the FlashAttention-2 calls measured on an A100
    price it (the nearest measured pass on that card); on an L40S (Ada, no table) the kernel table does."""
    st = StepTimeModel(Deployment(model=load_model("gpt-oss-120b"), gpu=get_gpu("a100-80"), tp=2), NO_HOST)
    curve = st.for_engine(VLLM_PROFILE).prefill_curve
    assert curve is not None and curve.family == "triton" and curve.table.family == "fa2"
    assert curve.table.gpu == "a100-80"
    st = StepTimeModel(Deployment(model=load_model("gpt-oss-20b"), gpu=get_gpu("l40s")), NO_HOST)
    assert st.for_engine(VLLM_PROFILE).prefill_curve is None


def test_a100_40_takes_the_a100_80_table_at_the_same_peak():
    """Same GA100 die and peak: the 40 GB A100 prices a pass as the 80 GB one does."""
    a40, a80 = shaped_model(32, 128, "a100-40").prefill_curve, shaped_model(32, 128, "a100-80").prefill_curve
    assert a40 is not None and a40.fraction(2e11) == pytest.approx(a80.fraction(2e11))


def test_a_pass_below_the_smallest_call_follows_the_kernel_table_s_shape():
    """Below a table's smallest measured call the family's rate is not held: it falls as the kernel table's measured
    curve falls from that call's FLOPs (else a 128-token prefill would run at the rate of a 16k-token call)."""
    st = shaped_model(32, 128, "a100-80")
    curve, kt = st.prefill_curve, st.table.prefill_attention_fraction
    f0 = curve.table.smallest_flops * curve.flops_scale
    small = f0 / 64
    assert curve.fraction(f0, kt) == pytest.approx(curve.fraction(f0))
    assert curve.fraction(small, kt) == pytest.approx(curve.fraction(f0) * kt(small) / kt(f0))
    assert curve.fraction(small, kt) < 0.7 * curve.fraction(small)  # held, the rate would be 1.4x too high
    assert st.prefill_attention_rate(small) == pytest.approx(st.bf16_peak * curve.fraction(small, kt))


def test_mla_prefill_runs_the_family_at_its_qk_head_dim():
    """DeepSeek's prefill on Hopper under vLLM: FA3 at q/k head dim 192, between the 128 and 256 curves."""
    dep = Deployment(model=load_model("deepseek-v3"), gpu=get_gpu("h100-sxm"), tp=8, weight_dtype="fp8")
    st = StepTimeModel(dep, NO_HOST).for_engine(VLLM_PROFILE)
    assert st.prefill_curve is not None and st.prefill_curve.head_dim == 192
    t = st.prefill_curve.table
    f = 1e11
    assert min(t.fraction(128, f), t.fraction(256, f)) <= st.prefill_curve.fraction(f)
    assert st.prefill_curve.fraction(f) <= max(t.fraction(128, f), t.fraction(256, f))


def test_a_gpu_with_its_own_measured_kernel_table_keeps_its_measured_prefill_curve():
    """The H200 has its own measured passes (data/kernels/h200.json): FA3's H100 table does not replace them, so a
    simulated H200 prefill stays held to the kernels measured on an H200 under the engine's profile too."""
    dep = Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("h200"))
    assert StepTimeModel(dep, NO_HOST).for_engine(VLLM_PROFILE).prefill_curve is None
    dep = Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"))
    assert StepTimeModel(dep, NO_HOST).for_engine(VLLM_PROFILE).prefill_curve is not None


def test_another_gpu_of_the_architecture_scales_the_flops_by_its_peak():
    """The H100 PCIe (756 of the SXM's 989 TFLOP/s) takes the SXM table at FLOPs x 989/756: the same pass sits
    further up the curve, the fraction of its own peak kept."""
    sxm = shaped_model(16, 128, "h100-sxm").prefill_curve
    pcie = shaped_model(16, 128, "h100-pcie").prefill_curve
    f = 1e11
    scale = get_gpu("h100-sxm").bf16_flops / get_gpu("h100-pcie").bf16_flops
    assert pcie.fraction(f) == pytest.approx(sxm.fraction(f * scale))
    assert pcie.fraction(f) > sxm.fraction(f)
