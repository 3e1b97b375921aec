"""Kernel tables (data/kernels/*.json, sim/kernels.py): the simulator's price of every measured kernel shape, and
whole prefill/decode steps against the sum of the measured kernels they are made of."""

from __future__ import annotations

import json

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.efficiency import efficiency_for
from kneecap.sim.kernels import (
    KERNELS_DIR,
    MIN_TRUSTED_DECODE_BATCH,
    MIN_TRUSTED_M,
    load_table,
    table_for,
)
from kneecap.sim.steptime import StepTimeModel, StepTimeParams

MEASURED = sorted(p.stem for p in KERNELS_DIR.glob("*.json"))
NO_HOST = StepTimeParams(overhead_s=0.0)  # the kernels only: no host work between steps


def doc(gpu: str) -> dict:
    return json.loads((KERNELS_DIR / f"{gpu}.json").read_text())


def model_8b(gpu: str) -> StepTimeModel:
    return StepTimeModel(Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu(gpu)), NO_HOST)


def gemm_cases():
    for gpu in MEASURED:
        d = doc(gpu)
        for cls in ("bf16", "fp8"):
            g = d["gemm"].get(cls)
            for shape, (n, k) in (g and d["gemm"]["shapes"].items()) or ():
                for m, tflops in zip(g["m"], g["tflops"][shape]):
                    yield gpu, cls, shape, n, k, m, tflops


def test_every_table_names_its_measurement():
    assert MEASURED, "no kernel table"
    for gpu in MEASURED:
        assert "measured on" in doc(gpu)["source"]
        assert get_gpu(gpu).name == gpu


@pytest.mark.parametrize("gpu,cls,shape,n,k,m,tflops", list(gemm_cases()))
def test_gemm_price_matches_the_measured_kernel(gpu, cls, shape, n, k, m, tflops):
    """Within 5% where the table is a kernel fact (M >= MIN_TRUSTED_M: the launch and event pair each figure carries
    is a few percent); below it the table's own note says a CUDA-graph replay streams faster: the price is below the
    isolated kernel's time, and not below the weights' bytes at the measured copy rate."""
    st = model_8b(gpu)
    peak = {"bf16": st.deployment.gpu.bf16_flops, "fp8": st.deployment.gpu.fp8_flops}[cls]
    measured_s = 2.0 * m * n * k / (tflops * 1e12)
    compute_s = 2.0 * m * n * k / (peak * st.table.gemm_curves(cls).fraction(m, n, k))
    weights_s = n * k * (1 if cls == "fp8" else 2) / doc(gpu)["hbm_copy_bytes_s"]
    price = max(compute_s, weights_s)
    if m >= MIN_TRUSTED_M:
        assert price == pytest.approx(measured_s, rel=0.05)
    else:
        assert weights_s <= price <= measured_s * 1.05


@pytest.mark.parametrize("gpu", MEASURED)
def test_prefill_attention_price_matches_the_measured_kernel(gpu):
    d = doc(gpu)["attention_prefill"]
    st = model_8b(gpu)
    m = st.deployment.model
    assert (m.num_attention_heads, m.num_key_value_heads, m.head_dim) == (d["heads"], d["kv_heads"], d["head_dim"])
    for seq_len, ms in zip(d["seq_len"], d["ms"]):
        pairs = seq_len * (seq_len + 1) / 2
        per_layer_s = st._prefill_attention_seconds(pairs, 0, seq_len, 0) / m.num_hidden_layers
        assert per_layer_s * 1e3 == pytest.approx(ms, rel=0.05), seq_len


@pytest.mark.parametrize("gpu", MEASURED)
def test_decode_attention_price_matches_the_measured_kernel(gpu):
    """Batches of MIN_TRUSTED_DECODE_BATCH and more within 5%; a smaller batch's figure is mostly its launch and
    event pair (the table's note), which a graph replay does not pay: priced below it."""
    d = doc(gpu)["attention_decode"]
    st = model_8b(gpu)
    layers = st.deployment.model.num_hidden_layers
    for batch, seq_len, us in d["rows"]:
        kv = batch * seq_len
        sf, _ = st._slopes(kv)
        per_layer_us = sf * kv / layers * 1e6
        if batch >= MIN_TRUSTED_DECODE_BATCH:
            assert per_layer_us == pytest.approx(us, rel=0.05), (batch, seq_len)
        else:
            assert per_layer_us < us, (batch, seq_len)


