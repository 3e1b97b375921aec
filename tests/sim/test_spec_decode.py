"""Speculative decoding in the simulated engine: tokens per step = 1 + accepted drafts (expected 1 + a + ... + a^k),
the verify pass and the draft cost priced, records with one chunk per step carrying its token count, block
invariants under preemption."""

from __future__ import annotations

import pytest
import simkit

from kneecap.errors import KneecapError
from kneecap.metrics.summarize import summarize_level
from kneecap.sim.config import EngineConfig
from kneecap.sim.engine import Engine
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import Workload, make_requests


def run(cfg, c=8, n=32, osl=300, blocks=40_000, preset=None):
    from kneecap.hardware import get_gpu
    from kneecap.model import load_model
    from kneecap.deployment import Deployment

    d = Deployment(model=load_model(preset or "llama-3.1-8b"), gpu=get_gpu("h100-sxm"))
    res = simulate_level(simkit.sim_of(d, cfg, blocks), Workload.fixed(200, osl), LevelSpec(concurrency=c, num_requests=n))
    return res, summarize_level(res.records, concurrency=c)


def test_tokens_per_step_follow_the_acceptance_rate():
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=3, acceptance_rate=0.7)
    assert cfg.tokens_per_decode_step == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    res, _ = run(cfg)
    for rec in res.records:
        assert sum(rec.chunk_tokens) == rec.output_tokens == 300 and len(rec.chunk_tokens) == len(rec.chunk_times)
        decode = rec.chunk_tokens[1:-1]  # the first comes from the prefill, the last may be cut at the length
        assert sum(decode) / len(decode) == pytest.approx(cfg.tokens_per_decode_step, abs=0.02)


def test_speculation_pays_only_when_drafts_are_accepted():
    base = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192)
    _, plain = run(base)
    _, good = run(EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=3, acceptance_rate=0.8))
    _, bad = run(EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=3, acceptance_rate=0.0))
    assert good["output_tok_s"] > 2.0 * plain["output_tok_s"]  # memory-bound decode: ~2.95 tokens per weight read
    assert bad["output_tok_s"] < plain["output_tok_s"]  # the verify pass and the drafts cost, nothing is gained


def test_block_invariants_hold_with_speculation_and_preemption():
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096, spec_tokens=2, acceptance_rate=0.9)
    d = simkit.deployment()
    engine = Engine(d, cfg, num_blocks=120)  # 1,920 tokens for 16 x (100 + 150): preemption must happen
    specs = make_requests(Workload.fixed(100, 150), 16, seed=0)
    records, _ = simkit.run_checked(engine, [(0.0, s) for s in specs])
    assert len(records) == 16 and engine.stats.preemptions > 0
    assert all(sum(r.chunk_tokens) == r.output_tokens == 150 for r in records)


@pytest.mark.parametrize("field,value", [("spec_tokens", -1), ("acceptance_rate", 1.5)])
def test_bad_speculation_settings_are_errors(field, value):
    with pytest.raises(KneecapError):
        EngineConfig(**{field: value})
