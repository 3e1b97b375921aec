"""Step-time model: worked examples, the MoE expert-coverage term against Monte Carlo routing, link types, regimes."""

from __future__ import annotations

import numpy as np
import pytest

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.steptime import StepTimeModel, StepTimeParams


def model_for(preset, gpu="h100-sxm", **kw):
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), **kw))


# Worked examples (hand arithmetic; defaults: H100 SXM achievable = 0.803 x 989 TFLOP/s GEMM, 0.895 x 3.35 TB/s
# = 2.99825e12 B/s HBM, 370 GB/s all-reduce busbw (data/efficiency.json); 2 ms CPU per step, no engine profile):
#   llama-3.1-8b bf16, TP1, one decode at context 1:
#     MLP: 5,637,144,576 params x 2 B + activations 2 x (4 x 4096 x 32 + 3 x 14336 x 32) = 11,278,090,240 B -> 3.7615 ms
#     attention projections: 1,342,177,280 x 2 B = 2,684,354,560 B -> 0.8953 ms
#     LM head 525,336,576 x 2 B + logits 128,256 x 4 B x 2 passes + embedding 8 KiB = 1,051,707,392 B -> 0.3508 ms
#     KV of one token, compute terms: < 0.02 ms; kernels 6 + 32 x (2 norms + 5 attention + 3 MLP) = 326 x 3.3 us
#     = 1.0758 ms; + 2 ms CPU = 8.084 ms
#   llama-3.1-70b bf16, TP8, one decode at context 1:
#     MLP 56,371,445,760 / 8 x 2 B + 2 x (4 x 8192 x 80 + 3 x 28672 / 8 x 80) = 14,099,824,640 B -> 4.7027 ms
#     attention projections 12,079,595,520 / 8 x 2 B -> 1.0072 ms; LM head 1,050,673,152 / 8 x 2 B + logits -> 0.0880 ms
#     all-reduce 160 x (3.6 us + 14 x 0.47 us) = 1.6288 ms + 160 x 2 x 7/8 x 16,384 B / 370e9 = 0.0124 ms;
#     kernels 6 + 80 x 10 = 806 x 3.3 us = 2.6598 ms; + 2 ms = 12.099 ms
@pytest.mark.parametrize(
    "preset,tp,expected_ms",
    [
        ("llama-3.1-8b", 1, 8.084),
        ("llama-3.1-70b", 8, 12.099),
    ],
)
def test_single_decode_step_worked_examples(preset, tp, expected_ms):
    st = model_for(preset, tp=tp)
    assert st.seconds(1, 1, 0, 1, 0, 1) * 1000 == pytest.approx(expected_ms, rel=2e-3)


def test_moe_expected_distinct_experts_matches_random_routing():
    st = model_for("qwen3-30b-a3b")
    e, k = st.num_experts, st.top_k
    rng = np.random.default_rng(0)
    assert st.distinct_experts(1) == pytest.approx(k)
    for n in (1, 4, 16, 64, 256):
        trials = []
        for _ in range(300):
            hit = np.zeros(e, dtype=bool)
            for _ in range(n):
                hit[rng.choice(e, size=k, replace=False)] = True
            trials.append(hit.sum())
        mc = float(np.mean(trials))
        assert st.distinct_experts(n) == pytest.approx(mc, rel=0.03), n
    assert st.distinct_experts(10_000) == pytest.approx(e, rel=1e-6)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    st = model_for("llama-3.1-70b", tp=8)
    one = st.seconds(1, 1000, 0, 1000, 0, 1)
    eight = st.seconds(8, 8000, 0, 8000, 0, 8)
    assert eight < 1.2 * one  # small decode batches ride on the same weight read
    p4k = st.seconds(4096, 4096 * 4097 / 2, 0, 4096, 0, 1)
    p8k = st.seconds(8192, 8192 * 8193 / 2, 0, 8192, 0, 1)
    assert 1.9 < p8k / p4k < 2.3  # large prefills scale with tokens (plus a growing attention term)


def test_pcie_all_reduce_costs_more_than_nvlink():
    nvl = model_for("llama-3.1-70b", "h100-sxm", tp=8)
    pcie = model_for("llama-3.1-70b", "h100-pcie", tp=8)
    assert pcie.comm_seconds(4096) > 5 * nvl.comm_seconds(4096)  # 64 vs 450 GB/s per direction
    assert model_for("llama-3.1-8b", tp=1).comm_seconds(4096) == 0.0


