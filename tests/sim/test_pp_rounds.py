"""Pipeline parallelism as engines run it: a round of pp micro-batches, the slowest stage, the host work on the ring.

Every expected figure below is computed from the step-time model's own pieces (a micro-batch's pass through all
stages, the LM head on the last stage, the host time of one micro-batch), not from a hard-coded number.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.config import TRTLLM_PROFILE
from kneecap.sim.steptime import StepTimeModel


def pp_model(pp, preset="llama-3.1-70b", gpu="rtx-pro-6000", weight_dtype="nvfp4", profile=TRTLLM_PROFILE):
    d = Deployment(model=load_model(preset), gpu=get_gpu(gpu), tp=1, pp=pp, weight_dtype=weight_dtype, kv_dtype="fp8")
    return StepTimeModel(d).for_engine(profile)


def decode_round(st, seqs, ctx, m):
    """Duration of one round of `seqs` decodes at context `ctx` split into m micro-batches."""
    return st.seconds(seqs, seqs * ctx, 0, seqs * ctx, 0, seqs, microbatches=m)


NO_HOST = replace(TRTLLM_PROFILE, cpu_per_seq_s=0.0, cpu_fixed_s=0.0)


def one_pass(st, seqs, ctx):
    """A micro-batch of `seqs` decodes through every stage of `st`, without its host work: the same deployment on
    one GPU (pp = 1, no host time) does the same layers' work, plus the pp - 1 sends of its hidden states."""
    d = st.deployment
    whole = StepTimeModel(replace(d, pp=1)).for_engine(NO_HOST)
    sends = st.pp_latency_s + st.pp_s_per_byte * seqs * st.act_bytes_per_token
    return decode_round(whole, seqs, ctx, 1) + sends


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_the_last_stage_carries_the_lm_head_so_a_round_outlasts_one_pass(pp):
    st = pp_model(pp)
    per_mb, ctx = 64, 1500
    full = one_pass(st, per_mb, ctx)
    head = st._head_seconds(per_mb, per_mb)
    layers = full - head - st.pp_latency_s - st.pp_s_per_byte * per_mb * st.act_bytes_per_token
    # Llama-3.1-70B has 80 layers: an even split, every stage floor(80 / pp) of them, the last one plus the head
    assert st.pp_stage_max_frac == st.pp_stage_last_frac == (80 // pp) / 80
    rnd = decode_round(st, pp * per_mb, ctx, pp)
    # every GPU runs pp micro-batches a round, so the last one's head is paid pp times, not once
    assert rnd >= pp * (layers / pp + head)
    assert rnd > full + (pp - 1) * head * 0.99


def test_uneven_layer_split_gives_the_first_stages_an_extra_layer():
    st = pp_model(8, preset="llama-3.1-405b")  # 126 layers over 8 stages: 16 on six of them, 15 on the last two
    assert st.pp_stage_max_frac == 16 / 126 and st.pp_stage_last_frac == 15 / 126


def test_decode_throughput_at_a_fixed_micro_batch_grows_below_linear_in_stages():
    # trtllm-bench's max_batch_size is per micro-batch (PyTorchModelEngine.get_max_num_sequences = pp x batch): hold
    # it, and each doubling of stages doubles the tokens of a round but not its rate, the head on the last stage and
    # the sends being paid once per micro-batch
    per_mb, ctx = 128, 1500
    tok_s = {pp: pp * per_mb / decode_round(pp_model(pp), pp * per_mb, ctx, pp) for pp in (2, 4, 8)}
    for lo, hi in ((2, 4), (4, 8)):
        assert 1.0 < tok_s[hi] / tok_s[lo] < 2.0


def test_fewer_sequences_than_stages_leave_stages_idle():
    # the bubble: one sequence is one micro-batch, so its token waits for the whole pass; more stages buy nothing
    one = {pp: decode_round(pp_model(pp), 1, 1000, 1) for pp in (1, 2, 8)}
    assert one[2] >= one[1] * 0.999 and one[8] >= one[2] * 0.999
    two = pp_model(8)
    # two sequences in eight stages: two micro-batches on a ring of one pass each, no faster per token than one
    assert decode_round(two, 2, 1000, 2) == pytest.approx(one_pass(two, 1, 1000) + two._cpu(2, 2) / 2, rel=1e-9)


def test_the_host_work_of_a_micro_batch_sits_on_the_ring():
    # a micro-batch's tokens come back to the first rank, which updates its requests and schedules it again
    # before it can run: with a slow host that time adds to the pass instead of hiding under other stages' work
    fast = pp_model(4)
    slow_profile = replace(TRTLLM_PROFILE, cpu_per_seq_s=200e-6)
    slow = pp_model(4, profile=slow_profile)
    per_mb, ctx = 64, 1500
    r_fast, r_slow = decode_round(fast, 4 * per_mb, ctx, 4), decode_round(slow, 4 * per_mb, ctx, 4)
    cpu_one = slow._cpu(4 * per_mb, 4) / 4
    assert r_slow >= one_pass(slow, per_mb, ctx) + cpu_one
    assert r_slow > r_fast
    # and one scheduler thread does all four micro-batches' host work each round
    assert r_slow >= slow._cpu(4 * per_mb, 4)


def test_a_run_of_decode_steps_prices_rounds_as_single_steps_do():
    st = pp_model(4)
    ctx = np.full(256, 1200)
    run = st.decode_run_seconds(256, ctx, 3)
    single = [st.seconds(256, 256 * (1200 + j), 0, 256 * (1200 + j), 0, 256) for j in range(3)]
    # the run prices decode attention at its middle step's kernel-table rate, a step alone at its own
    assert run == pytest.approx(single, rel=1e-4)
    assert run[1] == pytest.approx(single[1], rel=1e-9)


def test_tensorrt_llm_defaults_cap_each_micro_batch():
    # max_batch_size bounds a micro-batch: pp stages hold pp x 2048 requests in all (get_max_num_sequences)
    from kneecap.plan.build import DeploymentRequest
    from kneecap.sim.config import trtllm_defaults
    from kneecap.sim.setup import simulated_deployment

    assert trtllm_defaults(pp=4).max_num_seqs == 4 * trtllm_defaults().max_num_seqs
    req = DeploymentRequest(
        model="llama-3.1-70b", gpu="rtx-pro-6000", tp=1, pp=4, weight_dtype="nvfp4", kv_dtype="fp8", context=2000
    )
    assert simulated_deployment(req, defaults="trtllm").config.max_num_seqs == 4 * trtllm_defaults().max_num_seqs
    assert (
        simulated_deployment(req, defaults="vllm").config.max_num_seqs
        == simulated_deployment(replace(req, pp=1, tp=4), defaults="vllm").config.max_num_seqs
    )  # vLLM: over all


def test_tensorrt_llm_ranks_wait_for_their_own_stage_before_the_next_micro_batch():
    # TensorRT-LLM's PyTorch executor synchronises every rank but the last on its stage's forward
    # (_forward_step_inter_pp: sampler_event.synchronize()) before that rank's host updates and prepares the next
    # micro-batch, so a stage lasts its GPU time plus one micro-batch's host time; engines whose host overlaps its
    # GPU (the C++ runtime, vLLM's batch queue) keep the stage's GPU time alone
    pp, per_mb, ctx = 8, 250, 1500
    synced = pp_model(pp)
    overlapped = pp_model(pp, profile=replace(TRTLLM_PROFILE, pp_host_sync=False))
    full = one_pass(synced, per_mb, ctx)
    sends = synced.pp_latency_s + synced.pp_s_per_byte * per_mb * synced.act_bytes_per_token
    head = synced._head_seconds(per_mb, per_mb) + 6 * synced.params.kernel_gap_s
    layers = full - sends - head
    cpu = synced._cpu(pp * per_mb, pp)
    stage_gpu = max(layers * synced.pp_stage_max_frac, layers * synced.pp_stage_last_frac + head)
    r_synced = decode_round(synced, pp * per_mb, ctx, pp)
    r_overlapped = decode_round(overlapped, pp * per_mb, ctx, pp)
    # the host work of this micro-batch size outlasts nothing alone: without the sync the ring binds, not the stage
    assert r_overlapped == pytest.approx(max(pp * (stage_gpu + sends / (pp - 1)), full + cpu / pp, cpu), rel=1e-9)
    # with it, every rank before the last pays its host work once per micro-batch, pp times a round
    first = layers * synced.pp_stage_max_frac + cpu / pp + sends / (pp - 1)
    assert r_synced == pytest.approx(pp * first, rel=1e-9)
    assert r_synced > r_overlapped + (pp - 1) * cpu / pp * 0.5


def test_the_host_sync_costs_nothing_without_pipeline_stages():
    # pp = 1 never enters the pipeline round: the overlap scheduler's step is max(gpu, cpu) with or without the flag
    one = pp_model(1)
    plain = pp_model(1, profile=replace(TRTLLM_PROFILE, pp_host_sync=False))
    assert decode_round(one, 256, 1500, 1) == decode_round(plain, 256, 1500, 1)