def test_narrow_tp_shards_run_below_the_whole_layer_rate():
    curves = load_table("h200").gemm_curves("bf16")
    for m in (256, 512, 1024):  # Llama-3.1-8B's gate_up whole, and its TP 2 and TP 8 shards
        assert curves.fraction(m, 28672 // 8, 4096) < 0.8 * curves.fraction(m, 28672 // 2, 4096)
        assert curves.fraction(m, 28672 // 8, 4096) < 0.8 * curves.fraction(m, 28672, 4096)
    # at the measured shapes themselves, the measured curve
    assert curves.fraction(4096, 4096, 4096) == pytest.approx(680e12 / 989e12)


def test_gpus_without_a_table_take_the_h200_shape_at_their_own_best_fraction():
    b200 = get_gpu("b200")
    eff = efficiency_for("b200")
    t = table_for(b200, eff)
    assert "shape scaled" in t.name
    best = max(t.gemm_curves("bf16").fraction(m, 28672, 4096) for m in (2**i for i in range(7, 17)))
    assert best == pytest.approx(eff.gemm_bf16, rel=0.02)
    assert max(t.prefill_attention_fraction(f) for f in (1e9, 1e11, 1e13, 1e15)) == pytest.approx(eff.attention)
    h100 = table_for(get_gpu("h100-sxm"), efficiency_for("h100-sxm"))
    assert "by analogy" in h100.name  # the same die: the H200's fractions, its own bandwidth
    assert h100.decode_attention_bytes_s(1e9) < load_table("h200").decode_attention_bytes_s(1e9)


# --- whole steps against the sum of the measured kernels -------------------------------------------------------------
# The real-kernel step of a Llama-class model on the H200 is composed from data/kernels/h200.json, per decoder layer:
# the four projection GEMMs at the step's M rows (the table's TFLOP/s at that shape and M), the attention pass
# (prefill: the table's causal pass at that length; decode: the table's (batch, length) row), and the element-wise
# kernels the probe did not fuse, by their bytes at the measured copy rate (two fused add+RMSNorm: read x and the
# residual, write both; SiLU-and-mul: read 2I, write I; rotary: read and write q and k; KV-cache write: read k and
# v, write them); then the LM head over the sampled rows (its weights at the copy rate, or its FLOPs at the widest
# measured GEMM's rate at that M if slower). Llama-3.1-8B's shapes are the table's own. One GPU's share of
# Llama-3.1-70B at TP 8 has shapes the table did not measure (N/8 or K/8; 8 query heads and 1 KV head per GPU):
# those kernels take the table by sim/kernels.py's stated rules (equal work for a GEMM, equal FLOPs for a prefill
# pass, equal bytes for a decode pass), so that check covers how the step is composed, not those rules. Host work
# and TP communication are not kernels in the table: the model is priced without host time and its all-reduces.
# The model charges the graph-replay gap on every kernel, the table-timed ones too (whose figures hold a launch):
# that is the most of its excess here (5 x 3.3 us a layer: 1.3 ms, 8% of a 70B TP 8 decode step at batch 128).
TABLE_SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


def _table_gemm_s(d: dict, cls: str, n: float, k: float, m: int) -> float:
    g = d["gemm"][cls]
    peak = d["peaks"][cls]
    for shape, (ns, ks) in TABLE_SHAPES.items():
        if (n, k) == (ns, ks) and m in g["m"]:
            return 2.0 * m * n * k / (g["tflops"][shape][g["m"].index(m)] * 1e12)
    return 2.0 * m * n * k / (peak * load_table("h200").gemm_curves(cls).fraction(m, n, k))


def _prefill_attention_s(d: dict, model, tp: int, seq_len: int) -> float:
    a = d["attention_prefill"]
    if (model.num_attention_heads // tp, model.num_key_value_heads // tp, model.head_dim) == (
        a["heads"],
        a["kv_heads"],
        a["head_dim"],
    ):
        return a["ms"][a["seq_len"].index(seq_len)] * 1e-3
    flops = 4.0 * model.num_attention_heads / tp * model.head_dim * seq_len * seq_len / 2
    return flops / (d["peaks"]["bf16"] * load_table("h200").prefill_attention_fraction(flops))


def _decode_attention_s(d: dict, model, tp: int, batch: int, seq_len: int) -> float:
    a = d["attention_decode"]
    kvh = max(1, model.num_key_value_heads // tp)
    if (kvh, model.head_dim) == (a["kv_heads"], a["head_dim"]):
        return next(us for b, L, us in a["rows"] if (b, L) == (batch, seq_len)) * 1e-6
    nbytes = batch * seq_len * 2 * kvh * model.head_dim * 2
    return nbytes / load_table("h200").decode_attention_bytes_s(nbytes)


def _kernel_step_s(model, tp: int, m: int, attention_s_per_layer: float, sampled: int) -> float:
    d = doc("h200")
    h, inter, hd = model.hidden_size, model.intermediate_size // tp, model.head_dim
    qh, kvh = model.num_attention_heads // tp, max(1, model.num_key_value_heads // tp)
    shapes = [((qh + 2 * kvh) * hd, h), (h, qh * hd), (2 * inter, h), (h, inter)]
    gemms = sum(_table_gemm_s(d, "bf16", n, k, m) for n, k in shapes)
    elem_bytes = m * 2 * (2 * 4 * h + 3 * inter + 2 * (qh + kvh) * hd + 2 * 2 * kvh * hd)
    copy = d["hbm_copy_bytes_s"]
    head_w = model.vocab_size * h / tp
    head = max(
        head_w * 2 / copy,
        _table_gemm_s(d, "bf16", 28672, 4096, max(sampled, 128))
        * head_w
        / (28672 * 4096)
        * (sampled / max(sampled, 128)),
    )
    # each element-wise kernel (5 a layer; embedding, final norm and sampling 3 more) pays the graph-replay gap between
    # kernels (StepTimeParams.kernel_gap_s); a table figure already holds its kernel's launch
    gaps = (5 * model.num_hidden_layers + 3) * StepTimeParams().kernel_gap_s
    return model.num_hidden_layers * (gemms + attention_s_per_layer + elem_bytes / copy) + head + gaps


def _gpu_step_s(st: StepTimeModel, *args) -> float:
    return st.seconds(*args) - st.comm_seconds(args[0])


@pytest.mark.parametrize("preset,tp", [("llama-3.1-8b", 1), ("llama-3.1-70b", 8)])
def test_prefill_step_is_the_sum_of_the_measured_kernels(preset, tp):
    d = doc("h200")
    st = StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu("h200"), tp=tp), NO_HOST)
    model = st.deployment.model
    for seq_len in d["attention_prefill"]["seq_len"]:
        ref = _kernel_step_s(model, tp, seq_len, _prefill_attention_s(d, model, tp, seq_len), 1)
        sim = _gpu_step_s(st, seq_len, seq_len * (seq_len + 1) / 2, 0, seq_len, 0, 1)
        assert sim == pytest.approx(ref, rel=0.10), (seq_len, sim, ref)


@pytest.mark.parametrize("preset,tp", [("llama-3.1-8b", 1), ("llama-3.1-70b", 8)])
def test_decode_step_is_the_sum_of_the_measured_kernels(preset, tp):
    """At the trusted decode rows (batch 128: GEMMs of M = 128, where the table's per-kernel overhead is small)."""
    d = doc("h200")
    st = StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu("h200"), tp=tp), NO_HOST)
    model = st.deployment.model
    for batch, seq_len, _ in d["attention_decode"]["rows"]:
        if batch != 128:
            continue
        ref = _kernel_step_s(model, tp, batch, _decode_attention_s(d, model, tp, batch, seq_len), batch)
        sim = _gpu_step_s(st, batch, batch * seq_len, 0, batch * seq_len, 0, batch)
        assert sim == pytest.approx(ref, rel=0.10), (seq_len, sim, ref)
