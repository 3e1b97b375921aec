"""Speculative decoding as the server counts it, read from /metrics: vLLM's spec_decode counters (recorded from the
vLLM CPU build 0.32.0 serving the tests' tiny model with n-gram speculation, 3 draft tokens: before and after four
completions, tests/client/data/vllm_0.32.0_cpu_ngram_metrics_*.txt) and SGLang's accept-length gauges."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneecap.client.server_metrics import sample_from_text, summarize_samples

DATA = Path(__file__).parent / "data"


def test_vllm_counters_give_the_level_acceptance():
    before = sample_from_text((DATA / "vllm_0.32.0_cpu_ngram_metrics_before.txt").read_text(), at_s=0.0)
    after = sample_from_text((DATA / "vllm_0.32.0_cpu_ngram_metrics_after.txt").read_text(), at_s=1.0)
    assert before.engine == "vllm" and (before.spec_drafts_total, before.spec_accepted_total) == (0.0, 0.0)
    # the recorded counters: 20 drafts of 52 draft tokens, 40 accepted
    assert (after.spec_drafts_total, after.spec_draft_tokens_total, after.spec_accepted_total) == (20.0, 52.0, 40.0)
    spec = summarize_samples([before, after]).to_dict()["spec"]
    assert spec["draft_tokens"] == 52 and spec["accepted_tokens"] == 40
    assert spec["acceptance_rate"] == pytest.approx(40 / 52, abs=1e-6)
    assert spec["mean_accepted_length"] == pytest.approx(1 + 40 / 20)  # vLLM's formula: the bonus token included
    assert "vllm" in spec["source"]


def test_no_speculation_no_spec():
    text = (DATA / "vllm_0.32.0_cpu_ngram_metrics_before.txt").read_text()
    assert summarize_samples([sample_from_text(text), sample_from_text(text)]).spec is None  # no draft in the level
    llamacpp = sample_from_text((DATA / "llamacpp_metrics.txt").read_text())
    assert summarize_samples([llamacpp, llamacpp]).spec is None


def test_sglang_gauges_are_averaged_over_the_level():
    """SGLang (python/sglang/srt/metrics/collector.py) publishes the mean accepted length and the acceptance rate
    as gauges, not counters: the level's figure is their mean over its scrapes."""

    def text(length: float, rate: float) -> str:
        labels = '{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"}'
        return (
            f"sglang:num_running_reqs{labels} 3\nsglang:spec_accept_length{labels} {length}\n"
            f"sglang:spec_accept_rate{labels} {rate}\n"
        )

    samples = [sample_from_text(text(2.5, 0.5), 0.0), sample_from_text(text(3.5, 0.7), 1.0)]
    spec = summarize_samples(samples).spec
    assert spec["mean_accepted_length"] == pytest.approx(3.0) and spec["acceptance_rate"] == pytest.approx(0.6)
    assert spec["draft_tokens"] is None and "gauges" in spec["source"]
