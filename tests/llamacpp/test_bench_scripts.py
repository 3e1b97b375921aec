"""The benchmark tools in bench/: the Node scripted server (fast_server.js), the comparison's
server-side arithmetic (compare_clients.py) and the soak script's short mode (soak.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the scripts import their sibling modules, as when run from bench/
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


class Node:
    def __init__(self, tmp_path: Path, *flags: str):
        self.log = tmp_path / "server.jsonl"
        out = tmp_path / "server.stdout"
        with open(out, "wb") as fh:
            self.proc = subprocess.Popen(
                [NODE, str(BENCH / "fast_server.js"), "--port", "0", "--log", str(self.log), *flags],
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while not out.read_text().startswith("LISTENING "):
            assert self.proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "fast_server.js did not listen"
            time.sleep(0.02)
        self.url = out.read_text().split()[1]

    def stop(self) -> list[dict]:
        os.kill(self.proc.pid, signal.SIGTERM)
        assert self.proc.wait(timeout=10) == 0
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def node_server(tmp_path):
    servers = []

    def start(*flags: str) -> Node:
        servers.append(Node(tmp_path, *flags))
        return servers[-1]

    yield start
    for server in servers:
        if server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait()


def _stream(url: str, body: dict) -> tuple[list[dict], list[bytes]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    events, raw = [], []
    with urllib.request.urlopen(req, timeout=30) as resp:
        for line in resp:
            raw.append(line)
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                events.append(json.loads(line[6:]))
    assert raw[-2].strip() == b"data: [DONE]"
    return events, raw


@needs_node
def test_fast_server_streams_max_tokens_with_usage_and_logs_its_sends(node_server):
    server = node_server("--ttft-ms", "30", "--itl-ms", "10", "--tokens-per-chunk", "3")
    events, _ = _stream(
        server.url + "/v1/completions",
        {"prompt": "one two three four", "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}},
    )
    texts = [e["choices"][0]["text"] for e in events if e["choices"]]
    assert [t.count("x") for t in texts] == [3, 3, 3, 1]
    assert events[-1]["choices"] == [] and events[-1]["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 10,
        "total_tokens": 14,
    }
    chat, _ = _stream(
        server.url + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2, "stream": True},
    )
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": "x x"}
    (log_stream, log_chat) = server.stop()
    assert log_stream["tokens"] == [3, 3, 3, 1] and log_stream["complete"] and log_stream["max_tokens"] == 10
    sends = log_stream["send_ms"]
    assert len(sends) == 4 and sends == sorted(sends)
    for i, sent_ms in enumerate(sends):  # never early: event i goes out at or after body + TTFT + i * ITL
        assert sent_ms >= log_stream["body_ms"] + 30 + 10 * i - 1e-6, (i, sends, log_stream["body_ms"])
    assert log_chat["tokens"] == [2]


@needs_node
def test_fast_server_batches_events_per_write_only_at_itl_zero(node_server):
    server = node_server("--ttft-ms", "0", "--itl-ms", "0", "--events-per-write", "4")
    events, _ = _stream(server.url + "/v1/completions", {"prompt": "p", "max_tokens": 10, "stream": True})
    assert len(events) == 10  # still one token per event
    (entry,) = server.stop()
    assert entry["tokens"] == [1] * 10
    assert len(set(entry["send_ms"])) == 3  # 4 + 4 + 2 events, one timestamp per write


@needs_node
def test_fast_server_non_streaming_and_bad_requests(node_server):
    server = node_server("--ttft-ms", "0", "--itl-ms", "0")
    req = urllib.request.Request(server.url + "/v1/completions", data=b'{"prompt": "a b", "max_tokens": 3}')
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["choices"][0]["text"] == "x x x" and body["usage"]["completion_tokens"] == 3
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(server.url + "/v1/completions", data=b"{not json"), timeout=10)
    assert err.value.code == 400
    for body in (b"null", b"[1, 2]", b'{"prompt": "a", "max_tokens": 0}'):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(server.url + "/v1/completions", data=body), timeout=10)
        assert err.value.code == 400
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "fast-scripted"
    stats = json.loads(urllib.request.urlopen(server.url + "/stats", timeout=10).read())
    assert stats["completed"] == 1 and stats["bad_requests"] == 4
    server.stop()


@needs_node
def test_fast_server_rejects_bad_flags():
    proc = subprocess.run(
        [NODE, str(BENCH / "fast_server.js"), "--tokens-per-chunk", "0"], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 2 and "tokens-per-chunk" in proc.stderr


def _raw_exchange(url: str, data: bytes, until: bytes, timeout: float = 10.0) -> bytes:
    """Write raw bytes to the server and read until `until` has arrived (or the server closes)."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        got = b""
        while until not in got:
            part = sock.recv(65536)
            if not part:
                break
            got += part
        return got


