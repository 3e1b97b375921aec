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
    res = simulate_level(
        simkit.sim_of(d, cfg, blocks), Workload.fixed(200, osl), LevelSpec(concurrency=c, num_requests=n)
    )
    return res, summarize_level(res.records, concurrency=c)


def test_tokens_per_step_follow_the_acceptance_rate():
    """Each verify step keeps 1 + the run of accepted drafts, drawn per sequence: over a level the mean is the
    expectation 1 + a + a^2 + a^3 (within 4 standard errors), and the share of steps keeping k tokens is
    a^(k-1) (1 - a) for k <= K, a^K for K + 1."""
    import math
    from collections import Counter

    a, k = 0.7, 3
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=k, acceptance_rate=a)
    assert cfg.tokens_per_decode_step == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    res, summary = run(cfg, n=64)
    gains = []
    for rec in res.records:
        assert sum(rec.chunk_tokens) == rec.output_tokens == 300 and len(rec.chunk_tokens) == len(rec.chunk_times)
        gains += rec.chunk_tokens[1:-1]  # the first comes from the prefill, the last may be cut at the length
    n = len(gains)
    probs = [a ** (j - 1) * (1 - a) for j in range(1, k + 1)] + [a**k]
    mean = sum(j * p for j, p in zip(range(1, k + 2), probs))
    sd = math.sqrt(sum((j - mean) ** 2 * p for j, p in zip(range(1, k + 2), probs)))
    assert abs(sum(gains) / n - cfg.tokens_per_decode_step) < 4 * sd / math.sqrt(n)
    counts = Counter(gains)
    for j, p in zip(range(1, k + 2), probs):
        assert abs(counts[j] / n - p) < 4 * math.sqrt(p * (1 - p) / n), (j, counts[j] / n, p)
    spec = res.server_metrics["spec"]
    assert spec["draft_tokens"] > 0 and spec["acceptance_rate"] == pytest.approx(
        spec["accepted_tokens"] / spec["draft_tokens"]
    )
    assert spec["mean_accepted_length"] == pytest.approx(cfg.tokens_per_decode_step, rel=0.05)


def test_draws_repeat_for_a_seed_and_differ_between_seeds():
    def gains(seed):
        cfg = EngineConfig(
            max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=3, acceptance_rate=0.6, spec_seed=seed
        )
        res, _ = run(cfg, n=16, osl=120)
        return [r.chunk_tokens for r in sorted(res.records, key=lambda r: r.request_id)]

    assert gains(0) == gains(0) and gains(0) != gains(1)


def test_per_position_rates_and_measured_lengths():
    from kneecap.sim.speculative import SpecDecoding, parse_acceptance

    by_pos = SpecDecoding("eagle3", 3, (0.9, 0.5, 0.2))
    assert by_pos.expected_tokens_per_step == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    measured = SpecDecoding("mtp", 2, accepted_lengths=(3, 3, 1, 2))
    assert measured.expected_tokens_per_step == pytest.approx(2.25)
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, speculative=measured)
    res, _ = run(cfg, n=16, osl=200)
    assert {g for r in res.records for g in r.chunk_tokens[1:-1]} <= {1, 2, 3}
    assert parse_acceptance("0.8,0.6,0.4", 3) == ((0.8, 0.6, 0.4), ())
    assert parse_acceptance("lengths.txt", 3, read_file=lambda p: "1\n4 2\n") == ((), (1, 4, 2))
    with pytest.raises(KneecapError):
        SpecDecoding("eagle", 3, accepted_lengths=(5,))  # more than K + 1 tokens in one step
    with pytest.raises(KneecapError):
        SpecDecoding("medusa", 3, (0.5,))


def test_ngram_drafts_cost_no_gpu_pass_and_a_draft_head_holds_kv():
    """n-gram lookup drafts on the CPU: the same acceptance is faster than a GPU draft head's; an EAGLE/MTP head
    keeps one more layer of KV per token, so the same pool holds fewer blocks."""
    from kneecap.sim.speculative import SpecDecoding

    eagle = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, speculative=SpecDecoding("eagle", 3, (0.7,)))
    ngram = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192, speculative=SpecDecoding("ngram", 3, (0.7,)))
    res_e, fast_e = run(eagle)
    res_n, fast_n = run(ngram)
    assert fast_n["output_tok_s"] > fast_e["output_tok_s"]
    assert res_e.server_metrics["num_kv_blocks"] == 40_000 * 32 // 33
    assert res_n.server_metrics["num_kv_blocks"] == 40_000


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
