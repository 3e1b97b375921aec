"""`kneecap bench` end to end: the real CLI (a subprocess) against the scripted test server.

Each test starts its own server on 127.0.0.1 (free port) and stops it by its handle. Timings are
scripted in tens of milliseconds; assertions on time use generous bounds only.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kneecap.client.keepalive import PROBE_PROMPT_PREFIX
from kneecap.client.setup import CHECK_USER
from servers.scripted import start_scripted_server

SUMMARY_KEYS = {
    "kind",
    "levels",
    "knee",
    "stopped",
    "manifest",
    "model_executed",
    "benchmark_executed",
    "load",
    "status",
    "skipped",
    "preflight",
    "server",
    "slo",
    "workers",
}
LEVEL_KEYS = {
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
    # kneecap's additions, beside the client's numbers
    "level",
    "preflight",
    "server_metrics",
    "client",
    "suspect",
    "warmup_excluded",
    "wall_s",
}
STAT_KEYS = {"mean", "p50", "p90", "p95", "p99", "max", "n"}


@pytest.fixture
def server():
    handles = []

    def start(**knobs):
        url, handle = start_scripted_server(**knobs)
        handles.append(handle)
        return url, handle

    yield start
    for handle in handles:
        handle.stop()


def records(out: Path) -> list[dict]:
    path = out / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def probe_entries(srv) -> list[dict]:
    """The server's log entries for kneecap's keep-alive probe (two requests before the sweep)."""
    return [e for e in srv.log() if PROBE_PROMPT_PREFIX in json.dumps(e["body"])]


def sweep_log(srv) -> list[dict]:
    """The server's log entries for the sweep's own requests (not the probe's, not the prompt check's)."""
    return [
        e for e in srv.log() if PROBE_PROMPT_PREFIX not in json.dumps(e["body"]) and e["body"].get("user") != CHECK_USER
    ]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _default_sigint() -> None:
    # A test run started in the background of a non-interactive shell (nohup, `cmd &`) inherits
    # SIGINT ignored, and Python keeps it ignored: give the child the default, as a terminal would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen_bench(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kneecap", "bench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=_default_sigint,
    )


def wait_for_lines(path: Path, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {n} lines")


def assert_one_line_error(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert "Traceback" not in stderr


# -- sweeps ------------------------------------------------------------------------------------
def test_concurrency_sweep_json_golden_keys_and_warmup_excluded(cli, server, tmp_path):
    url, srv = server(ttft_s=0.02, itl_s=0.005)
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "16",
        "--osl",
        "8",
        "--concurrency",
        "1,2",
        "--requests",
        "6",
        "--warmup",
        "2",
        "--out",
        str(out),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one JSON document on stdout
    assert doc == summary(out)
    assert SUMMARY_KEYS <= set(doc)
    assert doc["kind"] == "bench" and doc["load"] == "concurrency" and doc["status"] == "complete"
    assert doc["stopped"] is None and doc["skipped"] == []
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    for lv in doc["levels"]:
        assert LEVEL_KEYS <= set(lv), LEVEL_KEYS - set(lv)
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert STAT_KEYS <= set(lv[key])
        # warmup: recorded, excluded from the statistics
        assert (lv["requests"], lv["completed"], lv["failed"], lv["warmup_excluded"]) == (6, 6, 0, 2)
        assert lv["ttft_ms"]["n"] == 6
        assert lv["ttft_ms"]["p50"] >= 20.0  # the server waits 20 ms before the first token
    recs = records(out)
    assert len(recs) == 2 * (6 + 2) == len(sweep_log(srv))
    # before the sweep, two probe requests found that the server keeps connections open: reused
    assert doc["connections"]["keepalive"] is True and doc["connections"]["decided_by"] == "probe"
    assert doc["connections"]["probe"]["kept_alive"] is True and doc["connections"]["probe"]["requests_sent"] == 2
    assert len(probe_entries(srv)) == 2 and all(lv["failed_on_reused_connection"] == 0 for lv in doc["levels"])
    assert sum(r["warmup"] for r in recs) == 4
    assert len({r["request_id"] for r in recs}) == len(recs)
    assert all(r["prompt"] is None and r["prompt_hash"] for r in recs)  # hashes, not prompts, by default
    # the server's own gauges, scraped from its /metrics during each level, sit beside the client's numbers
    for lv in doc["levels"]:
        assert lv["server_metrics"]["engine"] == "vllm" and lv["server_metrics"]["num_samples"] >= 2
        assert lv["server_metrics"]["kv_usage_max"] is not None
        assert lv["client"]["workers"] == 1 and "loop_lag_p99_ms" in lv["client"]["per_worker"][0]
    # the preflight used the KV pool the server reports (scripted: 65536 tokens)
    assert doc["preflight"]["kv_capacity_tokens"] == 65536
    assert [lv["preflight"]["verdict"] for lv in doc["levels"]] == ["fits", "fits"]


def test_rate_sweep(cli, server, tmp_path):
    url, _ = server(ttft_s=0.01, itl_s=0.002)
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "8",
        "--osl",
        "4",
        "--rate",
        "20,40",
        "--requests",
        "8",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.code == 0, r.stderr
    assert r.stdout == ""  # --quiet
    doc = summary(out)
    assert doc["load"] == "rate"
    assert [lv["rate"] for lv in doc["levels"]] == [20.0, 40.0]
    for lv in doc["levels"]:
        assert lv["completed"] == 8
        assert lv["ttft_from_scheduled_ms"]["n"] == 8  # open loop: latency from the intended send time too
        assert "concurrency" not in lv or lv["concurrency"] is None
    assert all(r["scheduled_at"] is not None for r in records(out))


def test_table_output_has_units(cli, server, tmp_path):
    url, _ = server()
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--requests",
        "3",
        "--out",
        str(tmp_path / "run"),
    )
    assert r.code == 0, r.stderr
    for header in ("TTFT p99 (ms)", "ITL p50 (ms)", "out tok/s", "E2E p99 (s)"):
        assert header in r.stdout
    assert f"results: {tmp_path / 'run'}" in r.stdout


# -- preflight ------------------------------------------------------------------------------------
# ISL 16 + OSL 32 in 16-token blocks: peak 48 tokens per sequence, steady (ISL + OSL/2) 32.
# A 100-token pool: C=2 fits (96), C=3 is tight (peak 144, steady 96), C=8 exceeds (steady 256).
PREFLIGHT = ("--isl", "16", "--osl", "32", "--concurrency", "2,3,8", "--requests", "3", "--kv-tokens", "100")


def test_preflight_skips_exceeding_levels_and_warns_on_tight(cli, server, tmp_path):
    url, srv = server()
    out = tmp_path / "run"
    r = cli("bench", "--base-url", url, *PREFLIGHT, "--out", str(out), "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [2, 3]
    assert [lv["preflight"]["verdict"] for lv in doc["levels"]] == ["fits", "tight"]
    assert doc["skipped"] == [{"concurrency": 8, "index": 2, "reason": "preflight_exceeds"}]
    assert doc["stopped"]["reason"] == "preflight_exceeds" and doc["stopped"]["at"] == 8
    assert doc["preflight"]["kv_capacity_tokens"] == 100
    assert "tight" in r.stderr and "skipping C=8" in r.stderr
    assert len(sweep_log(srv)) == 6  # nothing was sent for C=8


def test_footer_says_no_level_ran_when_preflight_skipped_every_level(cli, server, tmp_path):
    url, srv = server()
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "16",
        "--osl",
        "32",
        "--concurrency",
        "8,16",
        "--requests",
        "3",
        "--kv-tokens",
        "100",
        "--slo",
        "ttft_p99_ms=5000",
        "--out",
        str(tmp_path / "run"),
    )
    assert r.code == 0, r.stderr
    footer = " ".join(r.stdout.split())  # the table's caption, however rich wraps it
    assert "SLO not judged: no level ran (all 2 skipped: they exceed the KV pool)" in footer, r.stdout
    assert "SLO met" not in footer and "0 of 0" not in footer
    assert len(sweep_log(srv)) == 0  # nothing was sent


def test_force_runs_exceeding_levels(cli, server, tmp_path):
    url, srv = server()
    out = tmp_path / "run"
    r = cli("bench", "--base-url", url, *PREFLIGHT, "--out", str(out), "--json", "--force")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [2, 3, 8]
    assert doc["skipped"] == [] and doc["stopped"] is None
    assert len(sweep_log(srv)) == 9


# -- keep-alive ---------------------------------------------------------------------------------
def test_a_server_that_closes_connections_after_streams_is_detected_and_not_reused(cli, server, tmp_path):
    """llama.cpp closes its connection after every streamed response. Without --keepalive or
    --no-keepalive, kneecap probes first and then opens a connection per request: no request is lost
    to a race with the server's FIN, and summary.json says what was decided and why."""
    url, srv = server(ttft_s=0.0, itl_s=0.002, fault="close_after_response")
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1,2",
        "--requests",
        "6",
        "--out",
        str(out),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    conn = doc["connections"]
    assert conn["keepalive"] is False and conn["decided_by"] == "probe" and conn["probe"]["kept_alive"] is False
    assert "new connection per request" in r.stderr and "--keepalive forces reuse" in r.stderr
    assert all(lv["completed"] == 6 and lv["failed"] == 0 for lv in doc["levels"])
    assert len(probe_entries(srv)) == 2 and len(sweep_log(srv)) == 12
    assert json.loads((out / "manifest.json").read_text())["bench_options"]["keepalive"] is False  # --resume keeps it