def _post(path: str, body: dict, extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


@needs_node
def test_fast_server_http11_framing_keepalive_pipelining_and_aborts(node_server):
    """fast_server.js parses and writes HTTP/1.1 itself (Node's net module): one kept-alive connection
    carries several requests, pipelined ones are answered in order, a body split across packets is
    waited for, chunked request bodies get 411, and a client that leaves mid-stream is logged as
    incomplete, never as complete."""
    server = node_server("--ttft-ms", "0", "--itl-ms", "5")
    one = _post("/v1/completions", {"prompt": "first", "max_tokens": 2, "stream": True})
    two = _post("/v1/completions", {"prompt": "second", "max_tokens": 3, "stream": True}, "Connection: close\r\n")
    reply = _raw_exchange(server.url, one + two, until=b"never arrives: read to EOF")
    heads = [part for part in reply.split(b"\r\n") if part.startswith(b"HTTP/1.1 ")]
    assert heads == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]
    assert reply.count(b"Transfer-Encoding: chunked") == 2 and reply.count(b"\r\n0\r\n\r\n") == 2
    assert reply.count(b"data: [DONE]") == 2 and b"Connection: close" in reply.split(b"HTTP/1.1 200 OK")[2]
    # a body that arrives in two packets, 200 ms apart: body_ms is the second packet's arrival
    host, port = server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        req = _post("/v1/completions", {"prompt": "split", "max_tokens": 1})
        sock.sendall(req[:-5])
        time.sleep(0.2)
        sock.sendall(req[-5:])
        assert b'"completion_tokens":1' in sock.recv(65536)
    chunked = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    assert _raw_exchange(server.url, chunked, until=b"}}").startswith(b"HTTP/1.1 411 Length Required")
    assert _raw_exchange(server.url, b"GET /nowhere HTTP/1.1\r\n\r\n", until=b"}}").startswith(b"HTTP/1.1 404")
    # leave after the first event of a 50-token stream
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(_post("/v1/completions", {"prompt": "leaver", "max_tokens": 50, "stream": True}))
        got = b""
        while b"data: " not in got:
            got += sock.recv(65536)
    deadline = time.monotonic() + 5
    while json.loads(urllib.request.urlopen(server.url + "/stats", timeout=10).read())["aborted"] < 1:
        assert time.monotonic() < deadline, "the server did not notice the client leaving"
        time.sleep(0.02)
    log = server.stop()
    by_chars = {entry["prompt_chars"]: entry for entry in log}
    assert [e["complete"] for e in log].count(True) == 3 and by_chars[len("leaver")]["complete"] is False
    split = by_chars[len("split")]
    assert 190.0 <= split["body_ms"] - split["recv_ms"] < 2000.0


def test_per_token_gaps_follow_docs_metrics_itl():
    pairing = _load("pairing")
    assert pairing.per_token_gaps_ms([0.0, 0.010, 0.030], [1, 1, 1]) == pytest.approx([10.0, 20.0])
    # first chunk (2 tokens) adds nothing; a chunk of 3 after 30 ms gives three samples of 10 ms
    assert pairing.per_token_gaps_ms([0.0, 0.030], [2, 3]) == pytest.approx([10.0, 10.0, 10.0])
    # chunks without tokens (usage, keep-alive) are not boundaries
    assert pairing.per_token_gaps_ms([0.0, 0.005, 0.020], [1, 0, 1]) == pytest.approx([20.0])
    # the samples sum to the time spent streaming after the first chunk
    gaps = pairing.per_token_gaps_ms([1.0, 1.5, 1.9], [3, 1, 4])
    assert sum(gaps) == pytest.approx(900.0) and len(gaps) == 5


def test_server_side_reads_the_node_log(tmp_path):
    compare = _load("pairing")
    log = tmp_path / "server.jsonl"
    log.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": 1, "recv_ms": 100.0, "send_ms": [300.0, 320.0, 340.0], "tokens": [1, 1, 1], "complete": True},
                {"id": 0, "recv_ms": 0.0, "send_ms": [50.0], "tokens": [1], "complete": True},  # warmup, skipped
                {"id": 2, "recv_ms": 0.0, "send_ms": [10.0], "tokens": [1], "complete": False},  # aborted, ignored
            ]
        )
        + "\n"
    )
    side = compare.server_side(log, skip_first=1)
    assert side["requests"] == 1 and side["ttft_ms"] == [200.0] and side["itl_ms"] == pytest.approx([20.0, 20.0])


def _pair(sha, sent_s, chunk_times_s):
    return {
        "sha256": sha,
        "ok": True,
        "sent_s": sent_s,
        "chunk_times_s": chunk_times_s,
        "chunk_tokens": [1] * len(chunk_times_s),
    }


