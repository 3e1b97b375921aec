"""Kernel-level checks of the fused-MoE pricing (sim/moe_kernels.py) against every committed published table."""

import json
import math

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim import moe_kernels
from kneecap.sim.config import SGLANG_PROFILE, TRTLLM_PROFILE, VLLM_PROFILE
from kneecap.sim.steptime import StepTimeModel

TABLES = sorted(moe_kernels.MOE_DIR.glob("*.json"))
TOLERANCE = 0.05


def test_tables_are_committed_with_sources():
    assert len(TABLES) >= 5
    for path in TABLES:
        doc = json.loads(path.read_text())
        assert doc["source"]["url"].startswith("https://github.com/")
        assert doc["source"]["what"] and doc["source"]["title"]
        assert len(doc["tokens"]) == len(doc["kernel_us"]) >= 3
        get_gpu(doc["gpu"])  # a catalog GPU


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_price_at_each_published_token_count(path):
    """The simulator's price of the whole fused-MoE call at the table's own shape and GPU is within 5% of each published
    time from one row per expert up. Below that (tokens x top_k < E) the table is not used: the step model prices those
    calls by its weight-stream rule (a looser check of them is below)."""
    doc = json.loads(path.read_text())
    gpu = get_gpu(doc["gpu"])
    pricer = moe_kernels.pricer_for(
        gpu,
        doc["kernel"],
        {"fp8_w8a8": "fp8", "fp8_block": "fp8-block"}.get(doc["dtype"], doc["dtype"]),
        doc["num_experts"],
        doc["n_per_gpu"],
        doc["hidden"],
        doc["top_k"],
        *doc.get("engines", ())[:1],  # a table marked for some engines prices only under them
    )
    assert pricer is not None
    checked = 0
    for m, us in zip(doc["tokens"], doc["kernel_us"]):
        if m * doc["top_k"] / doc["num_experts"] < moe_kernels.MIN_ROWS_PER_EXPERT:
            assert pricer.seconds(m) is None
            continue
        assert pricer.table_for(m).name == path.stem
        got = pricer.seconds(m) * 1e6
        assert abs(got / us - 1) <= TOLERANCE, f"{m} tokens: {got:.1f} us vs {us} us published"
        checked += 1
    assert checked >= 3


def _vllm_model(preset, gpu, tp, dtype=None):
    kw = {"weight_dtype": dtype} if dtype else {}
    base = StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), tp=tp, **kw))
    return base, base.for_engine(VLLM_PROFILE)


@pytest.mark.parametrize(
    "preset,table,tp,dtype",
    [
        ("mixtral-8x7b", "mixtral-8x7b-bf16-tp2-h100", 2, None),
        ("qwen3-30b-a3b", "qwen3-30b-a3b-fp8-tp1-h100", 1, "fp8"),
    ],
)
def test_step_model_prices_the_block_as_published(preset, table, tp, dtype):
    """Through the step model: a vLLM deployment of the table's model, GPU and TP spends, per MoE layer, the published
    time (its MoE block plus the kernel gaps of the kernels inside the call, which the table's time includes)."""
    doc = json.loads((moe_kernels.MOE_DIR / f"{table}.json").read_text())
    base, eng = _vllm_model(preset, doc["gpu"], tp, dtype)
    assert round(eng.expert_inter) == doc["n_per_gpu"] and eng.num_experts == doc["num_experts"]
    assert eng.moe_pricer is not None and base.moe_pricer is None
    for m, us in zip(doc["tokens"], doc["kernel_us"]):
        if m * doc["top_k"] / doc["num_experts"] < moe_kernels.MIN_ROWS_PER_EXPERT:
            # below one row per expert the grouped-GEMM rule prices it; harness and launch costs of the published
            # figures are not in it, so only a factor of 2 is asked there
            layer = eng._moe_seconds(m) / eng.num_moe_layers + eng._moe_call_gap_s
            assert 0.5 <= layer * 1e6 / us <= 2.0, (m, layer * 1e6, us)
            continue
        layer = eng._moe_seconds(m) / eng.num_moe_layers + eng._moe_call_gap_s
        assert abs(layer * 1e6 / us - 1) <= TOLERANCE, (m, layer * 1e6, us)


