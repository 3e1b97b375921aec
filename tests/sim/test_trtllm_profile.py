"""TensorRT-LLM as the simulator runs it: prompts not chunked by default, the runtime's host time by release."""

from __future__ import annotations

import pytest

from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import TRTLLM_CPP_PROFILE, TRTLLM_PROFILE, EngineConfig, trtllm_defaults, trtllm_is_cpp_runtime
from kneecap.sim.scheduler import BLOCKED_BUDGET, Scheduler, Sequence
from kneecap.workload import RequestSpec


def _scheduler(chunked: bool, prompts=(3000, 3000), budget: int = 4096) -> Scheduler:
    cfg = EngineConfig(
        name="custom",
        max_num_seqs=64,
        max_num_batched_tokens=budget,
        enable_prefix_caching=False,
        chunked_prefill=chunked,
    )
    sched = Scheduler(cfg, BlockManager(10_000, 16, enable_prefix_caching=False))
    for i, n in enumerate(prompts):
        sched.add(
            Sequence(RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=n, output_tokens=4), 0.0, 16)
        )
    return sched


def _steps(sched: Scheduler, n: int) -> list[list[tuple[str, int]]]:
    out = []
    for _ in range(n):
        batch = sched.schedule()
        out.append([(s.rid, k) for s, k in batch.prefills])
        for seq, k in batch.prefills:
            seq.num_computed += k
    return out


def test_without_chunking_a_prompt_runs_whole_or_waits():
    # TensorRT-LLM MicroBatchScheduler "skip chunking": a context is scheduled only if all its tokens fit
    # max_num_tokens; the FCFS queue behind it waits with it
    sched = _scheduler(chunked=False)
    assert sched.schedule().blocked == BLOCKED_BUDGET
    assert _steps(_scheduler(chunked=False), 2) == [[("r0", 3000)], [("r1", 3000)]]
    # chunked (vLLM V1): the second prompt's first 1,096 tokens fill the first step, the rest the next
    assert _steps(_scheduler(chunked=True), 2) == [[("r0", 3000), ("r1", 1096)], [("r1", 1904)]]


def test_a_prompt_longer_than_the_token_budget_is_still_chunked():
    # TensorRT-LLM rejects a prompt over max_num_tokens without chunking; the simulator chunks it rather than stall
    assert _steps(_scheduler(chunked=False, prompts=(6000,)), 2) == [[("r0", 4096)], [("r0", 1904)]]


def test_trtllm_defaults_do_not_chunk_and_name_the_pytorch_backend():
    cfg = trtllm_defaults()
    assert cfg.chunked_prefill is False and cfg.profile is TRTLLM_PROFILE
    assert EngineConfig().chunked_prefill is True  # vLLM V1 always chunks


@pytest.mark.parametrize(
    "version,cpp",
    [
        ("0.5", True),
        ("0.6.1", True),
        ("0.16.0", True),
        ("0.17.0", False),
        ("0.21.0rc2", False),
        ("1.0.0", False),
        (None, False),
        ("v0.9.0", True),
    ],
)
def test_cpp_runtime_by_release(version, cpp):
    assert trtllm_is_cpp_runtime(version) is cpp


def test_validation_runs_cpp_releases_and_nim_without_the_pytorch_executors_host_time():
    from kneecap.validation import load_points, sim_deployment

    points = {p.id: p for p in load_points()}
    cases = {
        "trtllm061-llama-2-7b-h100-sxm-tp1-bs768-128-128-output_tok_s_per_gpu": (TRTLLM_CPP_PROFILE, False),
        "trtllm05-llama-2-7b-h100-sxm-tp1-bs1-128-1-ttft_ms_mean": (TRTLLM_CPP_PROFILE, False),
        "nim-llama-3.3-70b-h100-tp2-fp8-5000-500-c1-output_tok_s": (TRTLLM_CPP_PROFILE, False),
        "trtllm-issue5929-deepseek-r1-h200-tp8-fp8-bs1-1600-600-ttft_s_p50": (TRTLLM_PROFILE, False),  # trtllm-serve
        "trtllm-llama-3.1-8b-h100-sxm-tp1-fp8-5000-500": (TRTLLM_PROFILE, True),
    }  # trtllm-bench chunks
    for pid, (profile, chunked) in cases.items():
        cfg = sim_deployment(points[pid]).config
        assert cfg.profile is profile and cfg.chunked_prefill is chunked, pid
    # trtllm-bench's own limits leave a 5,000-token prompt over max_num_tokens: only chunked prefill runs it
    bench = points["trtllm-llama-3.1-8b-h100-sxm-tp1-fp8-5000-500"]
    assert sim_deployment(bench).config.max_num_batched_tokens < bench.isl
    assert TRTLLM_CPP_PROFILE.cpu_per_seq_s == 0.0 and TRTLLM_PROFILE.cpu_per_seq_s == pytest.approx(28e-6)


def test_pytorch_executor_launches_eager_steps_on_the_thread_of_its_host_work():
    """TensorRT-LLM's overlap loop schedules, launches the forward and handles the previous step's responses on one
    Python thread (sim/config.py TRTLLM_SERIAL_HOST_NOTE): a prefill step outside a CUDA graph keeps that thread busy
    for its launches plus its per-request work; SGLang launches from a thread of its own, so the longer of the two."""
    from kneecap.deployment import Deployment
    from kneecap.hardware import get_gpu
    from kneecap.model import load_model
    from kneecap.sim.config import SGLANG_PROFILE
    from kneecap.sim.steptime import StepTimeModel

    base = StepTimeModel(Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("h200")))
    trt, sg = base.for_engine(TRTLLM_PROFILE), base.for_engine(SGLANG_PROFILE)
    launches = trt.kernels_per_pass * TRTLLM_PROFILE.eager_launch_s  # 326 kernels x 25 us = 8.2 ms
    seqs = 300  # a 64-token prompt joining 299 decodes at context 100: a few ms of GPU work
    step = (64 + 299, 64 * 65 / 2 + 299 * 100, 0, 299 * 100 + 64, 0, seqs)
    kw = dict(num_decodes=299, decode_kv_full=299 * 100.0, decode_kv_window=0.0)
    host = trt._cpu(seqs, 1)  # 2 ms + 300 x 28 us = 10.4 ms
    gpu = base.seconds(*step, **kw) - base._cpu(seqs, 1)  # about 14 ms of kernels
    assert trt.eager_floor(363, seqs) == pytest.approx(launches)
    assert host < gpu and launches < gpu < host + launches  # each alone hides under the GPU's step, not both
    assert trt.seconds(*step, **kw) == pytest.approx(host + launches)  # one thread: 18.6 ms, not max(...) = 14.3
    assert sg.seconds(*step, **kw) < host + launches  # SGLang: its launches and its host work side by side
    # a pure decode replays its CUDA graph: nothing launched op by op, the host work alone against the GPU's
    decode = (seqs, seqs * 100.0, 0, seqs * 100.0, 0, seqs)
    assert trt.eager_floor(seqs, seqs) == 0.0
    assert trt.seconds(*decode) == pytest.approx(max(host, base.seconds(*decode) - base._cpu(seqs, 1)))
    assert TRTLLM_PROFILE.serial_host_launch and not SGLANG_PROFILE.serial_host_launch
    assert not TRTLLM_CPP_PROFILE.eager_launch_s  # the C++ runtime: launches from C++, not host-bound
