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


PIECES = [b"data: {\"a\": 1}\n\n", b"x" * 300, b"\r\n\r\n", b"data: [DONE]\n\n"]
BODY = chunked(PIECES)


@pytest.mark.parametrize("cut", range(len(BODY) + 1))
def test_every_split_point(cut):
    payload, d = decode_in([BODY[:cut], BODY[cut:]])
    assert payload == b"".join(PIECES) and d.ended and d.leftover == b""


def test_byte_by_byte_with_extensions_and_trailers():
    body = b"5;name=value\r\nhello\r\n" + b"A\r\n0123456789\r\n" + b"0\r\nX-Trailer: 1\r\n\r\n"
    payload, d = decode_in([body[i:i + 1] for i in range(len(body))])
    assert payload == b"hello0123456789" and d.ended


def test_bytes_after_the_end_are_leftover():
    payload, d = decode_in([BODY + b"HTTP/1.1 200 OK\r\n"])
    assert d.ended and d.leftover == b"HTTP/1.1 200 OK\r\n"


@pytest.mark.parametrize("bad", [b"zz\r\nhello\r\n", b"5\r\nhelloXX", b"0x5\r\nhello\r\n", b"-5\r\nhello\r\n",
                                 b"1" * 300])
def test_bad_framing_raises(bad):
    with pytest.raises(ChunkError):
        ChunkDecoder().feed(bad)


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