def test_forced_keepalive_drops_are_counted_and_named(cli, server, tmp_path):
    """--keepalive against a server that drops reused connections unanswered: every drop is a counted
    connection_reset, never retried, tallied in failed_on_reused_connection, with a warning naming
    --no-keepalive. The probe does not run when the flag is given."""
    url, srv = server(ttft_s=0.0, itl_s=0.002, fault="drop_reused")
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--requests",
        "6",
        "--keepalive",
        "--out",
        str(tmp_path / "run"),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    level = doc["levels"][0]
    assert doc["connections"] == {"keepalive": True, "decided_by": "--keepalive"}
    assert level["failed"] > 0 and level["errors"] == {"connection_reset": level["failed"]}
    assert level["failed_on_reused_connection"] == level["failed"] and level["completed"] + level["failed"] == 6
    assert f"{level['failed']} request(s) failed on a reused connection" in r.stderr and "--no-keepalive" in r.stderr
    assert probe_entries(srv) == []


# -- failures ----------------------------------------------------------------------------------
def test_error_rate_stops_the_sweep_exit_per_fail_on(cli, server, tmp_path):
    url, srv = server(fault="http_500")
    args = ("--base-url", url, "--isl", "4", "--osl", "4", "--concurrency", "1,2,4", "--requests", "4")
    r = cli("bench", *args, "--out", str(tmp_path / "a"), "--json")
    assert r.code == 0, r.stderr  # failed requests are measurements, not a failed run
    doc = json.loads(r.stdout)
    assert len(doc["levels"]) == 1
    assert doc["levels"][0]["failed"] == 4 and doc["levels"][0]["errors"] == {"http_500": 4}
    assert doc["stopped"]["reason"] == "error_rate" and doc["stopped"]["at"] == 1
    assert len(sweep_log(srv)) == 4
    r = cli("bench", *args, "--out", str(tmp_path / "b"), "--quiet", "--fail-on", "errors")
    assert r.code == 1
    assert "--fail-on errors" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_server_is_one_line_and_writes_nothing(cli, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--out",
        str(out),
    )
    assert r.code == 2
    assert_one_line_error(r.stderr)
    assert f"127.0.0.1:{port}" in r.stderr
    assert not out.exists()


