"""`kneecap simulate` against `kneecap serve` + `kneecap bench` on the same flags: the virtual-clock closed loop
(each slot's next request arrives one client turnaround after its response ends, so it misses the step in
flight) agrees with the same engine run in real time behind HTTP on throughput and TPOT; TTFT only loosely. The server is a real subprocess on a free
127.0.0.1 port, stopped by PID."""

from __future__ import annotations

import json

import pytest

from kneecap.cli.demo import start_server, stop_server

ARGS = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
LOAD = ["--isl", "1024", "--osl", "64", "--concurrency", "4", "--requests", "48"]


def test_simulate_agrees_with_serve_and_bench(cli, tmp_path):
    proc, url = start_server(ARGS)
    try:
        served = cli("bench", "--base-url", url, *LOAD, "--warmup", "0", "--out", str(tmp_path / "bench"), "--json",
                     "--no-report")
    finally:
        assert stop_server(proc) == 0
    assert served.code == 0, served.stderr
    simulated = cli("simulate", *ARGS, *LOAD, "--out", str(tmp_path / "sim"), "--json", "--no-report")
    assert simulated.code == 0, simulated.stderr
    real, sim = json.loads(served.stdout)["levels"][0], json.loads(simulated.stdout)["levels"][0]
    assert real["completed"] == sim["completed"] == 48
    assert real["output_tok_s"] == pytest.approx(sim["output_tok_s"], rel=0.05)
    assert real["tpot_ms"]["p50"] == pytest.approx(sim["tpot_ms"]["p50"], rel=0.10)
    # TTFT is looser: in virtual time the slots of a wave stay in lockstep (identical lengths finish in the same
    # step and refill together), while behind HTTP the responses of one step reach the client a few ms apart on a
    # shared machine, so some refills miss the next step and the waves split into smaller prefills (measured
    # here: served p50 from 0.7x to 1.0x the simulated one between runs)
    assert 0.5 < real["ttft_ms"]["p50"] / sim["ttft_ms"]["p50"] < 1.5
