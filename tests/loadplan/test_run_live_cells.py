"""A live `kneecap run` cell is one level of the one level runner with the HTTP driver, as `kneecap bench` runs
a level: the same summary keys, the server's /metrics scraped per cell in the one server_metrics shape, the
client's read path and lag; and its prompts come from the same client setup, so a server with a small
vocabulary refuses none of them."""

from __future__ import annotations

import json
import textwrap

import pytest

from servers.scripted import start_scripted_server

# keys only a load-plan cell has (the run judges output validity; bench has no such verdict)
RUN_ONLY_KEYS = {"invalid_outputs"}


def _plan(tmp_path, url: str, *, keepalive: str = "auto") -> str:
    plan = tmp_path / "live.yaml"
    plan.write_text(
        textwrap.dedent(f"""\
        name: live-cells
        seed: 2
        classes:
          c: {{input: 16, output: 8}}
        state: {{warmup_requests: 0}}
        load: {{steps: [1, 2], requests_per_cell: 4}}
        candidates:
          - name: srv
            target: {{kind: server, base_url: "{url}", timeout_s: 30, keepalive: {keepalive}}}
        """)
    )
    return str(plan)


@pytest.fixture(scope="module")
def serve_url():
    """`kneecap serve` on the simulated engine: it serves /metrics as vLLM does."""
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm"])
    try:
        yield url
    finally:
        stop_server(proc)


def test_a_live_cell_has_the_shape_of_a_bench_level(cli, tmp_path, serve_url):
    bench = cli(
        "bench",
        "--base-url",
        serve_url,
        "--isl",
        "16",
        "--osl",
        "8",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--out",
        str(tmp_path / "bench"),
        "--json",
        "--no-report",
        timeout=300,
    )
    assert bench.code == 0, bench.stderr
    run = cli("run", _plan(tmp_path, serve_url), "--out", str(tmp_path / "run"), "--json", "--no-report", timeout=300)
    assert run.code == 0, run.stderr
    levels = json.loads(bench.stdout)["levels"]
    cells = [c for c in json.loads(run.stdout)["cells"] if c.get("metrics")]
    assert len(levels) == 2 and cells
    for cell in cells:
        metrics, level = cell["metrics"], levels[0]
        assert set(metrics) - RUN_ONLY_KEYS == set(level), set(metrics) ^ set(level)
        assert metrics["requests"] == metrics["completed"] == 4 and metrics["failed"] == 0
        # /metrics scraped over the cell, in the one server_metrics shape
        assert metrics["server_metrics"]["source"] == level["server_metrics"]["source"] == "prometheus"
        assert set(metrics["server_metrics"]) == set(level["server_metrics"])
        assert metrics["server_metrics"]["running_max"] is not None
        # the client's own account of the level: its read path and its lag
        assert metrics["client"]["read_path"] == level["client"]["read_path"]
        assert set(metrics["client"]) == set(level["client"])
        assert set(metrics["schedule_lag_ms"] or {}) == set(level["schedule_lag_ms"] or {})
        worker, bench_worker = metrics["client"]["per_worker"][0], level["client"]["per_worker"][0]
        assert set(worker) == set(bench_worker) and worker["loop_lag_n"] > 0 and worker["loop_lag_p99_ms"] is not None
        # the cell's records are the level's: one per request, from the file the runner read back
        records = [json.loads(line) for line in (tmp_path / "run" / cell["records"]).read_text().splitlines()]
        assert len(records) == 4 and {r["level"] for r in records} == {cell["index"]}


def test_a_small_vocabulary_server_refuses_no_prompt_of_a_live_cell(cli, tmp_path):
    """A server with a 260-token vocabulary answers HTTP 400 to any token id past it (as vLLM does): the run's
    prompts come from the shared client setup, which finds a way the server accepts before the first cell."""
    url, srv = start_scripted_server(vocab_size=260)
    try:
        r = cli(
            "run",
            _plan(tmp_path, url, keepalive="true"),
            "--out",
            str(tmp_path / "o"),
            "--json",
            "--no-report",
            timeout=300,
        )
        log = srv.log()
    finally:
        srv.stop()
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    prompts = summary["identities"]["srv"]["prompts"]
    cells = [c for c in summary["cells"] if c.get("metrics")]
    assert cells
    for cell in cells:
        assert cell["metrics"]["failed"] == 0 and cell["metrics"]["completed"] == 4, cell["metrics"]["errors"]
    refused = [e for e in log if e.get("status") == 400]
    # only check requests were refused (the ways the server does not accept), never a cell's request
    assert len(refused) == prompts["check_requests"] - 1
    assert prompts["way"] != "token_ids_default_range"
