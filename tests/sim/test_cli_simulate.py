"""`kneecap simulate` as a user runs it: the summary schema, byte-identical output for a seed, files, errors."""

from __future__ import annotations

import json

import pytest

BASE = ["simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "200", "--osl", "50", "--requests", "40"]
LEVEL_KEYS = {
    "concurrency",
    "requests",
    "completed",
    "failed",
    "duration_s",
    "output_tok_s",
    "input_tok_s",
    "total_tok_s",
    "request_s",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "errors",
    "server_metrics",
}
SERVER_METRICS_KEYS = {"preemptions", "prefix_cache_hit_rate", "kv_usage_max", "running_max", "waiting_max"}
STAT_KEYS = {"mean", "p50", "p90", "p95", "p99", "max", "n"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from clitools import run_cli

    def _run(*args, out=None):
        out = out or tmp_path_factory.mktemp("sim")
        res = run_cli(*BASE, *args, "--out", str(out), "--json")
        return res, out

    return _run


def test_json_summary_schema(run):
    res, out = run("--concurrency", "1,8,max", "--trace")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)  # exactly one JSON document on stdout
    assert doc["kind"] == "simulate" and doc["model_executed"] is False and doc["benchmark_executed"] is False
    assert {"levels", "knee", "stopped", "plan", "engine", "step_time", "deployment"} <= set(doc)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 8, "max"]
    for lv in doc["levels"]:
        assert LEVEL_KEYS <= set(lv)
        assert SERVER_METRICS_KEYS <= set(lv["server_metrics"])
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert STAT_KEYS <= set(lv[key])
        assert lv["completed"] == 40 and lv["failed"] == 0
    assert doc["deployment"]["interconnect"] == "nvlink"
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == doc
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 120
    trace = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    assert trace and {
        "t",
        "num_prefill_seqs",
        "num_decode_seqs",
        "prefill_tokens",
        "decode_tokens",
        "kv_blocks_used",
        "num_waiting",
        "preemptions",
    } <= set(trace[0])
    assert max(row["kv_blocks_used"] for row in trace) <= doc["plan"]["num_kv_blocks"]


