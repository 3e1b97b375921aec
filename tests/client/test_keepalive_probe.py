"""kneecap.client.keepalive: the probe that tells whether a server keeps a connection open after a
streamed response, against the scripted server (tests/servers/scripted.py) configured per request."""

from __future__ import annotations

import time

import pytest

from kneecap.client.driver import ClientConfig, run_sync
from kneecap.client.keepalive import PROBE_PROMPT_PREFIX, probe_keepalive
from servers.scripted import start_scripted_server


@pytest.fixture(scope="module")
def server():
    url, srv = start_scripted_server(ttft_s=0.0, itl_s=0.002)
    yield url, srv
    srv.stop()


def probe(url: str, fault: str | None = None, endpoint: str = "completions"):
    extra = {"scripted": {"fault": fault}} if fault else {}
    return run_sync(
        probe_keepalive(
            ClientConfig(base_url=url, model="m", endpoint=endpoint, extra_body=extra), pause_s=0.1, timeout_s=10
        )
    )


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_server_that_keeps_connections_open(server, endpoint):
    url, srv = server
    before = len(srv.log())
    found = probe(url, endpoint=endpoint)
    assert found.kept_alive is True and found.requests_sent == 2, found
    deadline = time.monotonic() + 5  # the server logs a request when its response has ended, in its own process
    while len(srv.log()) < before + 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    entries = srv.log()[before:]
    assert len(entries) == 2 and all(PROBE_PROMPT_PREFIX in str(e["body"]) for e in entries)
    assert [e["request_on_connection"] for e in entries] == [1, 2]  # one connection, reused
    assert all(e["body"]["stream"] is True and e["body"]["max_tokens"] == 2 for e in entries)
    assert entries[0]["body"] != entries[1]["body"]  # unique prompts: a prefix cache cannot answer the second


def test_a_server_that_closes_after_each_response(server):
    found = probe(server[0], "close_after_response")  # as llama.cpp does after a streamed response
    assert found.kept_alive is False and "closed the connection after a streamed response" in found.detail


def test_a_server_that_drops_reused_connections_unanswered(server):
    found = probe(server[0], "drop_reused")
    assert found.kept_alive is False and "reused connection without answering" in found.detail


def test_a_failing_server_leaves_the_question_open(server):
    found = probe(server[0], "http_500")
    assert found.kept_alive is None and "HTTP 500" in found.detail and found.requests_sent == 1
