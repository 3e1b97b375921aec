"""Preflight verdicts: seed 000 as a table, the remedies with numbers, and bad input."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.plan.preflight import preflight

SEED_000 = preflight(1_573_854, isl=1000, osl=1000, concurrencies=[64, 128, 256, 512, 1024, 2048])
BY_C = {lv.concurrency: lv for lv in SEED_000.levels}


@pytest.mark.parametrize(
    "c,peak,steady,verdict,headroom",
    [
        (64, 128_000, 96_256, "fits", 1_445_854),
        (128, 256_000, 192_512, "fits", 1_317_854),
        (256, 512_000, 385_024, "fits", 1_061_854),
        (512, 1_024_000, 770_048, "fits", 549_854),
        (1024, 2_048_000, 1_540_096, "tight", -474_146),
        (2048, 4_096_000, 3_080_192, "exceeds", -2_522_146),
    ],
)
def test_seed_000_levels(c, peak, steady, verdict, headroom):
    lv = BY_C[c]
    assert (lv.peak_tokens, lv.steady_tokens, lv.verdict, lv.headroom_tokens) == (peak, steady, verdict, headroom)


def test_seed_000_max_safe_concurrency():
    assert SEED_000.max_safe_concurrency == 786


def test_fitting_levels_need_no_fix():
    assert BY_C[512].remedy is None


@pytest.mark.parametrize(
    "c,fp8_fits,max_seq_tokens,replicas",
    [
        (1024, True, 1536, 2),  # fp8 KV: 3,147,708 >= 2,048,000; 1,573,854 // 1024 = 1536 (whole blocks)
        (2048, False, 768, 3),  # 4,096,000 > 3,147,708; 768 tokens; ceil(4,096,000 / 1,573,854) = 3
    ],
)
def test_remedies_carry_numbers(c, fp8_fits, max_seq_tokens, replicas):
    fix = BY_C[c].remedy
    assert (fix.fp8_kv_fits, fix.max_seq_tokens, fix.replicas) == (fp8_fits, max_seq_tokens, replicas)
    assert "3,147,708" in fix.text


def test_remedy_names_the_tp_that_holds_it():
    r = preflight(
        100_000,
        isl=1000,
        osl=1000,
        concurrencies=[100],
        gpus_per_replica=8,
        tp_capacities=[(16, 16, 150_000), (32, 32, 400_000)],
    )
    fix = r.levels[0].remedy
    assert (fix.tp, fix.num_gpus) == (32, 32)


def test_fp8_kv_is_not_offered_when_kv_is_already_8_bit():
    r = preflight(1000, isl=1000, osl=1000, concurrencies=[4], kv_dtype_bytes=1)
    assert r.levels[0].remedy.fp8_kv_fits is None


def test_whole_blocks_per_sequence():
    r = preflight(10_000, isl=1000, osl=1, concurrencies=[1], block_size=16)
    assert r.levels[0].peak_tokens == 1008  # 1001 tokens -> 63 blocks of 16


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kv_capacity_tokens=0, isl=1, osl=1, concurrencies=[1]),
        dict(kv_capacity_tokens=10, isl=-1, osl=1, concurrencies=[1]),
        dict(kv_capacity_tokens=10, isl=1, osl=0, concurrencies=[1]),
        dict(kv_capacity_tokens=10, isl=1, osl=1, concurrencies=[]),
        dict(kv_capacity_tokens=10, isl=1, osl=1, concurrencies=[0]),
    ],
)
def test_bad_input(kwargs):
    cap = kwargs.pop("kv_capacity_tokens")
    with pytest.raises(KneecapError):
        preflight(cap, **kwargs)
