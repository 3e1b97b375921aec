"""SGLang's own --mem-fraction-static when the user gives none, by release (plan/engines.py
sglang_default_mem_fraction; server_args.py of the PyPI sdists, lines cited in SGLANG_FRACTION_RULES), and engine mode
taking it.

`PYTHONPATH=src python tests/plan/test_plan_sglang_default_fraction.py` prints, for every SGLang start-up log of
tests/plan/data/engine_startup_logs.json, the fraction engine mode now takes without --mem-fraction and the tokens
before (0.88, kneecap's former example value) and after.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.engines import sglang_default_mem_fraction, sglang_release

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [
    r
    for r in json.loads((ROOT / "tests/plan/data/engine_startup_logs.json").read_text())["records"]
    if r["server"] == "sglang"
]
H100, H200, B200, L4 = 81559, 143771, 183359, 23034  # nvidia-smi memory.total, MiB (kneecap's catalog)


def own(mib: float, tp: int, version: str, **kw) -> float:
    return sglang_default_mem_fraction(mib, tp, version=version, **kw).fraction


def test_releases_through_0_4_5_pick_by_tp_size_alone():
    # 0.4.1.post7 server_args.py:187-197 (0.4.3.post4 / 0.4.4.post1 :204-214, 0.4.5 :233-243)
    for version in ("0.4.1.post7", "0.4.3", "0.4.4.post1", "0.4.5"):
        assert [own(H100, tp, version) for tp in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]
        assert own(H200, 1, version) == own(L4, 1, version) == 0.88  # whatever the GPU


def test_0_4_6_and_0_4_7_keep_the_table_up_to_80_gib():
    # 0.4.6 :224-238: above 81,920 MiB (gpu_mem - 13 GiB) / gpu_mem, unrounded
    assert own(H100, 4, "0.4.6") == 0.85
    assert own(H200, 4, "0.4.6") == (H200 - 13 * 1024) / H200
    # 0.4.7 :253-283: 0.79 over 180,000 MiB; over 96 GiB min(0.88 + 48 GiB x 0.12 / mem, (mem - 18 GiB) / mem)
    assert own(B200, 8, "0.4.7") == 0.79
    assert own(H200, 8, "0.4.7") == min(0.88 + 48 * 1024 * 0.12 / H200, (H200 - 18 * 1024) / H200)
    assert own(H100, 2, "0.4.7", pp=2) == 0.85  # the table by TP x PP


def test_0_4_8_through_0_5_2_reserve_by_gpu_size_tier():
    # 0.4.9.post2 :282-321 (0.4.8 and 0.5.2 the same): H100 (9.5 + 4 / 2) GiB at TP 4 = 11,776 MiB
    for version in ("0.4.8", "0.4.9.post2", "0.5.2"):
        assert own(H100, 4, version) == round((H100 - 11776) / H100, 3) == 0.856
        assert own(L4, 4, version) == round((L4 - (2.8 + 0.4) * 1024) / L4, 3)
        assert own(B200, 8, version) == round((B200 - 32 * 1024) / B200, 3)
        # DP attention: 4 GiB more
        assert own(H200, 8, version, dp=8, dp_attention=True) == round((H200 - (12 + 4 + 4) * 1024) / H200, 3)


def test_from_0_5_3_the_reserve_follows_chunked_prefill_and_cuda_graphs():
    # 0.5.9 :911-1063: H100 TP 1: 512 + 1.5 x 8,192 + 2 x 256 + 1,024 / 8 = 13,440 MiB (over the 10 GiB floor)
    assert own(H100, 1, "0.5.9") == round((H100 - 13440) / H100, 3) == 0.835
    # B200 TP 8 (the 0.5.6 validation rows): 512 + 1.5 x 16,384 + 2 x 512 + 1,024 = 27,136 MiB
    assert own(B200, 8, "0.5.6") == round((B200 - 27136) / B200, 3) == 0.852
    # a 24 GB GPU at TP 1: CUDA-graph batch 16 in 0.5.3-0.5.4, 24 from 0.5.5 (0.5.5 :707-719)
    assert own(L4, 1, "0.5.4") == round((L4 - (512 + 3072 + 32 + 128)) / L4, 3)
    assert own(L4, 1, "0.5.5") == round((L4 - (512 + 3072 + 48 + 128)) / L4, 3)


def test_a_minor_version_alone_is_its_newest_release_read():
    assert sglang_release("0.5") == (0, 5, 99) and sglang_release("0.4.3.post4") == (0, 4, 3)
    assert own(H100, 1, "0.5") == own(H100, 1, "0.5.9")
    with pytest.raises(KneecapError, match="bad engine version"):
        sglang_release("latest")


def _engine(rec: dict, mem_fraction: float | None, version: str):
    """Engine mode on the record's deployment, with --mem-fraction as given (None: not given)."""
    args = rec["plan"]
    flags = dict(zip(args[::2], args[1::2]))
    request = DeploymentRequest(
        preset=flags.get("--preset"),
        model=str(ROOT / flags["--model"]) if "--model" in flags else None,
        gpu=flags["--gpu"],
        tp=int(flags.get("--tp", 1)),
        weight_dtype=flags.get("--weight-dtype"),
        context=int(flags["--context"]),
        engine="sglang",
        engine_version=version,
        mem_fraction=mem_fraction,
    )
    return plan_deployment(request)[1]


