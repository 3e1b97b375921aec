"""The scheduler's decodes-in-one-go branch builds exactly the batches its per-sequence loop builds: the same
records (every token time), the same per-step trace and counters, with and without preemption, sliding
windows, shared prefixes and SGLang's reserve."""

from __future__ import annotations

import pytest
from simkit import deployment, sim_of, tiny_model

from kneecap.model import load_model
from kneecap.sim.config import EngineConfig
from kneecap.sim.scheduler import Scheduler
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload

WL = Workload(
    classes=(
        RequestClass(
            input=LengthDist(kind="uniform", low=20, high=700),
            output=LengthDist(kind="uniform", low=2, high=250),
            shared_prefix_tokens=40,
            num_prefix_groups=2,
        ),
    )
)
SGLANG = {"init_new_token_ratio": 0.7, "min_new_token_ratio": 0.1, "new_token_ratio_decay": 0.01}


def _run(monkeypatch, at_once: bool, model, num_blocks, cfg, level, fast_path):
    monkeypatch.setattr(Scheduler, "decodes_at_once", at_once)
    d = deployment(model=model, block_size=16)
    return simulate_level(
        sim_of(d, cfg, num_blocks), WL, level, seed=11, trace=True, fast_path=fast_path, token_times=True
    )


@pytest.mark.parametrize("model", [tiny_model(), load_model("gemma-3-27b")], ids=["dense", "sliding-window"])
@pytest.mark.parametrize("num_blocks", [30000, 400])
@pytest.mark.parametrize("extra", [{}, SGLANG], ids=["vllm", "sglang"])
@pytest.mark.parametrize("fast_path", [True, False])
def test_decodes_at_once_equals_the_loop(monkeypatch, model, num_blocks, extra, fast_path):
    cfg = EngineConfig(max_num_seqs=24, max_num_batched_tokens=512, **extra)
    for level in (LevelSpec(concurrency=20, num_requests=80), LevelSpec(rate=30.0, num_requests=80)):
        a = _run(monkeypatch, True, model, num_blocks, cfg, level, fast_path)
        b = _run(monkeypatch, False, model, num_blocks, cfg, level, fast_path)
        assert a.server_metrics == b.server_metrics
        assert a.trace == b.trace
        assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
        if num_blocks == 400 and not extra:
            assert a.server_metrics["preemptions"] > 0  # the tight pool really preempts