def test_pipeline_parallel_runs_as_many_micro_batches_as_stages():
    tp4 = model_for("llama-3.1-70b", tp=4)
    pp2 = model_for("llama-3.1-70b", tp=4, pp=2)
    assert pp2.pp_latency_s > 0 and tp4.pp_latency_s == 0
    # compute-bound work (64 prompts of 512 tokens, two micro-batches of 32): both stages stay busy, so a round
    # over twice the GPUs takes about half as long: throughput scales with stages at high load
    args = (64 * 512, 64 * 512 * 513 / 2, 0, 64 * 512, 0, 64)
    kw = dict(num_decodes=0, decode_kv_full=0, decode_kv_window=0)
    ratio = pp2.seconds(*args, **kw) / tp4.seconds(*args, **kw)
    assert 0.5 < ratio < 0.6
    # the bubble: one sequence is one micro-batch and passes the stages one after another (no gain, plus a send)
    one = (1, 1000, 0, 1000, 0, 1)
    assert pp2.seconds(*one) > tp4.seconds(*one)
    # decode: each stage re-reads its weights per micro-batch, so weight-bound decode gains only on KV reads
    dec = (256, 256 * 4000, 0, 256 * 4000, 0, 256)
    assert pp2.seconds(*dec) < tp4.seconds(*dec)


def test_mixed_step_prices_decode_and_prefill_attention_separately():
    st = model_for("llama-3.1-8b")
    decode = dict(num_decodes=64, decode_kv_full=64 * 4000.0, decode_kv_window=0.0)
    mixed = st.seconds(64 + 2048, 64 * 4000 + 2048 * 2049 / 2, 0, 64 * 4000 + 2048, 0, 65, **decode)
    decodes_only = st.seconds(64, 64 * 4000, 0, 64 * 4000, 0, 64)
    prefill_only = st.seconds(2048, 2048 * 2049 / 2, 0, 2048, 0, 1)
    assert max(decodes_only, prefill_only) < mixed < decodes_only + prefill_only  # one weight read, both attentions


def test_mla_decode_reads_the_latent_and_dp_attention_splits_it():
    tp = model_for("deepseek-v3", "h200", tp=8)
    model = tp.deployment.model
    latent = (model.kv_lora_rank + model.qk_rope_head_dim) * 2 * model.count_layers("mla")
    assert tp.b_mla == latent  # the whole latent on every rank (vLLM and SGLang replicate it under TP)
    slope = tp.seconds(1, 100_001, 0, 100_001, 0, 1) - tp.seconds(1, 1, 0, 1, 0, 1)
    # each pass's latent bytes at the kernel table's decode rate for that many cached bytes (sim/kernels.py)
    per_token = [max(tp.f_mla_dec / tp.attn_rate, tp.b_mla / tp.decode_attention_bytes_s(kv)) for kv in (100_001, 1)]
    assert slope == pytest.approx(100_001 * per_token[0] - per_token[1], rel=1e-6)
    assert tp.decode_attention_bytes_s(3_000_000) > 1.3 * tp.decode_attention_bytes_s(1)  # bigger passes stream faster
    dp = StepTimeModel(tp.deployment, dp_attention=True)
    assert dp.ep == 8 and dp.tp_latency_s == 0 and dp.a2a_latency_s > 0
    many = (256, 256 * 8000, 0, 256 * 8000, 0, 256)  # long contexts: KV reads dominate; DP attention reads 1/8 each
    assert dp.seconds(*many) < 0.7 * tp.seconds(*many)