def _release(rec: dict) -> str | None:
    """The release a record's log was made with, as kneecap reads it (None where the record does not say)."""
    return {"0.4.4": "0.4.4", "0.4.3.post3 or 0.4.3.post4": "0.4.3"}.get(rec["release"])


def before_after() -> list[dict]:
    rows = []
    for rec in RECORDS:
        version = _release(rec)
        logged = rec["logged"]["kv_cache_tokens"]
        row = {"id": rec["id"], "release": rec["release"], "logged_fraction": rec["mem_fraction_static"]}
        row["passed"] = "mem_fraction_how" not in rec  # the records say how they know a fraction they did not pass
        if version is None:
            rows.append(row)
            continue
        before, after = _engine(rec, 0.88, version), _engine(rec, None, version)
        row.update(
            version=version,
            fraction=after.fraction,
            source=after.fraction_source,
            before=before.log_kv_cache_tokens,
            after=after.log_kv_cache_tokens,
            logged=logged,
        )
        rows.append(row)
    return rows


def test_published_sglang_logs_get_the_fraction_their_server_picked():
    rows = {r["id"]: r for r in before_after()}
    # QwQ-32B on 4 L4s, SGLang 0.4.3: the log's ServerArgs line prints mem_fraction_static=0.85 (not passed)
    qwq = rows["sglang-qwq-32b-4xl4-v0.4.3"]
    printed = next(f for f in RECORDS[2]["server_args_fragments"] if f.startswith("mem_fraction_static="))
    assert not qwq["passed"] and qwq["fraction"] == float(printed.split("=")[1]) == 0.85
    assert qwq["source"] == "sglang default"
    # engine mode without --mem-fraction now gives what it gave with the printed 0.85 passed (58,638, +25.8%: the
    # memory in use before the weights, which the pool rows of docs/engine-model.md explain), not 0.88's count
    assert (qwq["before"], qwq["after"]) == (69_694, 58_638)  # +49.5% -> +25.8% of the logged 46,611
    # Llama-3.1-8B on one H100, SGLang 0.4.4: not printed; 0.88 is the release's own at TP 1
    llama = rows["sglang-llama-3.1-8b-h100-v0.4.4"]
    assert not llama["passed"] and llama["fraction"] == llama["logged_fraction"] == 0.88
    assert llama["before"] == llama["after"] == 447_821


def test_the_qwen3_moe_record_passed_its_fraction():
    # Qwen3-235B-A22B-FP8 on 4 H100s logged a pool at 0.93, which no release read picks at TP 4 on an H100
    # (0.85 by the 0.4.x table, 0.856 by the 0.4.8-0.5.2 tiers, 0.824 from 0.5.3): the user passed it
    (rec,) = [r for r in RECORDS if r["id"] == "sglang-qwen3-235b-a22b-fp8-4xh100"]
    picks = {own(H100, 4, v) for v in ("0.4.4", "0.4.6", "0.4.7", "0.4.9", "0.5.2", "0.5.4", "0.5.9")}
    assert picks == {0.85, 0.856, 0.824} and rec["mem_fraction_static"] not in picks


def test_the_plan_says_whose_fraction_it_took():
    rec = RECORDS[2]
    engine = _engine(rec, None, "0.4.3")
    assert "SGLang 0.4.3's own choice without --mem-fraction-static for this GPU, TP 4" in engine.fraction_note
    assert engine.to_json()["fraction_source"] == "sglang default"
    given = _engine(rec, 0.8, "0.4.3")
    assert (given.fraction, given.to_json()["fraction_source"]) == (0.8, "given")
    # a newer release on the same GPU: 512 + 1.5 x 2,048 + 2 x 80 + 4 / 8 x 1,024 = 4,256 MiB kept back
    newer = _engine(rec, None, "0.5.9")
    assert newer.fraction == round((L4 - 4256) / L4, 3) == 0.815
    assert "4,256 MiB kept back of 23,034 MiB" in newer.fraction_note


if __name__ == "__main__":
    for r in before_after():
        if "after" not in r:
            print(f"{r['id']}: release not stated, mem_fraction_static {r['logged_fraction']} passed")
            continue
        err = lambda t: f"{t:,} ({100 * (t - r['logged']) / r['logged']:+.2f}%)"  # noqa: E731
        print(
            f"{r['id']} (SGLang {r['version']}): without --mem-fraction {r['fraction']:g} ({r['source']}); "
            f"logged {r['logged']:,} tokens; before (0.88) {err(r['before'])}, after {err(r['after'])}"
        )