def test_paired_errors_split_ttft_into_send_and_receive_lag():
    pairing = _load("pairing")
    # server clock in ms; client A sent at 1.000 s, server got it at 1002 ms, first send at 1202, A saw it at 1.205 s
    server = [
        {"prompt_sha256": "a", "recv_ms": 1002.0, "send_ms": [1202.0, 1222.0, 1242.0], "tokens": [1, 1, 1]},
        {"prompt_sha256": "b", "recv_ms": 1001.0, "send_ms": [1201.0, 1221.0], "tokens": [1, 1]},
    ]
    client = [_pair("a", 1.000, [1.205, 1.2255, 1.2455]), _pair("b", 1.000, [1.2015, 1.2215])]
    same_clock = pairing.paired_errors(client, server, clock="monotonic")
    assert same_clock["paired"] == 2
    assert same_clock["ttft_err_mean_ms"] == pytest.approx((5.0 + 1.5) / 2)  # (205-200) and (201.5-200)
    assert same_clock["send_lag_mean_ms"] == pytest.approx((2.0 + 1.0) / 2)
    assert same_clock["recv_lag_mean_ms"] == pytest.approx((3.0 + 0.5) / 2)
    assert same_clock["itl_err_mean_ms"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)  # A's second gap is 20.5 ms
    # a client on another clock: the sum is unchanged, the split is measured from the fastest send (b: 1 ms)
    shifted = [_pair(c["sha256"], c["sent_s"] - 50.0, [t - 50.0 for t in c["chunk_times_s"]]) for c in client]
    other_clock = pairing.paired_errors(shifted, server, clock="relative")
    assert other_clock["ttft_err_mean_ms"] == pytest.approx(same_clock["ttft_err_mean_ms"])
    assert other_clock["send_lag_mean_ms"] == pytest.approx(0.5) and other_clock["recv_lag_mean_ms"] == pytest.approx(
        2.75
    )
    assert pairing.paired_errors([_pair("zzz", 1.0, [1.1])], server, clock="monotonic") == {"paired": 0}
    # the client read a's first two events in one read: spans still compare, token pairs do not
    merged = {"sha256": "a", "ok": True, "sent_s": 1.000, "chunk_times_s": [1.2225, 1.2425], "chunk_tokens": [2, 1]}
    spans = pairing.paired_errors([merged], server[:1], clock="monotonic")
    assert spans["itl_err_mean_ms"] == pytest.approx(((1242.5 - 1222.5) - (1242.0 - 1202.0)) / 2)
    assert spans["itl_tokens_paired_one_to_one"] == 0 and spans["itl_tokens"] == 2


def test_rss_growth_and_soak_verdict():
    soak = _load("soak")
    mib = soak.MIB
    flat = [(float(t), 100 * mib) for t in range(60)]
    assert soak.rss_growth(flat)["growth_bytes"] == 0 and soak.rss_growth(flat)["slope_bytes_per_min"] == 0
    warming = [(float(t), min(t, 8) * 60 * mib) for t in range(60)]  # fills buffers for 8 s, then flat
    assert soak.rss_growth(warming)["growth_bytes"] == 0 and soak.rss_growth(warming)["max_bytes"] == 480 * mib
    leaking = [(float(t), 100 * mib + t * mib) for t in range(60)]  # 1 MiB per second
    grown = soak.rss_growth(leaking)
    assert grown["growth_bytes"] > 30 * mib and grown["slope_bytes_per_min"] == pytest.approx(60 * mib)
    assert soak.rss_growth(leaking[:8])["growth_bytes"] is None  # shorter than the warm-up: no verdict
    report = {
        "exit_code": 0,
        "stderr_tail": "",
        "records": 10,
        "lost_vs_summary": 0,
        "lost_vs_server": 2,
        "error_count": 0,
        "errors": {},
        "rss": grown,
    }
    problems = soak.verdict(report, max_growth_mib=16)
    assert any("lost_vs_server" in p for p in problems) and any("RSS grew" in p for p in problems)
    spiky = {**report, "lost_vs_server": 0, "rss": soak.rss_growth(flat[:-1] + [(60.0, 3000 * mib)])}
    assert soak.verdict(spiky, max_growth_mib=16) == []  # a final spike does not move the final median
    assert soak.verdict(spiky, max_growth_mib=16, max_rss_mib=1024) == ["RSS peaked at 3000 MiB (> 1024 MiB)"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["node", "serve"])
def test_soak_short_run_loses_nothing(tmp_path, target):
    """bench/soak.py for 20 s at C=256 against fast_server.js (which counts what it received) or
    `kneecap serve` (issue 7's target): exit 0 = no lost record, no error, bounded RSS."""
    if target == "node" and NODE is None:
        pytest.skip("node is not installed")
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "soak.py"),
            "--target",
            target,
            "--minutes",
            "0.34",
            "--out",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report["problems"]
    assert report["records"] > 256 and report["lost_vs_summary"] == 0 and report["error_count"] == 0
    if target == "node":
        assert report["lost_vs_server"] == 0
