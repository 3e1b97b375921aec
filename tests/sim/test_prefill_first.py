"""SGLang's prefill-first scheduling (EngineConfig.mixed_prefill_decode False): a step that can take prompt tokens runs
them alone, the running decodes wait for the next step; vLLM and TensorRT-LLM mix them in one step."""

from __future__ import annotations

from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import EngineConfig, engine_defaults, sglang_defaults
from kneecap.sim.scheduler import BLOCKED_SEQS, Scheduler
from simkit import apply_step as _run
from simkit import sched_seq as _seq


def _steps(mixed: bool, max_seqs: int = 64) -> list[tuple[list[str], list[tuple[str, int]]]]:
    cfg = EngineConfig(name="custom", max_num_seqs=max_seqs, max_num_batched_tokens=256, mixed_prefill_decode=mixed)
    sched = Scheduler(cfg, BlockManager(1000, 16, enable_prefix_caching=False))
    sched.add(_seq(0, 100))
    out = []
    for step in range(4):
        if step == 1:  # a second request arrives while the first decodes
            sched.add(_seq(1, 100))
        batch = sched.schedule()
        out.append(([s.rid for s in batch.decodes], [(s.rid, k) for s, k in batch.prefills]))
        _run(batch)
    return out


def test_mixed_steps_run_the_new_prompt_beside_the_decodes():
    assert _steps(mixed=True) == [
        ([], [("r0", 100)]),
        (["r0"], [("r1", 100)]),
        (["r0", "r1"], []),
        (["r0", "r1"], []),
    ]


def test_prefill_first_runs_the_new_prompt_alone_and_the_decodes_wait():
    assert _steps(mixed=False) == [
        ([], [("r0", 100)]),
        ([], [("r1", 100)]),  # r0's decode waits a step
        (["r0", "r1"], []),
        (["r0", "r1"], []),
    ]


def test_a_blocked_admission_lets_the_decodes_run_and_says_why():
    cfg = EngineConfig(name="custom", max_num_seqs=1, max_num_batched_tokens=256, mixed_prefill_decode=False)
    sched = Scheduler(cfg, BlockManager(1000, 16, enable_prefix_caching=False))
    sched.add(_seq(0, 100))
    _run(sched.schedule())
    sched.add(_seq(1, 100))
    batch = sched.schedule()
    assert [s.rid for s in batch.decodes] == ["r0"] and not batch.prefills
    assert batch.blocked == BLOCKED_SEQS


def test_sglang_defaults_are_prefill_first_and_the_others_mix():
    kw = dict(device_bytes=80 * 2**30, gpu_name="h100-sxm", pool_tokens=100_000, context_len=4096)
    assert sglang_defaults(80 * 2**30, 100_000, 4096).mixed_prefill_decode is False
    assert engine_defaults("sglang", **kw).mixed_prefill_decode is False
    assert engine_defaults("vllm", **kw).mixed_prefill_decode is True
    assert engine_defaults("trtllm", **kw).mixed_prefill_decode is True