def test_mla_prefill_is_multi_head_attention_with_192_dim_keys_and_128_dim_values():
    # DeepSeek-V3: q.k over d_h + d_h^R = 128 + 64 per head, p.v over d_h = 128 (DeepSeek-V2 sec. 2.1), 128 heads / 8
    tp = model_for("deepseek-v3", "h200", tp=8)
    assert tp.f_mla_pre == 2.0 * (128 // 8) * (192 + 128) * 61


def test_expert_parallel_load_imbalance_slows_compute_bound_experts():
    ep = StepTimeModel(model_for("qwen3-30b-a3b", tp=4).deployment, ep=4)
    big = 16384  # every expert hit: a compute-bound grouped GEMM
    mean = big * ep.top_k / 4
    # the mean load's grouped GEMMs plus the activation and combine passes, which also scale with the load
    passes = ep.params.activation_bytes * ((3 * ep.expert_inter + ep.hidden) * mean + ep.hidden * big) / ep.byte_rate
    # the kernel table's grouped-GEMM rates at the mean load, gate_up (2/3 of the FLOPs) and down (1/3)
    flops = 2.0 * ep.expert_params * mean
    gemms = 2 / 3 * flops / ep.gemm_rate(mean, ep.cls_moe, "gate_up") + flops / 3 / ep.gemm_rate(
        mean, ep.cls_moe, "down"
    )
    balanced = (gemms + passes) * ep.num_moe_layers
    assert 1.0 < ep._moe_seconds(big) / balanced < 1.1  # the busiest of 4 ranks: a few % above the mean load


def test_engine_profiles_pad_decodes_and_overlap_cpu():
    from kneecap.sim.config import engine_defaults

    st = model_for("llama-3.1-8b")
    kw = dict(device_bytes=80 * 2**30, gpu_name="h100-sxm", pool_tokens=100_000, context_len=4096)
    vllm, sglang, trt = (engine_defaults(k, **kw) for k in ("vllm", "sglang", "trtllm"))
    v, s = st.for_engine(vllm.profile), st.for_engine(sglang.profile)
    assert st.for_engine(None) is st and v.for_engine(vllm.profile) is v
    assert v.padded(129, 129) == 136 and v.padded(600, 600) == 600 and v.padded(700, 129) == 700  # eager above 512
    assert s.padded(129, 129) == 136 and s.padded(161, 161) == 161
    step = (1024, 1024e3, 0, 1024e3, 0, 1024)  # above every capture size: no padding in either
    gpu = st.seconds(*step) - st.params.overhead_s
    cpu = 0.002 + 1024 * 12.7e-6
    assert v.seconds(*step) == pytest.approx(gpu + cpu)  # vLLM: CPU work after the GPU's
    assert s.seconds(*step) == pytest.approx(max(gpu, cpu))  # SGLang: overlapped
    assert trt.name == "trtllm" and trt.init_new_token_ratio == 1.0 and trt.profile.overlap_cpu


def test_efficiency_file_covers_every_gpu_with_sources():
    import json

    from kneecap.hardware import list_gpus
    from kneecap.sim.efficiency import EFFICIENCY_FILE, efficiency_for

    doc = json.loads(EFFICIENCY_FILE.read_text())
    for name, entry in doc["gpus"].items():
        for key in ("gemm_bf16", "gemm_fp8", "gemm_fp4", "attention", "hbm", "allreduce_busbw_bytes_s"):
            if key in entry:
                cited = entry.get("sources", {}).get(key) or entry.get("by_analogy", {}).get(key)
                assert cited, (name, key)
    for entry in doc["gpus"].values():
        for text in entry.get("sources", {}).values():
            assert text.split(":")[0] in doc["sources"], text
    for gpu in list_gpus():
        eff = efficiency_for(gpu.name)
        assert 0 < eff.gemm_bf16 <= 1 and 0 < eff.hbm <= 1 and 0 < eff.attention <= 1


def test_fp4_weights_use_fp4_peak_where_the_gpu_has_one():
    bf16 = model_for("llama-3.1-70b", "b200", tp=8)
    fp4 = model_for("llama-3.1-70b", "b200", tp=8, weight_dtype="nvfp4")
    # B200: fp4 peak 9,000 x 0.434 (vLLM's CUTLASS NVFP4 GEMM, 3904 TFLOP/s: efficiency.json vllm20646) vs bf16 2,250 x 0.776
    assert fp4.flop_rate == pytest.approx(9000e12 * 0.434) and bf16.flop_rate == pytest.approx(2250e12 * 0.776)
    # the decoder's Linear layers at 4.5 bits, the embedding and LM head kept at bf16 (as the plan's ledger prices them)
    assert fp4.gemm_weight_bytes == pytest.approx(bf16.gemm_weight_bytes * 4.5 / 16, rel=1e-6)
    assert fp4.head_bytes == bf16.head_bytes


# NVIDIA's ModelOpt checkpoints list lm_head in exclude_modules (hf_quant_config.json of nvidia/DeepSeek-V3.1-NVFP4 and
# nvidia/Llama-3.1-70B-Instruct-FP8): the simulator reads and multiplies each part in the dtype the ledger prices it in
@pytest.mark.parametrize(
    "spec,gpu,weight_dtype",
    [
        ("tests/model/configs/nvidia--DeepSeek-V3.1-NVFP4", "b200", None),
        ("tests/model/configs/nvidia--Llama-3.1-70B-Instruct-FP8", "h100-sxm", None),
        ("llama-3.1-70b", "b200", "nvfp4"),  # --weight-dtype over a bf16 checkpoint: decoder Linear layers only
        ("llama-3.1-70b", "h100-sxm", "fp8"),
    ],
)
def test_part_bytes_follow_the_ledger_and_the_lm_head_stays_bf16(spec, gpu, weight_dtype):
    from kneecap.plan.build import DeploymentRequest, plan_deployment
    from kneecap.sim.steptime import _part_bytes, run_part_dtypes

    plan = plan_deployment(DeploymentRequest(model=spec, gpu=gpu, tp=8, weight_dtype=weight_dtype)).plan
    d, model = plan.deployment, plan.deployment.model
    assert sum(_part_bytes(d).values()) == pytest.approx(plan.weights_total_bytes, rel=1e-9)
    dtypes = run_part_dtypes(d)
    assert dtypes["lm_head"] == dtypes["embed"] == "bf16" and dtypes["dense_mlp"] == d.weight_dtype != "bf16"
    st = StepTimeModel(d)
    assert st.cls_head == "bf16" and st.cls_mlp != "bf16"
    assert st.head_bytes == pytest.approx(model.vocab_size * model.hidden_size * 2 / 8)
    # the head GEMM at the bf16 rate: 2 x head params x rows / (bf16 peak x its achievable fraction)
    rows = 4096
    bf16_rate = d.gpu.bf16_flops * st.efficiency.gemm("bf16")
    assert st._head_seconds(rows, rows) >= 2.0 * st.head_params * rows / bf16_rate
    assert st.gemm_rate(rows, "bf16") == pytest.approx(bf16_rate) and st.gemm_rate(rows) == pytest.approx(st.flop_rate)


def test_decode_run_matches_single_steps():
    st = model_for("gemma-3-27b", tp=2)  # sliding-window layers exercise the windowed sums
    ctx = np.array([5, 700, 1023, 1024, 1500, 3000])
    run = st.decode_run_seconds(len(ctx), ctx, 40)
    for j in range(40):
        c = ctx + j
        w = np.minimum(c, st.window)
        single = st.seconds(len(ctx), c.sum(), w.sum(), c.sum(), w.sum(), len(ctx))
        assert run[j] == pytest.approx(single, rel=1e-12)


@pytest.mark.parametrize("field,value", [("mfu", 0.0), ("mfu", 4.5), ("bw_efficiency", -1), ("overhead_s", -0.1)])
def test_bad_constants_are_errors(field, value):
    with pytest.raises(KneecapError) as exc:
        StepTimeParams(**{field: value})
    assert field in exc.value.one_line()


def test_params_round_trip_and_unknown_keys():
    p = StepTimeParams.from_dict({"mfu": 0.4, "overhead_s": 0.003})
    assert StepTimeParams.from_dict(p.to_dict()) == p
    with pytest.raises(KneecapError):
        StepTimeParams.from_dict({"speed": 2})


def test_every_kernel_of_a_pass_costs_the_kernel_gap():
    from kneecap.sim.steptime import StepTimeParams

    dense, moe = model_for("llama-3.1-8b"), model_for("deepseek-v3", "h200", tp=8)
    assert dense.kernels_per_pass == 6 + 32 * 10  # embedding/head/sampling + 2 norms, 5 attention, 3 MLP per layer
    # bf16: 3 dense layers of 2 norms + MLA 11 + MLP 3, 58 MoE layers of 2 + 11 + 7 routed + 3 shared
    assert moe.kernels_per_pass == 6 + 3 * 16 + 58 * 23
    fp8 = model_for("deepseek-v3", "h200", tp=8, weight_dtype="fp8")  # one quantisation kernel per GEMM group
    assert fp8.kernels_per_pass == moe.kernels_per_pass + 3 * (4 + 2) + 58 * (4 + 2 + 2)
    bare = StepTimeModel(moe.deployment, StepTimeParams(kernel_gap_s=0.0))
    one = (1, 1000, 0, 1000, 0, 1)
    assert moe.seconds(*one) - bare.seconds(*one) == pytest.approx(moe.kernels_per_pass * 3.3e-6, rel=1e-9)


def test_amd_decode_gemms_stream_weights_at_the_measured_skinny_gemm_rate():
    mi = model_for("llama-3.1-8b", "mi300x")
    h = model_for("llama-3.1-8b")
    assert mi.efficiency.gemm_hbm == 0.73 < mi.efficiency.hbm  # hipBLASLt at M=1 (efficiency.json rocmskinny)
    assert h.efficiency.gemm_hbm == h.efficiency.hbm  # no separate NVIDIA measurement: the hbm fraction
    assert mi.gemm_byte_rate == pytest.approx(mi.deployment.gpu.hbm_bandwidth_bytes_s * 0.73)


def test_vllm_v0_profile_pays_its_fixed_cpu_time():
    from kneecap.sim.config import VLLM_PROFILE, VLLM_V0_PROFILE, vllm_is_v0

    st = model_for("llama-3.1-8b")
    v0, v1 = st.for_engine(VLLM_V0_PROFILE), st.for_engine(VLLM_PROFILE)
    assert v0.overhead_s == 4e-3 and v1.overhead_s == st.params.overhead_s
    assert v0.seconds(1, 1, 0, 1, 0, 1) - v1.seconds(1, 1, 0, 1, 0, 1) == pytest.approx(2e-3)
    assert [vllm_is_v0(v) for v in ("0.6.3", "0.7", "V0 (Oct 2024)", "0.8.0", "0.17.0", None, "main")] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    # a release tag spelled with its "v": the V0 engine only before 0.8
    assert [vllm_is_v0(v) for v in ("v0.23.0", "v0.7.3", "V0")] == [False, True, True]


def test_blackwell_nvfp4_gemms_run_at_the_measured_fp4_rate_not_twice_fp8():
    fp4 = model_for("llama-3.1-70b", "b200", weight_dtype="nvfp4")
    fp8 = model_for("llama-3.1-70b", "b200", weight_dtype="fp8")
    # vLLM's CUTLASS NVFP4 GEMM on B200 reached 3904 TFLOP/s (efficiency.json vllm20646); MAMF's FP8 best 3432.5
    assert fp8.flop_rate < fp4.flop_rate < 1.2 * fp8.flop_rate
    gb = model_for("llama-3.1-70b", "gb200", weight_dtype="nvfp4")
    assert gb.flop_rate == pytest.approx(0.39 * 1e16)  # the B200's measured TFLOP/s over the GB200's peak


def test_vllm_async_scheduling_releases_overlap_cpu_with_the_gpu():
    from kneecap.sim.config import VLLM_ASYNC_PROFILE, VLLM_PROFILE, vllm_async_by_default

    st = model_for("llama-3.1-8b")
    sync, overlap = st.for_engine(VLLM_PROFILE), st.for_engine(VLLM_ASYNC_PROFILE)
    step = (256, 256 * 1000, 0, 256 * 1000, 0, 256)  # 256 decodes at 1000 tokens of context
    cpu = sync.overhead_s + sync.cpu_per_seq_s * 256
    assert sync.seconds(*step) == pytest.approx(overlap.seconds(*step) + cpu)  # GPU-bound: the CPU time is hidden
    assert [
        vllm_async_by_default(v)
        for v in ("0.13.1", "0.14.0", "0.17.0", "0.23.0", "0.6.3", "V0 (Oct 2024)", None, "main")
    ] == [False, True, True, True, False, False, False, False]


def test_expert_parallel_below_tp_shards_each_expert_over_the_rest():
    full = model_for("qwen3-30b-a3b", tp=4)
    ep2 = StepTimeModel(full.deployment, ep=2)
    assert ep2.expert_bytes == pytest.approx(2 * full.expert_bytes)  # tp/ep = 2 shards of each expert, not 4


def test_steps_outside_a_cuda_graph_last_at_least_the_hosts_kernel_launches():
    """SGLang and TensorRT-LLM's PyTorch executor replay graphs for pure decodes only, vLLM V1 for every step up to its
    largest capture size; a step outside one is launched kernel by kernel from Python (sim/config.py EAGER_LAUNCH_S:
    sgl-project/sglang#1401), and TensorRT-LLM's C++ runtime is never host-bound."""
    from kneecap.sim.config import EAGER_LAUNCH_S, SGLANG_PROFILE, TRTLLM_CPP_PROFILE, VLLM_PROFILE

    base = model_for("llama-3.1-8b", "h200")
    floor = base.kernels_per_pass * EAGER_LAUNCH_S
    assert base.kernels_per_pass == 326 and floor == pytest.approx(8.23e-3)
    prefill = (64, 64 * 65 / 2, 0, 64, 0, 1)  # a 64-token prompt: a few ms of kernels, fewer than its launches
    sg, vl, cpp = (base.for_engine(p) for p in (SGLANG_PROFILE, VLLM_PROFILE, TRTLLM_CPP_PROFILE))
    assert base.seconds(*prefill) < floor
    assert sg.seconds(*prefill) == pytest.approx(max(floor, sg._cpu(1, 1)))  # overlapped host work: the longer
    assert vl.eager_floor(64, 1) == 0.0 and vl.eager_floor(600, 1) == pytest.approx(floor)  # piecewise graphs to 512
    assert cpp.eager_floor(64, 1) == 0.0
    assert sg.eager_floor(8, 8) == 0.0 and sg.eager_floor(200, 200) == pytest.approx(floor)  # decode: above 160 only