def test_server_killed_mid_level_stops_and_keeps_records(server, tmp_path):
    url, srv = server(ttft_s=0.01, itl_s=0.05)  # 40 tokens: about 2 s per request
    out = tmp_path / "run"
    proc = popen_bench(
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "40",
        "--concurrency",
        "2,4",
        "--requests",
        "8",
        "--timeout",
        "30",
        "--out",
        str(out),
        "--quiet",
    )
    try:
        wait_for_lines(out / "requests.jsonl", 2)
        srv.kill()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # a sweep that ends on a dead server exits 3 whatever --fail-on says, saying the server died (not blaming
    # reused connections, which is what a killed server's resets used to be diagnosed as)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert proc.returncode == 3 and "stopped answering" in lines[-1] and "--resume" in lines[-1], stderr
    assert "reused connection" not in stderr
    doc = summary(out)
    assert doc["stopped"]["reason"] == "server_dead" and doc["stopped"]["at"] == 2
    level = doc["levels"][0]
    assert level["server_dead"] is True
    assert level["requests"] == 8 and level["completed"] >= 2 and level["failed"] >= 1
    recs = records(out)
    assert len(recs) == 8  # every request of the level is accounted for, finished ones kept
    assert sum(r["status"] == "ok" for r in recs) == level["completed"]
    # "restart the server, then --resume the folder": the cut level is run again, then the rest
    url2, _ = server(ttft_s=0.01, itl_s=0.001, port=int(url.rsplit(":", 1)[1]))
    resumed = subprocess.run(
        [sys.executable, "-m", "kneecap", "bench", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert url2 == url and resumed.returncode == 0, resumed.stderr
    doc = summary(out)
    assert doc["status"] == "complete" and not doc.get("stopped")
    assert [(lv["concurrency"], lv["completed"], lv["failed"]) for lv in doc["levels"]] == [(2, 8, 0), (4, 8, 0)]
    assert len(records(out)) == 16 and len((out / "requests.discarded.jsonl").read_text().splitlines()) == 8


# -- crash safety and resume -------------------------------------------------------------------------
SWEEP = ("--isl", "4", "--osl", "10", "--concurrency", "1,2,3,4", "--requests", "6", "--warmup", "1")


@pytest.mark.parametrize("seed", [1, 2])
def test_resume_after_sigkill_has_no_duplicated_or_lost_levels(server, cli, tmp_path, seed):
    url, srv = server(ttft_s=0.01, itl_s=0.02)  # about 0.2 s per request, 4 levels of 7 requests
    out = tmp_path / "run"
    kill_after_records = random.Random(seed).randint(2, 20)
    proc = popen_bench("--base-url", url, *SWEEP, "--out", str(out), "--quiet")
    wait_for_lines(out / "requests.jsonl", kill_after_records)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    before = records(out)  # still valid JSONL after SIGKILL (the reader skips at most a torn tail)
    assert len(before) >= kill_after_records

    r = cli("bench", "--resume", str(out), "--base-url", url, "--quiet")
    assert r.code == 0, r.stderr
    doc = summary(out)
    assert doc["status"] == "complete"
    assert [lv["level"] for lv in doc["levels"]] == [0, 1, 2, 3], f"seed {seed}, killed after {kill_after_records}"
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2, 3, 4]
    assert all(lv["requests"] == 6 and lv["completed"] == 6 for lv in doc["levels"])
    kept = records(out)
    assert len({r["request_id"] for r in kept}) == len(kept) == 4 * 7
    aside = out / "requests.discarded.jsonl"
    discarded = aside.read_text().splitlines() if aside.exists() else []
    assert len(kept) + len(discarded) <= len(srv.log())  # a killed request may never have been recorded


def test_ctrl_c_stops_cleanly_and_resume_finishes(server, cli, tmp_path):
    url, _ = server(ttft_s=0.01, itl_s=0.02)
    out = tmp_path / "run"
    proc = popen_bench("--base-url", url, *SWEEP, "--out", str(out), "--quiet")
    wait_for_lines(out / "requests.jsonl", 9)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    doc = summary(out)
    assert doc["status"] == "interrupted" and doc["stopped"]["reason"] == "interrupted"
    assert doc["levels"][0]["level"] == 0 and not doc["levels"][0].get("partial")
    assert doc["levels"][-1]["partial"] is True  # the cut level is summarised, marked partial
    r = cli("bench", "--resume", str(out), "--quiet", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["level"] for lv in doc["levels"]] == [0, 1, 2, 3]
    assert not any(lv.get("partial") for lv in doc["levels"])
    # resuming a finished sweep sends nothing and says so
    lines = (out / "requests.jsonl").read_bytes()
    r = cli("bench", "--resume", str(out))
    assert r.code == 0, r.stderr
    assert "nothing to resume" in r.stdout
    assert (out / "requests.jsonl").read_bytes() == lines


# -- secrets -----------------------------------------------------------------------------------
def test_api_key_is_sent_but_never_printed_or_written(cli, server, tmp_path):
    key = "sk-kneecap-test-" + "Zq7" * 8
    url, srv = server(ttft_s=0.0, error_echo_auth=True)
    out = tmp_path / "run"
    env = {"OPENAI_API_KEY": key}
    # half the requests fail with a body that echoes the Authorization header back
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--out",
        str(out),
        "--json",
        env=env,
    )
    r2 = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--out",
        str(tmp_path / "run2"),
        "--keep-prompts",
        env=env,
    )
    srv_fail_url, _ = server(fault="http_500", error_echo_auth=True)
    r3 = cli(
        "bench",
        "--base-url",
        srv_fail_url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--out",
        str(tmp_path / "run3"),
        env=env,
    )
    for res in (r, r2, r3):
        assert res.code == 0, res.stderr
        assert key not in res.stdout and key not in res.stderr
    sent = hashlib.sha256(f"Bearer {key}".encode()).hexdigest()
    assert all(entry["auth_sha256"] == sent for entry in srv.log())  # the key did reach the server
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    errors = [rec for rec in records(tmp_path / "run3") if rec["status"] != "ok"]
    assert errors and all("***" in rec["error_message"] for rec in errors)  # the echoed key was scrubbed


