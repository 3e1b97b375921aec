"""Chunked transfer decoding (RFC 9112 7.1) used by the transport-level body reader."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.client.body_tap import ChunkDecoder, ChunkError


def chunked(pieces, trailer=b""):
    return b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces) + b"0\r\n" + trailer + b"\r\n"


def decode_in(parts):
    d = ChunkDecoder()
    out = []
    for part in parts:
        out.extend(d.feed(part))
    return b"".join(out), d


PIECES = [b'data: {"a": 1}\n\n', b"x" * 300, b"\r\n\r\n", b"data: [DONE]\n\n"]
BODY = chunked(PIECES)


@pytest.mark.parametrize("cut", range(len(BODY) + 1))
def test_every_split_point(cut):
    payload, d = decode_in([BODY[:cut], BODY[cut:]])
    assert payload == b"".join(PIECES) and d.ended


def test_byte_by_byte_with_extensions_and_trailers():
    body = b"5;name=value\r\nhello\r\n" + b"A\r\n0123456789\r\n" + b"0\r\nX-Trailer: 1\r\n\r\n"
    payload, d = decode_in([body[i : i + 1] for i in range(len(body))])
    assert payload == b"hello0123456789" and d.ended


def test_bytes_after_the_end_are_not_payload():
    payload, d = decode_in([BODY + b"HTTP/1.1 200 OK\r\n"])
    assert d.ended and payload == b"".join(PIECES)


@pytest.mark.parametrize(
    "bad", [b"zz\r\nhello\r\n", b"5\r\nhelloXX", b"0x5\r\nhello\r\n", b"-5\r\nhello\r\n", b"1" * 300]
)
def test_bad_framing_raises(bad):
    with pytest.raises(ChunkError):
        ChunkDecoder().feed(bad)


def test_a_line_without_its_crlf_waits_up_to_its_limit():
    d = ChunkDecoder()
    assert d.feed(b"5;ext=" + b"x" * 200) == [] and not d.ended  # a size line with extensions, still arriving
    assert d.feed(b"\r\nhello\r\n0\r\n") == [b"hello"]
    assert d.feed(b"Trailer: " + b"t" * 8000) == [] and not d.ended
    assert d.feed(b"\r\n\r\n") == [] and d.ended
    with pytest.raises(ChunkError, match="chunk size line too long"):
        ChunkDecoder().feed(b"5;ext=" + b"x" * 300)
    with pytest.raises(ChunkError, match="trailer line too long"):
        ChunkDecoder().feed(b"0\r\nTrailer: " + b"t" * 9000)


def test_mid_chunk_start_is_detected_on_the_first_read():
    # what the tap sees if aiohttp stopped inside a chunk: SSE bytes, not a size line
    with pytest.raises(ChunkError):
        ChunkDecoder().feed(b'{"choices": []}\n\n\r\n2a\r\n')


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=70), max_size=8), st.lists(st.integers(0, 2000), max_size=6))
def test_random_bodies_any_split(pieces, cuts):
    body = chunked(pieces)
    points = sorted({c % (len(body) + 1) for c in cuts})
    parts, prev = [], 0
    for p in points:
        parts.append(body[prev:p])
        prev = p
    parts.append(body[prev:])
    payload, d = decode_in(parts)
    assert payload == b"".join(pieces) and d.ended


# ---- the transport-level reader (fused de-chunk + SSE fast path, and its fallbacks) ----------

import asyncio  # noqa: E402

from kneecap.client.body_tap import BodyTap, TruncatedError  # noqa: E402
from kneecap.client.sse import SseParser  # noqa: E402


class FakeProtocol(asyncio.Protocol):
    def __init__(self):
        self.lost = []

    def connection_lost(self, exc):
        self.lost.append(exc)


def run_tap(reads, max_line_bytes=1 << 20):
    loop = asyncio.new_event_loop()
    try:
        done = loop.create_future()
        calls = []
        tap = BodyTap(FakeProtocol(), SseParser(max_line_bytes), 0.0, done, lambda t, evs: calls.append(list(evs)))
        for raw in reads:
            tap.data_received(raw)
        return tap, done, calls
    finally:
        loop.close()


EVENTS = [
    b'data: {"n": 1}\n\n',
    b": ping\n\n",
    b'data: {"n": 2}\r\n\r\n',
    b"event: error\ndata: x\n\n",
    b'data: {"n": 3}\n\n',
    b"data: [DONE]\n\n",
]
STREAM = chunked(EVENTS)
EXPECTED = SseParser().feed(b"".join(EVENTS))


def test_one_call_per_read_even_when_the_fast_path_stops_midway():
    # read 1: a data event, then a comment (not a data event: the fast path stops), then a CRLF event
    first = chunked(EVENTS[:3]).removesuffix(b"0\r\n\r\n")
    tap, done, calls = run_tap([first, chunked(EVENTS[3:])])
    assert done.result() is True
    assert len(calls) == 2 and [e for c in calls for e in c] == EXPECTED


@pytest.mark.parametrize("cut", range(0, len(STREAM) + 1, 3))
def test_tap_split_anywhere_gives_the_same_events(cut):
    tap, done, calls = run_tap([STREAM[:cut], STREAM[cut:]] if cut else [STREAM])
    assert [e for c in calls for e in c] == EXPECTED and done.result() is True


def test_first_read_not_at_a_chunk_boundary_is_handed_back():
    tap, done, calls = run_tap([b'{"n": 1}\n\n\r\n10\r\n'])
    assert done.result() is False and tap.unclaimed == b'{"n": 1}\n\n\r\n10\r\n' and calls == []


def test_runaway_event_and_truncation_fail_the_tap():
    _, done, _ = run_tap([chunked([b"data: " + b"x" * 5000 + b"\n\n"])], max_line_bytes=1024)
    assert type(done.exception()).__name__ == "SseLineTooLong"
    tap, done, _ = run_tap([chunked(EVENTS[:2]).removesuffix(b"0\r\n\r\n")])
    assert not done.done()
    loop = asyncio.new_event_loop()
    try:
        tap.connection_lost(None)
    finally:
        loop.close()
    assert isinstance(done.exception(), TruncatedError) and tap.orig.lost == [None]


class HandBackRecorder(asyncio.Protocol):
    def __init__(self):
        self.seen = []

    def data_received(self, data):
        self.seen.append(("data", data))

    def connection_lost(self, exc):
        self.seen.append(("lost", exc))


def test_reads_after_the_hand_back_are_kept_for_aiohttp_in_order():
    loop = asyncio.new_event_loop()
    try:
        orig = HandBackRecorder()
        done = loop.create_future()
        tap = BodyTap(orig, SseParser(1 << 20), 0.0, done, lambda t, evs: None)
        tap.data_received(b"x" * 300)  # mid-chunk: handed back
        tap.data_received(b"y" * 300)  # arrives before the driver restores aiohttp's protocol
        tap.data_received(b"\r\n0\r\n\r\n")
        assert done.result() is False and tap.unclaimed == b"x" * 300 + b"y" * 300 + b"\r\n0\r\n\r\n"
        tap.connection_lost(None)
        assert (
            orig.seen == [("data", b"x" * 300 + b"y" * 300 + b"\r\n0\r\n\r\n"), ("lost", None)] and tap.unclaimed == b""
        )
    finally:
        loop.close()
