"""MoE block priced operator by operator, and TensorRT-LLM's per-request host time at thousands of sequences."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.config import TRTLLM_CPU_PER_SEQ_S, trtllm_defaults
from kneecap.sim.steptime import StepTimeModel


def model_for(preset, gpu="b200", **kw):
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), **kw))


def test_moe_block_is_two_grouped_gemms_plus_the_activation_and_combine_passes():
    """A prefill of 8192 tokens on Qwen3-30B-A3B (128 experts of 768, top-8): every expert is touched, the grouped
    GEMMs are compute-bound, and the gated activation and top-k combine add their own bytes, not hidden."""
    st = model_for("qwen3-30b-a3b", weight_dtype="nvfp4")
    t = 8192
    load = t * st.top_k
    h, inter, act = st.hidden, st.expert_inter, st.params.activation_bytes
    assert inter == 768 and h == 2048
    # the kernel table's rate for a grouped GEMM of the whole load (every expert's rows in one kernel) at one expert's
    # gate_up (2I x h) and down (h x I) weight shapes, and the experts' weight-streaming rate
    frac = st.table.gemm_curves("fp4").fraction
    peak = st.deployment.gpu.fp4_flops
    c_gu = 2 / 3 * 2.0 * st.expert_params * load / (peak * frac(load, 2 * inter, h))
    c_dn = 1 / 3 * 2.0 * st.expert_params * load / (peak * frac(load, h, inter))
    c = c_gu + c_dn
    w = st.expert_bytes * st.distinct_experts(t) / getattr(st, "expert_byte_rate", st.gemm_byte_rate)
    m1 = 2 / 3 * w + act * (h + 2 * inter) * load / st.byte_rate
    m2 = 1 / 3 * w + act * (inter + h) * load / st.byte_rate
    gemms = max(c_gu, m1) + max(c_dn, m2)
    elem = act * (3 * inter * load + h * load + h * t) / st.byte_rate  # silu_and_mul, moe_sum
    assert st._moe_seconds(t) == pytest.approx((gemms + elem) * st.num_moe_layers)
    # the passes are real time: more than the old single max(compute, all bytes) over the block
    old = max(c, w + act * (2 * h + 3 * inter) * load / st.byte_rate) * st.num_moe_layers
    assert st._moe_seconds(t) > old * 1.2


def test_moe_decode_of_one_token_still_reads_only_its_experts():
    st = model_for("qwen3-30b-a3b", weight_dtype="nvfp4")
    one = st._moe_seconds(1)
    wrate = getattr(st, "expert_byte_rate", st.gemm_byte_rate)
    floor = st.expert_bytes * st.top_k / wrate * st.num_moe_layers  # 8 experts' weights per layer
    assert floor < one < 1.05 * floor


def test_trtllm_host_time_sets_the_step_of_a_small_model_at_thousands_of_sequences():
    """TensorRT-LLM's overlap scheduler hides host time only under a longer GPU step: 1536 decodes of a small MoE
    on a B200 replaying a CUDA graph (as trtllm-bench captures them) take the host's 2 ms + 1536 x 28 us, 1 decode
    takes the GPU's time; under the LLM API's default capture sizes (up to 128) the 1536 decodes run eagerly, their
    launches on the same host thread."""
    from dataclasses import replace

    base = model_for("qwen3-30b-a3b", weight_dtype="nvfp4", kv_dtype="fp8")  # no engine profile: gpu + 2 ms
    st = base.for_engine(replace(trtllm_defaults().profile, cudagraph_sizes=()))  # every decode batch captured
    assert TRTLLM_CPU_PER_SEQ_S == pytest.approx(28e-6)
    n, ctx = 1536, 1500
    step = st.seconds(n, n * ctx, 0, n * ctx, 0, n)
    cpu = st.overhead_s + n * TRTLLM_CPU_PER_SEQ_S
    gpu = base.seconds(n, n * ctx, 0, n * ctx, 0, n) - base.params.overhead_s
    assert gpu < cpu and step == pytest.approx(cpu)  # host-bound: the GPU waits
    llm_api = base.for_engine(trtllm_defaults().profile)
    launches = llm_api.kernels_per_pass * llm_api.eager_launch_s
    assert llm_api.seconds(n, n * ctx, 0, n * ctx, 0, n) == pytest.approx(cpu + launches)
    one_gpu = base.seconds(1, ctx, 0, ctx, 0, 1) - base.params.overhead_s
    assert st.seconds(1, ctx, 0, ctx, 0, 1) == pytest.approx(max(one_gpu, st.overhead_s + TRTLLM_CPU_PER_SEQ_S))


def test_vllm_before_0_12_runs_four_bit_experts_with_marlin_on_hopper():
    """vLLM 0.10-0.11 runs MXFP4 experts on Hopper with the Marlin MoE kernel (no triton_kernels in the install): their
    grouped GEMMs reach at most 0.257 of the bf16 peak (an nsys capture of Marlin's MXFP4 MoE GEMM on H100); 0.12 and
    later (triton_kernels' matmul_ogs), GPUs with FP4 hardware and bf16 experts keep the bf16 GEMM rate."""
    from kneecap.sim.config import at_release, vllm_defaults

    gib = 1 << 30
    v011 = at_release(vllm_defaults(80 * gib, "h100-sxm"), "0.11.0").profile
    v012 = at_release(vllm_defaults(80 * gib, "h100-sxm"), "0.12.0").profile
    v017 = at_release(vllm_defaults(80 * gib, "h100-sxm"), "0.17.0").profile
    assert v011.marlin_w4a16_moe and not v012.marlin_w4a16_moe and not v017.marlin_w4a16_moe
    base = model_for("gpt-oss-20b", gpu="h100-sxm", weight_dtype="mxfp4")
    marlin, triton = base.for_engine(v011), base.for_engine(v012)
    peak = base.deployment.gpu.bf16_flops
    assert marlin.moe_flop_cap == pytest.approx(0.257 * peak) and triton.moe_flop_cap == float("inf")
    t = 8192  # a prefill chunk: every expert touched, the grouped GEMMs compute-bound
    flops = 2.0 * base.expert_params * t * base.top_k * base.num_moe_layers
    assert marlin._moe_seconds(t) > flops / (0.257 * peak)  # at least the Marlin-bound compute
    assert triton._moe_seconds(t) < 0.5 * marlin._moe_seconds(t)  # the bf16 table's ~0.63 of peak
    # a decode step streams the experts' weights: Marlin's compute ceiling does not bind there
    assert marlin._moe_seconds(8) == pytest.approx(triton._moe_seconds(8))
    # FP4 hardware (B200) or bf16 experts: no Marlin ceiling even under the 0.11 profile
    assert model_for("gpt-oss-20b", gpu="b200", weight_dtype="mxfp4").for_engine(v011).moe_flop_cap == float("inf")
    assert model_for("qwen3-30b-a3b", gpu="h100-sxm").for_engine(v011).moe_flop_cap == float("inf")
