"""vLLM's block size with --engine vllm: 16, except where a release forces its MLA attention backend's block."""

from __future__ import annotations

import pytest

from kneecap.model import load_model
from kneecap.plan import engines
from kneecap.plan.build import DeploymentRequest, plan_deployment


def _plan(**kw):
    base = dict(model="deepseek-v3", gpu="h200", tp=8, engine="vllm")
    return plan_deployment(DeploymentRequest(**{**base, **kw})).plan


def test_deepseek_v3_on_h200_under_vllm_0_11_is_laid_out_in_flashmla_blocks_of_64():
    plan = _plan(engine_version="0.11")
    assert plan.block_size == 64
    assert plan.num_kv_blocks * 64 == plan.kv_capacity_tokens


def test_an_explicit_block_size_wins_where_the_engine_keeps_it():
    assert _plan(engine_version="0.19", block_size=32).block_size == 32


def test_a_dense_model_keeps_16_token_blocks():
    assert _plan(model="llama-3.1-70b", engine_version="0.11").block_size == 16


def test_from_0_18_hopper_takes_flashattention_mla_and_16_token_blocks():
    assert _plan(engine_version="0.19").block_size == 16
    assert _plan(engine_version="0.19", kv_dtype="fp8").block_size == 64  # FlashMLA: FA MLA caches 16-bit only


def test_the_ledger_without_an_engine_keeps_16():
    assert _plan(engine=None).block_size == 16


@pytest.mark.parametrize(
    "gpu, version, kv_dtype, block",
    [
        ("h100-sxm", "0.10", "bf16", 64),
        ("h200", "0.17", "bf16", 64),
        ("h200", "0.32", "bf16", 16),
        ("a100-80", "0.11", "bf16", 16),  # FlashMLA needs compute capability 9.x
        ("rtx-5090", "0.11", "bf16", 16),
        ("b200", "0.10", "bf16", 16),  # CUTLASS MLA only when asked for
        ("b200", "0.11", "bf16", 128),  # CUTLASS MLA by default on Blackwell
        ("b200", "0.14", "bf16", 128),
        ("b200", "0.15", "bf16", 64),  # FlashInfer MLA for qk_nope_head_dim 128
        ("b200", "0.19", "fp8", 32),  # FlashInfer MLA's smallest kernel block
        ("h200", "0.8", "bf16", 64),
        ("h200", "0.7", "bf16", 16),  # 0.7.3 forces no MLA block size
    ],
)
def test_vllm_mla_block_size_by_gpu_and_release(gpu, version, kv_dtype, block):
    assert engines.vllm_block_size(load_model("deepseek-v3"), gpu, version, kv_dtype) == block


def test_the_fp8_kv_lever_counts_the_block_vllm_picks_for_an_fp8_cache():
    from kneecap.plan.levers import compute_levers

    plan = _plan(engine_version="0.32", context=2000)
    lever = next(lv for lv in compute_levers(plan) if lv.name == "fp8-kv")
    flagged = _plan(engine_version="0.32", context=2000, kv_dtype="fp8")
    assert (plan.block_size, flagged.block_size) == (16, 64)
    assert lever.max_seqs == flagged.max_seqs_paged


@pytest.mark.parametrize(
    "gpu, version, passed, block",
    [
        ("h200", "0.11", 16, 64),  # 0.8-0.11: FlashMLA takes 64 only
        ("h200", "0.11", 128, 64),
        ("h100-sxm", "0.8", 32, 64),
        ("h200", "0.12", 128, 128),  # 0.12-0.17: a multiple of 64 is kept
        ("h200", "0.17", 16, 64),
        ("b200", "0.11", 64, 128),  # CUTLASS MLA
        ("b200", "0.14", 256, 256),
        ("b200", "0.15", 32, 32),  # FlashInfer MLA takes 32 or a multiple of 64
        ("b200", "0.15", 16, 64),
        ("b200", "0.10", 32, 32),  # no backend forced on Blackwell before 0.11
        ("a100-80", "0.11", 16, 16),  # FlashMLA needs compute capability 9.x
        ("h200", "0.19", 16, 16),  # from 0.18 the user's block is kept
        ("h200", "0.7", 16, 16),
    ],
)
def test_vllm_overrides_a_passed_block_size_its_mla_backend_cannot_use(gpu, version, passed, block):
    got, why = engines.vllm_engine_block_size(load_model("deepseek-v3"), gpu, version, passed)
    assert got == block
    assert (why is None) == (block == passed)


def test_the_plan_counts_the_engines_block_and_says_it_overrode_the_users():
    plan = _plan(engine_version="0.11", block_size=16)
    assert plan.block_size == 64 and plan.block_size_requested == 16
    assert plan.num_kv_blocks * 64 == plan.kv_capacity_tokens
    out = plan.to_json()
    assert (out["block_size"], out["block_size_requested"]) == (64, 16)
    assert any("overrides --block-size 16 with 64" in n and "FlashMLA" in n for n in out["notes"])


def test_the_plan_text_names_the_override(cli):
    r = cli(
        "plan", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "vllm", "--engine-version", "0.11",
        "--block-size", "16", "--context", "8192",
    )  # fmt: skip
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "64-token blocks (the engine overrides --block-size 16" in text
    assert "FlashMLA, needs blocks of 64 tokens" in text


def test_an_explicit_block_size_the_engine_honours_is_kept_without_a_note():
    plan = _plan(engine_version="0.12", block_size=128)
    assert (plan.block_size, plan.block_size_requested) == (128, None)
    assert not any("overrides --block-size" in n for n in plan.notes)