def test_engine_holds_exactly_the_planned_blocks(run, cli):
    res, _ = run("--concurrency", "4")
    doc = json.loads(res.stdout)
    plan = json.loads(cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--json").stdout)
    assert doc["plan"]["num_kv_blocks"] == plan["kv_capacity_tokens"] // 16
    assert doc["levels"][0]["server_metrics"]["num_kv_blocks"] == doc["plan"]["num_kv_blocks"]


def test_same_seed_byte_identical_summary(run, tmp_path):
    args = ("--rate", "5,20", "--seed", "7", "--shared-prefix", "64x2")
    a, out_a = run(*args, out=tmp_path / "a")
    b, out_b = run(*args, out=tmp_path / "b")
    c, _ = run("--rate", "5,20", "--seed", "8", "--shared-prefix", "64x2", out=tmp_path / "c")
    assert a.code == b.code == c.code == 0
    assert a.stdout == b.stdout
    assert (out_a / "summary.json").read_bytes() == (out_b / "summary.json").read_bytes()
    assert (out_a / "requests.jsonl").read_bytes() == (out_b / "requests.jsonl").read_bytes()
    assert a.stdout != c.stdout
    assert json.loads(a.stdout)["levels"][0]["server_metrics"]["prefix_cache_hit_rate"] > 0


def test_engine_defaults_and_overrides(run):
    res, _ = run(
        "--concurrency", "2", "--engine-defaults", "sglang", "--max-num-batched-tokens", "1024", "--no-prefix-caching"
    )
    doc = json.loads(res.stdout)
    assert doc["engine"]["defaults"] == "sglang" and doc["engine"]["max_num_batched_tokens"] == 1024
    assert doc["engine"]["enable_prefix_caching"] is False
    assert doc["levels"][0]["server_metrics"]["prefix_cache_hit_rate"] is None
    res, _ = run("--concurrency", "2")
    assert json.loads(res.stdout)["engine"]["max_num_seqs"] == 1024  # vLLM on a >= 70 GiB GPU


@pytest.mark.parametrize(
    "args",
    [
        ("--engine", "vllm"),
        ("--engine", "vllm", "--engine-version", "0.11.0", "--mem-util", "0.85"),
        ("--engine", "sglang", "--mem-fraction", "0.8"),
    ],
)
def test_engine_sizes_the_pool_as_plan_does_and_its_scheduler_follows(run, cli, args):
    """--engine on simulate is `kneecap plan --engine`: the same pool (release and memory fraction included), not
    the ledger's; the scheduler defaults are that engine's."""
    res, _ = run("--concurrency", "2", *args)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    plan = json.loads(cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", *args, "--json").stdout)
    ledger = json.loads(cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--json").stdout)
    assert doc["plan"]["kv_capacity_tokens"] == plan["kv_capacity_tokens"] != ledger["kv_capacity_tokens"]
    assert doc["engine"]["defaults"] == args[1]


def test_engine_version_sets_the_pools_release_with_engine(run):
    """vLLM 0.11.0's memory accounting on an H100 leaves another pool than the default release's; a V0 name without a
    release number keeps the default release's pool (and runs V0's scheduler: 256 sequences)."""
    pools = {}
    for version in (None, "0.11.0", "V0"):
        res, _ = run("--concurrency", "2", "--engine", "vllm", *(("--engine-version", version) if version else ()))
        assert res.code == 0, res.stderr
        doc = json.loads(res.stdout)
        pools[version] = doc["plan"]["kv_capacity_tokens"]
        if version == "V0":
            assert doc["engine"]["max_num_seqs"] == 256 and doc["engine"]["profile"].startswith("vLLM V0")
    assert pools["0.11.0"] != pools[None] == pools["V0"]


def test_nim_and_llamacpp_defaults(run):
    """--engine-defaults nim: TensorRT-LLM's defaults and pool rule on its C++ runtime; llamacpp: one sequence at a
    time, 2048-token batches, no prompt cache, the ledger's pool."""
    docs = {}
    for defaults in ("trtllm", "nim", "llamacpp", "vllm"):
        res, _ = run("--concurrency", "2", "--engine-defaults", defaults)
        assert res.code == 0, res.stderr
        docs[defaults] = json.loads(res.stdout)
    nim, trt, llama = docs["nim"], docs["trtllm"], docs["llamacpp"]
    assert nim["plan"]["kv_capacity_tokens"] == trt["plan"]["kv_capacity_tokens"]
    assert nim["engine"]["profile"].startswith("TensorRT-LLM C++ runtime") and not trt["engine"]["profile"].startswith(
        "TensorRT-LLM C++ runtime"
    )
    assert (nim["engine"]["max_num_seqs"], nim["engine"]["chunked_prefill"]) == (2048, False)
    assert llama["plan"]["kv_capacity_tokens"] == docs["vllm"]["plan"]["kv_capacity_tokens"]
    assert (llama["engine"]["max_num_seqs"], llama["engine"]["max_num_batched_tokens"]) == (1, 2048)
    assert llama["engine"]["enable_prefix_caching"] is False and llama["engine"]["profile"].startswith("llama.cpp")
    assert llama["levels"][0]["server_metrics"]["running_max"] == 1


def test_a_pre_release_names_its_release(run):
    """--engine-version 0.21.0rc2 (a release candidate) is TensorRT-LLM 0.21's PyTorch executor; 0.16rc1 its C++
    runtime."""
    profiles = {}
    for version in ("0.21.0rc2", "0.16rc1"):
        res, _ = run("--concurrency", "2", "--engine-defaults", "trtllm", "--engine-version", version)
        assert res.code == 0, res.stderr
        profiles[version] = json.loads(res.stdout)["engine"]["profile"]
    assert profiles["0.16rc1"].startswith("TensorRT-LLM C++ runtime")
    assert profiles["0.21.0rc2"].startswith("TensorRT-LLM 1.x PyTorch")


def test_step_params_change_the_prediction(run):
    slow, _ = run("--concurrency", "1", "--step-params", "bw_efficiency=0.4")
    fast, _ = run("--concurrency", "1", "--step-params", "bw_efficiency=0.8")
    tpot = lambda r: json.loads(r.stdout)["levels"][0]["tpot_ms"]["p50"]  # noqa: E731
    assert tpot(slow) > 1.5 * tpot(fast)  # C=1 decode is memory-bound: half the bandwidth, ~twice the TPOT


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--concurrency", "0"], "concurrency"),
        (["--concurrency", "1", "--rate", "2"], "both given"),
        (["--rate", "abc"], "--rate"),
        (["--concurrency", "1", "--engine-defaults", "tgi"], "--engine-defaults"),
        (["--concurrency", "1", "--step-params", "mfu=5"], "mfu"),
        (["--concurrency", "1", "--step-params", "speed=1"], "unknown step-time parameter"),
        (
            ["--concurrency", "1", "--step-params", "mfu=0.4", "--calibration", "mfu=0.5"],
            "--calibration and --step-params both given",
        ),
        (["--concurrency", "max", "--duration", "5"], "--duration"),
        (["--concurrency", "1", "--requests", "0"], "--requests"),
        (["--concurrency", "1", "--gpu", "h900"], "h900"),
        (["--concurrency", "1", "--isl", "0"], "--isl"),
        (["--concurrency", "1", "--engine", "sglang", "--engine-defaults", "vllm"], "--engine-defaults"),
        (["--concurrency", "1", "--engine", "tgi"], "tgi"),
        (["--concurrency", "1", "--mem-fraction", "0.8"], "--mem-fraction"),
        (["--concurrency", "1", "--engine", "vllm", "--engine-version", "latest"], "latest"),
    ],
)
def test_bad_input_is_one_line_no_traceback(run, args, needle):
    res, _ = run(*args)
    assert res.code != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_table_mode_prints_levels(tmp_path):
    from clitools import run_cli

    res = run_cli(*BASE, "--concurrency", "1,4", "--out", str(tmp_path))
    assert res.code == 0
    assert "kneecap simulate" in res.stdout and "TTFT p50 (ms)" in res.stdout


def test_past_the_kv_pool_preemptions_show_in_summary_and_report(tmp_path):
    """A pool far too small for the level: the engine preempts, and summary.json's one server_metrics shape and
    the report both say how often (the report used to read only bench's preemptions_delta and showed a dash)."""
    from clitools import run_cli

    out = tmp_path / "tight"
    res = run_cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--kv-pool-gib",
        "0.25",
        "--isl",
        "1000",
        "--osl",
        "400",
        "--concurrency",
        "64",
        "--requests",
        "64",
        "--out",
        str(out),
        "--json",
    )
    assert res.code == 0, res.stderr
    sm = json.loads(res.stdout)["levels"][0]["server_metrics"]
    assert sm["source"] == "simulator" and isinstance(sm["preemptions"], int) and sm["preemptions"] > 0
    assert sm["kv_usage_max"] > 0.9 and 0 < sm["kv_usage_mean"] <= sm["kv_usage_max"]
    assert {"running_max", "waiting_max", "prefix_cache_hit_rate"} <= set(sm)
    lines = (out / "report.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if "preemptions (count)" in line)
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    row = [c.strip() for c in lines[header + 2].strip("|").split("|")]
    assert row[columns.index("preemptions (count)")] == f"{sm['preemptions']:,}", (columns, row)
    assert "simulated engine" in "\n".join(lines[header - 3 : header])
