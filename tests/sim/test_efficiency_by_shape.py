"""GEMM efficiency by shape (data/efficiency.json gemm_<dtype>_by_m) and 4-bit weight-only experts, in the step time."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.efficiency import curve_at, efficiency_for
from kneecap.sim.steptime import StepTimeModel, gemm_class

MI300X_FP8_PEAK = 2614.9e12
MI300X_HBM = 5.3e12

# Measured MI300X per-token FP8 GEMM times (us) at the four Llama-3.1-405B TP8 layer shapes (QKV 2304x16384, O
# 16384x2048, gate_up 13312x16384, down 16384x6656), copied from ROCm/aiter aiter/configs/a8w8_tuned_gemm.csv at commit
# 41fa6c4f73b2a032132f5be384287a05b91197a8 (cu_num 304 rows). The curve is a median over 19 shapes, so one shape's
# modelled time is off its own measurement (the narrow QKV most: its weight streams at 0.31 of HBM at M=16, the
# curve's shapes at a median 0.5); over the table's 228 (shape, M) rows of 32 MB or more: median 6.6%, worst 55%.
AITER_405B_TP8 = [  # (M, N, K, us)
    (16, 2304, 16384, 23.3002),
    (16, 13312, 16384, 73.2849),
    (16, 16384, 2048, 12.8107),
    (16, 16384, 6656, 31.5283),
    (64, 2304, 16384, 25.6306),
    (64, 13312, 16384, 95.3068),
    (64, 16384, 2048, 17.0095),
    (64, 16384, 6656, 39.2547),
    (256, 2304, 16384, 47.4832),
    (256, 13312, 16384, 172.2679),
    (256, 16384, 2048, 31.9769),
    (256, 16384, 6656, 84.3868),
    (1024, 2304, 16384, 123.5471),
    (1024, 13312, 16384, 500.9414),
    (1024, 16384, 2048, 94.4094),
    (1024, 16384, 6656, 245.5713),
    (4096, 2304, 16384, 342.2706),
    (4096, 13312, 16384, 1811.2412),
    (4096, 16384, 2048, 342.6491),
    (4096, 16384, 6656, 935.9307),
]


def test_curve_is_linear_between_points_scales_below_and_holds_above():
    pts = ((16, 0.04), (64, 0.1), (256, 0.2))
    assert curve_at(pts, 8) == pytest.approx(0.02)
    assert curve_at(pts, 40) == pytest.approx(0.07)
    assert curve_at(pts, 64) == pytest.approx(0.1)
    assert curve_at(pts, 10_000) == pytest.approx(0.2)


def test_mi300x_fp8_has_a_table_and_nvidia_keeps_its_flat_figure():
    amd = efficiency_for("mi300x")
    fracs = [f for _, f in amd.gemm_curve("fp8")]
    assert fracs[0] < 0.01 and max(fracs) < amd.gemm_fp8  # below the flat 0.45 at every measured M
    assert curve_at(amd.gemm_curve("fp8"), 128) == pytest.approx(0.1665)
    assert amd.gemm_curve("bf16") is None and efficiency_for("h100-sxm").gemm_curve("fp8") is None


def test_modelled_gemm_times_are_near_the_measured_kernels():
    st = StepTimeModel(Deployment(model=load_model("llama-3.1-405b"), gpu=get_gpu("mi300x"), tp=8, weight_dtype="fp8"))
    errors = []
    for m, n, k, us in AITER_405B_TP8:
        modelled = max(2.0 * m * n * k / st.gemm_rate(m), n * k / st.gemm_byte_rate) * 1e6
        errors.append(abs(modelled - us) / us)
        assert modelled == pytest.approx(us, rel=0.45), (m, n, k)
    assert sorted(errors)[len(errors) // 2] < 0.12
    # the flat 0.45 x peak (with the 0.73 weight stream) it replaces was 1.4-1.8x too fast at M = 64-256
    flat = [
        max(2.0 * m * n * k / st.flop_rate, n * k / st.gemm_byte_rate) * 1e6 / us
        for m, n, k, us in AITER_405B_TP8
        if 64 <= m <= 256 and n * k > 100e6
    ]
    assert max(flat) < 0.75


def test_step_gemm_rate_follows_the_table_on_mi300x_only():
    amd = StepTimeModel(Deployment(model=load_model("llama-3.1-405b"), gpu=get_gpu("mi300x"), tp=8, weight_dtype="fp8"))
    assert amd.gemm_rate(256) == pytest.approx(MI300X_FP8_PEAK * 0.2315)
    assert amd.gemm_rate(50_000) == pytest.approx(MI300X_FP8_PEAK * 0.3929)
    assert amd.gemm_rate(256) < amd.flop_rate  # the flat 0.45 x peak was too fast at decode batches
    nv = StepTimeModel(Deployment(model=load_model("llama-3.1-405b"), gpu=get_gpu("h200"), tp=8, weight_dtype="fp8"))
    assert nv.gemm_rate(256) == nv.flop_rate
    # a 256-sequence decode step is slower with the table than it would be at the flat figure
    flat = StepTimeModel(amd.deployment)
    flat.gemm_curve = None
    assert amd.seconds(256, 256 * 200, 0, 256 * 200, 0, 256) > 1.2 * flat.seconds(256, 256 * 200, 0, 256 * 200, 0, 256)


def test_four_bit_without_fp4_hardware_is_weight_only_bf16():
    gptoss = load_model("gpt-oss-120b")
    amd = Deployment(model=gptoss, gpu=get_gpu("mi300x"), weight_dtype="mxfp4")  # as shipped
    assert gemm_class(amd) == "bf16"  # MXFP4 on gfx942: upcast in the kernel, bf16 activations
    assert gemm_class(Deployment(model=gptoss, gpu=get_gpu("b200"), weight_dtype="mxfp4")) == "fp4"
    assert gemm_class(Deployment(model=gptoss, gpu=get_gpu("h100-sxm"), weight_dtype="mxfp4")) == "bf16"
    assert gemm_class(Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("mi300x"), weight_dtype="fp8")) == "fp8"
    st = StepTimeModel(amd)
    assert st.expert_byte_rate == pytest.approx(0.30 * MI300X_HBM)
    assert st.gemm_byte_rate == pytest.approx(0.73 * MI300X_HBM)  # the bf16 layers keep hipBLASLt's rate
    # no W4A16 expert figure for NVIDIA: its experts stream at the GEMM rate
    nv = StepTimeModel(Deployment(model=gptoss, gpu=get_gpu("h100-sxm"), weight_dtype="mxfp4"))
    assert nv.expert_byte_rate == nv.gemm_byte_rate