def test_other_shapes_priced_by_the_nearest_table_of_their_class():
    # Qwen3-235B-A22B bf16 at TP 8 (N = 1536 / 8 = 192): Hopper GPUs take the H200 Gemma4 table (N = 704), the A100 the
    # Kimi-VL A100 table; the prefill block is slower than the one-GEMM rule put it (its narrow, padded tiles)
    hopper, ampere = "gemma4-bf16-h200", "kimi-vl-a3b-bf16-a100"
    for gpu, name in (("h100-sxm", hopper), ("h200", hopper), ("a100-80", ampere)):
        base, eng = _vllm_model("qwen3-235b-a22b", gpu, 8)
        assert round(eng.expert_inter) == 192
        assert eng.moe_pricer.table_for(2048).name == name
        assert eng._moe_seconds(8192) > 1.2 * base._moe_seconds(8192)
    # a faster GPU of the class is priced faster at the same shape (its own roofline)
    h100 = _vllm_model("qwen3-235b-a22b", "h100-sxm", 8)[1]
    h200 = _vllm_model("qwen3-235b-a22b", "h200", 8)[1]
    assert h200._moe_seconds(4096) < h100._moe_seconds(4096)


def test_where_no_table_prices_the_call_the_grouped_gemm_rule_does():
    # decode below one row per expert, a GPU class without tables, an engine without the kernel, expert parallelism
    base, eng = _vllm_model("qwen3-235b-a22b", "h100-sxm", 8)
    assert eng._moe_seconds(8) == base._moe_seconds(8)
    b200 = _vllm_model("qwen3-235b-a22b", "b200", 8)[1]
    assert b200.moe_pricer is None
    assert base.for_engine(TRTLLM_PROFILE).moe_pricer is None
    assert base.for_engine(SGLANG_PROFILE).moe_pricer == eng.moe_pricer
    d = Deployment(model=load_model("qwen3-235b-a22b"), gpu=get_gpu("h100-sxm"), tp=8)
    ep = StepTimeModel(d, ep=8).for_engine(VLLM_PROFILE)
    assert ep.moe_pricer is None and ep._moe_seconds(4096) > 0


def test_the_factor_is_held_beyond_the_measured_rows():
    eng = _vllm_model("mixtral-8x7b", "h100-sxm", 2)[1]
    t = eng.moe_pricer.table_for(16384)
    assert t.name == "mixtral-8x7b-bf16-tp2-h100"
    assert math.isclose(t.eta_at(16384 * 2 / 8), t.eta[-1])


def test_calibration_scales_move_the_table_price():
    from kneecap.sim.steptime import StepTimeParams

    d = Deployment(model=load_model("mixtral-8x7b"), gpu=get_gpu("h100-sxm"), tp=2)
    one = StepTimeModel(d).for_engine(VLLM_PROFILE)
    half = StepTimeModel(d, StepTimeParams(mfu=0.5, bw_efficiency=0.5)).for_engine(VLLM_PROFILE)
    block = one._moe_seconds(1024) / one.num_moe_layers + one._moe_call_gap_s
    slow = half._moe_seconds(1024) / half.num_moe_layers + half._moe_call_gap_s
    assert math.isclose(slow, 2 * block, rel_tol=1e-9)


MIXTRAL, GEMMA4 = "mixtral-8x7b-bf16-tp2-h100", "gemma4-bf16-h200"


@pytest.mark.parametrize("held,other", [(MIXTRAL, GEMMA4), (GEMMA4, MIXTRAL)])
def test_a_table_held_out_is_priced_by_the_other_of_its_class(monkeypatch, held, other):
    """The transfer itself: with one Hopper bf16 table held out, the other (a different GPU, E 8 vs 128, N 7168 vs 704,
    K 4096 vs 2816) prices the held-out shape within 25% up to 512 tokens (measured: Mixtral from Gemma4 +1% to +20%,
    Gemma4 from Mixtral -1% to -10%). Above that they part further (up to +43% / -30% at 1,024-4,096 tokens), which
    the docstring's 'by analogy' covers; the FP8 tables part more (one untuned, one at 1-2 rows per expert)."""
    tables = {t.name: t for t in moe_kernels.tables()}
    monkeypatch.setattr(moe_kernels, "tables", lambda: (tables[other],))
    moe_kernels.pricer_for.cache_clear()
    try:
        t = tables[held]
        pricer = moe_kernels.pricer_for(get_gpu(t.gpu), t.kernel, "bf16", t.num_experts, t.n, t.hidden, t.top_k)
        checked = 0
        for m, us in zip(t.tokens, t.kernel_us):
            s = pricer.seconds(m)
            if s is None or m > 512:
                continue
            assert pricer.table_for(m).name == other
            assert abs(s * 1e6 / us - 1) <= 0.25, (m, s * 1e6, us)
            checked += 1
        assert checked >= 8
    finally:
        moe_kernels.pricer_for.cache_clear()
