"""The same fault matrix for `kneecap bench` (audit of issue 7 item 1; bench's own tests live in
tests/bench_cli/). Per fault: the sweep ends within a bound, every request is in requests.jsonl with
its error kind, the level counts them by kind, the sweep stops with a reason, and the exit code is 0
unless --fail-on asks (then 1, with one line saying why)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from servers.scripted import start_scripted_server
from test_reliability_run import FAULTS

BOUND_S = 60
REQUESTS = 4


def bench(url: str, out, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kneecap",
            "bench",
            "--base-url",
            url,
            "--isl",
            "16",
            "--osl",
            "8",
            "--concurrency",
            "2,4",
            "--requests",
            str(REQUESTS),
            "--timeout",
            "2",
            "--json",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    return proc, time.monotonic() - t0


# a server that answers the first completion with a 200 that is not JSON or an event stream is not an
# OpenAI-compatible server: bench says so before the first level (one line, exit 2) instead of measuring it
NOT_OPENAI = {"wrong_content_type"}


def test_bench_names_a_server_that_is_not_openai_compatible(tmp_path):
    url, srv = start_scripted_server(fault="wrong_content_type", ttft_s=0.0, itl_s=0.002, fault_after_chunks=1)
    try:
        proc, elapsed = bench(url, tmp_path / "out", "--fail-on", "errors")
    finally:
        srv.stop()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "not an OpenAI-compatible server" in lines[0], proc.stderr
    assert not (tmp_path / "out" / "summary.json").exists() and elapsed < 45


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(set(FAULTS) - NOT_OPENAI))
def test_bench_survives_each_fault(tmp_path, fault):
    url, srv = start_scripted_server(
        fault=fault, ttft_s=0.0, itl_s=0.002, fault_after_chunks=1, slow_loris_interval_s=0.1
    )
    try:
        # exit 0 unless asked: checked once (http_500), the other faults run with --fail-on errors (exit 1)
        plain = bench(url, tmp_path / "plain")[0] if fault == "http_500" else None
        asked, elapsed = bench(url, tmp_path / "asked", "--fail-on", "errors")
    finally:
        srv.stop()
    kinds = FAULTS[fault] | {"timeout"} if fault == "stall" else FAULTS[fault]  # --timeout bounds the stall too
    if plain is not None:
        assert plain.returncode == 0 and json.loads(plain.stdout)["levels"], plain.stderr
    assert asked.returncode == 1 and "--fail-on errors" in asked.stderr.strip().splitlines()[-1], asked.stderr
    assert "Traceback" not in asked.stderr and "internal error" not in asked.stderr
    assert elapsed < 45
    summary = json.loads(asked.stdout)
    first = summary["levels"][0]
    assert first["failed"] == first["requests"] == REQUESTS and set(first["errors"]) <= kinds, first["errors"]
    assert summary["stopped"] and summary["stopped"]["reason"]
    records = [json.loads(line) for line in (tmp_path / "asked" / "requests.jsonl").read_text().splitlines()]
    assert len(records) == sum(lv["requests"] for lv in summary["levels"]) and all(
        r["error_kind"] in kinds for r in records
    )


def test_bench_all_failed_prints_only_its_own_lines(tmp_path):
    url, srv = start_scripted_server(fault="http_500")
    try:
        proc, _ = bench(url, tmp_path / "out", "--fail-on", "errors")
    finally:
        srv.stop()
    lines = proc.stderr.strip().splitlines()
    # the keep-alive probe's note (its requests got HTTP 500 too), then the --fail-on line; nothing else
    # (no plotting warning about empty data, no traceback)
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith(
        "note: could not tell whether the server keeps connections open (probe request 1 answered HTTP 500)"
    ), proc.stderr
    assert lines[1] == "bench: 4 request(s) failed (--fail-on errors)", proc.stderr