def test_api_key_flags_name_the_source_not_the_key(cli, tmp_path):
    r = cli(
        "bench",
        "--base-url",
        "http://127.0.0.1:1",
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--api-key-env",
        "KNEECAP_TEST_UNSET_VAR",
    )
    assert r.code == 2
    assert_one_line_error(r.stderr)
    assert "KNEECAP_TEST_UNSET_VAR" in r.stderr
    r = cli("bench", "--api-key", "sk-x")
    assert r.code == 2 and "--api-key" in r.stderr  # no plain key flag exists


# -- workers ----------------------------------------------------------------------------------
def test_two_workers_give_the_same_records_and_merged_stats(cli, server, tmp_path):
    url, srv = server(ttft_s=0.03, itl_s=0.005)
    common = ("--base-url", url, "--isl", "8", "--osl", "8", "--concurrency", "4", "--requests", "12", "--json")
    one = cli("bench", *common, "--out", str(tmp_path / "w1"))
    two = cli("bench", *common, "--out", str(tmp_path / "w2"), "--workers", "2")
    assert one.code == 0 and two.code == 0, (one.stderr, two.stderr)
    a, b = json.loads(one.stdout)["levels"][0], json.loads(two.stdout)["levels"][0]
    for key in ("requests", "completed", "failed", "output_tokens", "input_tokens"):
        assert a[key] == b[key], key
    assert a["ttft_ms"]["n"] == b["ttft_ms"]["n"] == 12
    # the statistics are those of the merged raw records: recomputing them from requests.jsonl agrees exactly
    from kneecap.metrics.summarize import summarize_level
    from kneecap.records import read_records

    again = summarize_level(read_records(tmp_path / "w2" / "requests.jsonl"), concurrency=4)
    for key in ("requests", "completed", "duration_s", "output_tok_s", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert again[key] == b[key], key
    assert abs(a["ttft_ms"]["p50"] - b["ttft_ms"]["p50"]) < 25.0  # same server timing, generous bound
    assert b["client"]["workers"] == 2 and len(b["client"]["per_worker"]) == 2
    recs = records(tmp_path / "w2")
    assert len(recs) == 12 and len({r["request_id"] for r in recs}) == 12
    assert len(sweep_log(srv)) == 24


def test_sigkill_with_workers_leaves_no_orphans_and_resumes(server, cli, tmp_path):
    import psutil

    url, _ = server(ttft_s=0.01, itl_s=0.02)
    out = tmp_path / "run"
    proc = popen_bench("--base-url", url, *SWEEP, "--out", str(out), "--quiet", "--workers", "2")
    wait_for_lines(out / "requests.jsonl", 10)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"orphaned worker processes: {[p.pid for p in alive]}"
    r = cli("bench", "--resume", str(out), "--quiet", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["level"] for lv in doc["levels"]] == [0, 1, 2, 3]
    assert all(lv["completed"] == 6 and lv["client"]["workers"] >= 1 for lv in doc["levels"])
    kept = records(out)
    assert len({r["request_id"] for r in kept}) == len(kept) == 4 * 7


def test_slo_breached_at_two_consecutive_levels_stops(cli, server, tmp_path):
    url, _ = server(ttft_s=0.03)
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1,2,3",
        "--requests",
        "3",
        "--slo",
        "ttft_p99_ms=5",
        "--out",
        str(tmp_path / "run"),
        "--json",
        "--fail-on",
        "slo",
    )
    assert r.code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    assert all(lv["slo"]["met"] is False for lv in doc["levels"])
    assert doc["stopped"]["reason"] == "slo_breach" and doc["stopped"]["at"] == 2
    assert "--fail-on slo" in r.stderr


