"""SGLang's weight load as PyTorch's caching allocator reserves it (plan/sglang_load.py), against hand-computed
segments and the "Load weight end. ... mem usage" figures SGLang logged (the allocator's rules:
test_plan_caching_allocator.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.model import load_model
from kneecap.plan.engines import sglang_rope_cache_bytes, sglang_rope_temp_bytes
from kneecap.plan.sglang_load import load_overhead_bytes

GiB = 2**30
QWQ = str(Path(__file__).parent / "configs" / "Qwen--QwQ-32B.json")


def _loaded(spec: str, tp: int) -> tuple[int, int, int]:
    m = load_model(spec)
    rope = sglang_rope_cache_bytes(m, "0.4.4")
    weights = m.total_params * 2 // tp
    return weights, rope, load_overhead_bytes(m, tp, "bf16", weights, rope, sglang_rope_temp_bytes(m))


def test_qwq_32b_at_tp_4_reserves_what_sglang_logged():
    # per rank: qkv_proj (1,280 + 2 x 256) x 5,120 x 2 B = 17.5 MiB -> 18, o_proj 12.5 -> 14, gate_up 135 -> 136,
    # down 67.5 -> 68 MiB: 3.5 MiB a layer x 64 = 224 MiB, embedding and lm_head 371.25 -> 372 MiB each, and the
    # norms' and biases' small segment; the 4 x L4 log (SGLang 0.4.3.post4 image, default allocator) says
    # "Load weight end. ... mem usage=15.54 GB"
    weights, rope, extra = _loaded(QWQ, 4)
    assert extra == 237_991_424  # 226.97 MiB
    assert round((weights + rope + extra) / GiB, 2) == 15.54
    assert round((weights + rope) / GiB, 2) == 15.32  # without the allocator's rounding: 0.22 GiB short


def test_llama_3_1_8b_at_tp_1_has_nothing_to_round():
    # every Llama-3.1-8B tensor is a whole number of 2 MiB (qkv 48, o 32, gate_up 224, down 112, embedding 1,002 MiB):
    # only the norms' 2 MiB small segment is left, so the 0.09 GiB the H100 log holds beyond kneecap's figure is not
    # the allocator's
    weights, rope, extra = _loaded("llama-3.1-8b", 1)
    assert extra == 1_564_672
    assert round((weights + rope + extra) / GiB, 2) == 15.02


@pytest.mark.parametrize(
    "spec, tp, dtype",
    [("qwen3-235b-a22b", 4, "bf16"), ("llama-3.1-8b", 1, "fp8"), ("llama-3.1-8b", 3, "bf16")],
)
def test_what_is_not_modelled_returns_none(spec, tp, dtype):
    # another model file (an MoE), a quantized checkpoint, a TP size the heads do not divide into
    m = load_model(spec)
    assert load_overhead_bytes(m, tp, dtype, m.total_params * 2 // tp, 0, 0) is None


def test_engine_mode_takes_the_replay_out_of_the_pool_and_prints_it(cli):
    # the same figure in the JSON the pool uses and in the weights line, which sums to the logged 15.54 GiB
    args = ["plan", "--model", QWQ, "--tp", "4", "--gpu", "l4", "--engine", "sglang", "--engine-version", "0.4.3"]
    eng = json.loads(cli(*args, "--json").stdout)["engine"]
    assert eng["load_extra_bytes"] == 237_000_704  # the norms each rank holds whole are in the weights
    text = " ".join(cli(*args).stdout.split())
    assert "+ 226.0 MiB as SGLang allocates them" in text
    assert "= 15.54 GiB ('Load weight end' mem usage)" in text
