"""What a new user reads first in `kneecap plan`: no worst-case number headlined as the answer, levers whose
printed flags reproduce their rows, one size per sequence, and a context sweep that stops at the model's
maximum. Every check runs the real CLI."""

from __future__ import annotations

import json

import pytest
from plan_helpers import run_kneecap

LLAMA_70B_FP8 = ["plan", "--preset", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8", "--weight-dtype", "fp8"]


def _text(*args: str) -> str:
    """The worksheet with rich's line wrapping undone (one space between words)."""
    r = run_kneecap(*args)
    assert r.code == 0, r.stderr
    return " ".join(r.stdout.split())


def _json(*args: str) -> dict:
    r = run_kneecap(*args, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_without_mean_context_the_worst_case_is_not_the_headline():
    text = _text(*LLAMA_70B_FP8)
    doc = _json(*LLAMA_70B_FP8)
    assert doc["max_seqs"] == {"contiguous": 11, "paged": 11} and doc["worst_case"] is True  # the contract keys stay
    # 2,000 tokens = 125 whole 16-token blocks, so the pool's tokens / 2,000 is the paged count at that mean
    at_2000 = doc["kv_capacity_tokens"] // 2000
    assert at_2000 == 772
    assert {p["mean_context"]: p["max_seqs"] for p in doc["paged_at_mean_context"]}[2000] == at_2000
    assert "Configure max concurrent sequences" not in text
    assert "at a 2,000-token mean, 772" in text and "--mean-context N" in text
    assert "mean 2,000 tokens → 772 sequences" in text


def test_with_mean_context_the_number_to_configure_is_printed():
    assert "Configure max concurrent sequences = 772" in _text(*LLAMA_70B_FP8, "--mean-context", "2000")
    assert _json(*LLAMA_70B_FP8, "--mean-context", "2000")["worst_case"] is False


def _with_change(base: list[str], change: str) -> list[str]:
    """The base command with a lever's flags added, or replacing the same flag."""
    args = list(base)
    words = change.split()
    for flag, value in zip(words[::2], words[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


@pytest.mark.parametrize(
    "base",
    [
        ["plan", "--preset", "qwen3.5-397b-a17b", "--gpu", "b200", "--tp", "4", "--weight-dtype", "nvfp4"],
        ["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "8192", "--mean-context", "2050"],
        ["plan", "--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--mean-context", "4000"],
        ["plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", "fp8", "--context", "32768"],
        ["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "8192", "--kv-pool-gib", "42.21"],
    ],
    ids=["qwen3.5-nvfp4", "seed", "gpt-oss", "kv-fp8", "logged-pool"],
)
def test_every_lever_command_reproduces_its_row(base):
    doc = _json(*base)
    assert doc["levers"], "expected at least one lever"
    for lever in doc["levers"]:
        ran = _json(*_with_change(base, lever["change"]))
        assert (ran["ledger"]["kv_pool_bytes"], ran["max_seqs"]["paged"]) == (
            lever["kv_pool_bytes"],
            lever["max_seqs"],
        ), (lever["name"], lever["change"])


def test_levers_that_do_not_apply_are_not_offered():
    doc = _json("plan", "--preset", "qwen3.5-397b-a17b", "--gpu", "b200", "--tp", "4", "--weight-dtype", "nvfp4")
    assert {lv["name"] for lv in doc["levers"]} == {"fp8-kv", "more-gpus"}
    text = _text("plan", "--preset", "qwen3.5-397b-a17b", "--gpu", "b200", "--tp", "4", "--weight-dtype", "nvfp4")
    assert "not offered — fp8 weights: the weights are already nvfp4" in text and "would upcast" in text
    kv8 = _json("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", "fp8")
    assert not {"fp8-kv", "fp8-weights+fp8-kv"} & {lv["name"] for lv in kv8["levers"]}


def test_gpt_oss_one_size_per_sequence_and_why_paged_holds_fewer():
    args = ["plan", "--preset", "gpt-oss-120b", "--gpu", "h100-sxm"]
    text = _text(*args)
    doc = _json(*args)
    seq_gib = doc["seq_bytes"]["contiguous"] / 2**30
    assert f"{seq_gib:.2f}" == "4.50"
    assert "a 131,072-token sequence carries 4.50 GiB" in text and "carries 9 GiB" not in text
    at_4k = next(c for c in doc["context_sweep"] if c["context"] == 4096)
    assert at_4k["paged"] < at_4k["contiguous"]  # the sliding window in whole blocks
    assert "paged holds fewer than contiguous at 4,096 tokens" in text and "straddles a block boundary" in text


def test_context_sweep_stops_at_the_models_maximum():
    doc = _json("plan", "--preset", "qwen3-30b-a3b", "--gpu", "h100-sxm")
    top = 40960  # max_position_embeddings in Qwen/Qwen3-30B-A3B's config.json
    assert max(c["context"] for c in doc["context_sweep"]) == top
    assert [c["context"] for c in doc["context_sweep"] if c["model_max"]] == [top]
    text = _text("plan", "--preset", "qwen3-30b-a3b", "--gpu", "h100-sxm")
    assert "40,960 (model max)" in text and "131,072" not in text


def test_a_bare_gpu_family_name_says_which_part_it_planned():
    text = _text("plan", "--preset", "llama-3.1-8b", "--gpu", "h100")
    assert "1× h100-sxm = NVIDIA H100 80GB HBM3 (SXM)" in text
    assert "the other h100 parts in the catalog are --gpu h100-pcie, --gpu h100-nvl" in text
