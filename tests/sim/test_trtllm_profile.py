"""TensorRT-LLM as the simulator runs it: prompts not chunked by default, the runtime's host time by release."""

from __future__ import annotations

from dataclasses import replace

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
        "trtllm-llama-3.1-8b-h100-sxm-tp1-fp8-5000-500": (replace(TRTLLM_PROFILE, cudagraph_sizes=()), True),
    }  # trtllm-bench chunks, and captures every decode batch up to its own max_batch_size
    for pid, (profile, chunked) in cases.items():
        cfg = sim_deployment(points[pid]).config
        assert cfg.profile == profile and cfg.chunked_prefill is chunked, pid
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
    decode = (128, 128 * 100.0, 0, 128 * 100.0, 0, 128)  # 128: a size the LLM API captures by default
    assert trt.eager_floor(128, 128) == 0.0
    assert trt.seconds(*decode) == pytest.approx(max(trt._cpu(128, 1), base.seconds(*decode) - base._cpu(128, 1)))
    assert TRTLLM_PROFILE.serial_host_launch and not SGLANG_PROFILE.serial_host_launch
    assert not TRTLLM_CPP_PROFILE.eager_launch_s  # the C++ runtime: launches from C++, not host-bound


def test_llm_api_graphs_decodes_of_its_default_capture_sizes_only_and_does_not_pad():
    """TensorRT-LLM's default CudaGraphConfig captures batch sizes 1-31, 32, 64 and 128 without padding: a decode batch
    of another size runs eagerly, its kernels launched on the executor's thread; trtllm-bench captures every size up to
    its own max_batch_size."""
    import numpy as np

    from kneecap.deployment import Deployment
    from kneecap.hardware import get_gpu
    from kneecap.model import load_model
    from kneecap.sim.config import trtllm_cudagraph_sizes
    from kneecap.sim.steptime import StepTimeModel
    from kneecap.validation import load_points, sim_deployment

    assert TRTLLM_PROFILE.cudagraph_sizes == trtllm_cudagraph_sizes() == tuple(range(1, 32)) + (32, 64, 128)
    trt = StepTimeModel(Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("h200"))).for_engine(TRTLLM_PROFILE)
    launches = trt.kernels_per_pass * TRTLLM_PROFILE.eager_launch_s
    assert [trt.eager_floor(n, n) for n in (1, 31, 32, 64, 128)] == [0.0] * 5
    assert [trt.eager_floor(n, n) for n in (33, 40, 100, 129, 1000)] == pytest.approx([launches] * 5)
    assert trt.padded(40, 40) == 40  # no padding: 40 rows, run eagerly
    for n in (32, 40):  # a run of decode steps is priced as the same steps one by one
        ctx = np.full(n, 500)
        run = trt.decode_run_seconds(n, ctx, 3)
        one = [trt.seconds(n, n * (500.0 + j), 0, n * (500.0 + j), 0, n) for j in range(3)]
        assert run.tolist() == pytest.approx(one, rel=1e-6)
    eager40 = trt.seconds(40, 40 * 500.0, 0, 40 * 500.0, 0, 40)
    assert eager40 == pytest.approx(max(eager40, trt._cpu(40, 1) + launches)) and eager40 >= trt._cpu(40, 1) + launches
    assert trt.seconds(32, 32 * 500.0, 0, 32 * 500.0, 0, 32) < trt._cpu(32, 1) + launches  # graph replay: no launches
    # trtllm-bench's runs: graphs up to their own max_batch_size (1,792 sequences here)
    points = {p.id: p for p in load_points()}
    bench = sim_deployment(points["trtllm-qwen3-30b-a3b-b200-tp1-nvfp4-1000-1000"])
    assert bench.config.profile.cudagraph_sizes == () and bench.config.max_num_seqs == 1792
    assert bench.steptime.for_engine(bench.config.profile).eager_floor(1500, 1500) == 0.0
