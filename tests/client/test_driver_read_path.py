"""The read path a Client chooses (kneecap.client.read_path): the body tap when this aiohttp has what it
touches and the loopback self-test passes, aiohttp's own reader otherwise, and a level run on the
fallback still measures what the scripted server sent; summary.json says which path a level took."""

from __future__ import annotations

import json
import sys
import time

import pytest

from kneecap.client import driver, read_path
from kneecap.client.driver import Client, ClientConfig, run_sync
from kneecap.workload import Workload, make_requests
from servers.scripted import start_scripted_server

from test_driver import by_hash, closed

N = 6


@pytest.fixture(scope="module")
def server():
    url, srv = start_scripted_server(ttft_s=0.02, itl_s=0.005)
    yield url, srv
    srv.stop()


def opened(**kwargs) -> Client:
    """A Client opened (and closed) on a port nobody listens on: only the read-path choice runs."""

    async def go():
        async with Client(ClientConfig(base_url="http://127.0.0.1:9", model="m"), **kwargs) as client:
            return client

    return run_sync(go())


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux-only")
def test_this_aiohttp_gets_the_tap_with_kernel_stamps_unless_told_otherwise():
    assert read_path.missing_tap_hooks() == []
    assert (opened().read_path, opened().read_path_note) == (read_path.TAP_KERNEL, None)
    assert opened(kernel_stamps=False).read_path == read_path.TAP
    assert opened(tap_bodies=False).read_path == read_path.AIOHTTP


def test_a_missing_hook_is_named(monkeypatch):
    import aiohttp

    class Stripped:  # stands in for an aiohttp.StreamReader without read_nowait
        is_eof = readany = set_exception = None

    monkeypatch.setattr(aiohttp, "StreamReader", Stripped)
    assert read_path.missing_tap_hooks() == ["StreamReader.read_nowait"]
    client = opened()
    assert client.read_path == read_path.AIOHTTP and "lacks StreamReader.read_nowait" in client.read_path_note


def test_a_broken_hand_back_is_caught_by_the_self_test(monkeypatch):
    """If handing the terminal chunk back to aiohttp no longer completes its message, the connection
    cannot be reused: the self-test sees two connections for its two requests and falls back."""
    monkeypatch.setattr(driver, "terminal_chunk", lambda: b"")
    client = opened()
    assert client.read_path == read_path.AIOHTTP
    assert "2 connections for 2 requests" in client.read_path_note


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux-only")
def test_without_kernel_stamps_in_the_self_test_the_tap_reads_on_the_loops_clock(monkeypatch):
    import errno

    from kneecap.client import body_tap

    def no_more_files(fd):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(body_tap.os, "dup", no_more_files)  # KernelStampedReader cannot take the socket
    client = opened()
    assert client.read_path == read_path.TAP and "SO_TIMESTAMPNS" in client.read_path_note


def test_forced_fallback_measures_correctly_and_says_aiohttp(server, monkeypatch):
    monkeypatch.setattr(driver, "missing_tap_hooks", lambda: ["ResponseHandler.data_received"])
    url, srv = server
    counters = {}
    cfg = ClientConfig(base_url=url, model="m", extra_body={"scripted": {"ttft_s": 0.01, "itl_s": 0.004}})
    run, epoch = closed(cfg, make_requests(Workload.fixed(8, 12), N, seed=21), 2, counters=counters)
    assert (counters["tapped"], counters["via_aiohttp"]) == (0, N)
    stats = run.client_stats()
    assert stats["read_path"] == "aiohttp"
    assert "lacks ResponseHandler.data_received" in stats["read_path_note"]
    assert stats["streams_by_read_path"] == {"body_tap+kernel_stamps": 0, "body_tap": 0, "aiohttp": N}
    assert (stats["kernel_stamped_streams"], stats["loop_stamped_streams"]) == (0, N)
    log = by_hash(srv, run.records)
    # stamped when the event loop reads, so after the server's send, and later by at most what the
    # client measured of its own loop's lag (a busy box delays the loop; the ticker sees it too)
    late_s = stats["loop_lag_max_ms"] / 1e3 + 0.005
    delays = []
    for rec in run.records:
        assert rec.ok and rec.output_tokens == 12 and sum(rec.chunk_tokens) == 12, rec.error_message
        sends = log[rec.prompt_hash]["chunk_send_times"]
        cum = 0
        for t, k in zip(rec.chunk_times, rec.chunk_tokens):
            cum += k
            delays.append(epoch + t - sends[cum - 1])  # each read vs the send of the last chunk it holds
        # the stream's span, client side vs server side (12 tokens, 4 ms apart)
        assert abs((rec.chunk_times[-1] - rec.first_token_at) - (sends[-1] - sends[0])) < late_s
    assert 0 < min(delays) and max(delays) < late_s, (min(delays), max(delays), late_s)


def test_summary_json_names_the_read_path_per_level(server, tmp_path, monkeypatch):
    """`kneecap bench --workers 1` in this process (so the fallback can be forced): each level's
    client.read_path and its stream counts; then the default path, from the real CLI in a subprocess."""
    from clitools import run_cli
    from kneecap.cli import main

    url, _ = server
    args = [
        "bench",
        "--base-url",
        url,
        "--isl",
        "16",
        "--osl",
        "4",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--workers",
        "1",
        "--json",
        "--no-report",
    ]
    monkeypatch.setattr(driver, "missing_tap_hooks", lambda: ["Connection.protocol"])
    assert main([*args, "--out", str(tmp_path / "fallback")]) == 0
    levels = json.loads((tmp_path / "fallback" / "summary.json").read_text())["levels"]
    assert [lv["client"]["read_path"] for lv in levels] == ["aiohttp", "aiohttp"]
    assert [lv["client"]["streams_by_read_path"]["aiohttp"] for lv in levels] == [4, 4]
    monkeypatch.undo()
    r = run_cli(*args, "--out", str(tmp_path / "default"))
    assert r.code == 0, r.stderr
    expected = read_path.TAP_KERNEL if sys.platform == "linux" else read_path.TAP
    for lv in json.loads(r.stdout)["levels"]:
        assert lv["client"]["read_path"] == expected
        assert lv["client"]["streams_by_read_path"][expected] == 4


def test_workers_that_disagree_are_mixed():
    from kneecap.sweep.level import LevelOutcome
    from kneecap.sweep.workers import merge_outcomes

    def outcome(path, n):
        return LevelOutcome(num_records=n, client={"read_path": path, "streams_by_read_path": {path: n}})

    merged = merge_outcomes([outcome("body_tap", 3), outcome("aiohttp", 2)], 2)
    assert merged["read_path"] == "mixed" and merged["streams_by_read_path"] == {"body_tap": 3, "aiohttp": 2}
    assert merge_outcomes([outcome("aiohttp", 1), outcome("aiohttp", 2)], 2)["read_path"] == "aiohttp"


def test_the_self_test_costs_little():
    t0 = time.perf_counter()
    for _ in range(5):
        assert opened().read_path != read_path.AIOHTTP
    assert (time.perf_counter() - t0) / 5 < 0.5  # a loopback server and two 3-token streams