def test_redact_keeps_no_server_strings(cli, server, tmp_path):
    url, _ = server(model="acme-internal-model-7", fault="http_500")
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--out",
        str(out),
        "--redact",
        "--json",
    )
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["levels"][0]["errors"] == {"http_500": 2}  # error kinds are kept
    assert (out / "report.html").exists()  # the report is rendered, and redacted like everything else
    for path in (p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert b"acme-internal-model-7" not in data and b"scripted 500" not in data, path


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--dataset", "/nonexistent/prompts.jsonl"), "prompts.jsonl"),
        (("--concurrency", "1,x"), "--concurrency"),
        (("--rate", "0"), "--rate"),
        (("--fail-on", "sometimes"), "--fail-on"),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(cli, server, tmp_path, args, needle):
    url, srv = server()
    base = ["--base-url", url, "--isl", "4", "--osl", "4"]
    if not any(a in ("--concurrency", "--rate") for a in args):
        base += ["--concurrency", "1"]
    out = tmp_path / "run"
    r = cli("bench", *base, *args, "--out", str(out))
    assert r.code == 2
    assert_one_line_error(r.stderr)
    assert needle in r.stderr
    assert not out.exists() and srv.log() == []


def test_duration_runs_closed_loop_rounds_until_time_is_up(cli, server, tmp_path):
    url, srv = server(ttft_s=0.001, itl_s=0.001)  # a few ms per request: one round of 2 x 32 is far too short
    out = tmp_path / "run"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "2",
        "--duration",
        "2",
        "--out",
        str(out),
        "--json",
    )
    assert r.code == 0, r.stderr
    level = json.loads(r.stdout)["levels"][0]
    assert level["requests"] > 2 * 32 and level["failed"] == 0
    assert 1.5 <= level["wall_s"] <= 10.0  # the duration, plus the requests in flight at the end
    recs = records(out)
    assert len(recs) == level["requests"] == len(sweep_log(srv))
    assert len({r["request_id"] for r in recs}) == len(recs)
    assert len({r["prompt_hash"] for r in recs}) == len(recs)  # every round draws new prompts
    assert any(r["request_id"].startswith("L0r1-") for r in recs)
    # one worker, many rounds: the client section says both (it once counted each round as a worker)
    # request ids: L0r<i> in round 0, L0r<round>-<i> after it
    rounds = 1 + max(int(r["request_id"][3:].split("-")[0]) if "-" in r["request_id"] else 0 for r in recs)
    client = level["client"]
    assert client["workers"] == 1 and client["rounds"] == rounds >= 2 and len(client["per_worker"]) == rounds
