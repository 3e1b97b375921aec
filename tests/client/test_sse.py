"""SSE parser: WHATWG rules, and the same events whatever way the bytes are split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.client.sse import SseEvent, SseLineTooLong, SseParser

SAMPLE = (
    b"\xef\xbb\xbf: keep-alive comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: update\rdata: line one\rdata:line two\r\r"
    b"id: 42\ndata\n\n"
    b"retry: 1500\ndata:  two spaces\n\n"
    b"data: [DONE]\n\n"
    b"data: unterminated"
)
SAMPLE_EVENTS = [
    SseEvent("message", b'{"a": 1}', None),
    SseEvent("update", b"line one\nline two", None),
    SseEvent("message", b"", "42"),
    SseEvent("message", b" two spaces", "42"),
    SseEvent("message", b"[DONE]", "42"),
]


def feed_pieces(pieces, limit=1 << 20):
    parser = SseParser(limit)
    out = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    return out, parser


def test_whatwg_rules_on_a_sample():
    events, parser = feed_pieces([SAMPLE])
    assert events == SAMPLE_EVENTS
    assert parser.retry_ms == 1500
    assert parser.pending  # "data: unterminated" never dispatched


@pytest.mark.parametrize("cut", range(len(SAMPLE) + 1))
def test_every_single_split_point(cut):
    events, _ = feed_pieces([SAMPLE[:cut], SAMPLE[cut:]])
    assert events == SAMPLE_EVENTS


def test_byte_by_byte():
    events, _ = feed_pieces([SAMPLE[i : i + 1] for i in range(len(SAMPLE))])
    assert events == SAMPLE_EVENTS


def test_crlf_split_across_reads_is_one_line_end():
    events, _ = feed_pieces([b"data: x\r", b"\n", b"\r", b"\ndata: y\r\n\r\n"])
    assert [e.data for e in events] == [b"x", b"y"]


def test_lone_cr_lines():
    assert [e.data for e in SseParser().feed(b"data: a\r\rdata: b\r\r")] == [b"a", b"b"]


def test_fields_and_ignored_lines():
    events = SseParser().feed(b"foo: bar\nid: a\x00b\ndata: x\n\nretry: 12x\ndata: y\n\n")
    assert [(e.data, e.id) for e in events] == [(b"x", None), (b"y", None)]


def test_event_type_resets_after_dispatch():
    events = SseParser().feed(b"event: error\ndata: e\n\ndata: m\n\nevent: ghost\n\ndata: n\n\n")
    assert [(e.event, e.data) for e in events] == [("error", b"e"), ("message", b"m"), ("message", b"n")]


def test_huge_line_raises_instead_of_growing():
    parser = SseParser(max_line_bytes=1024)
    parser.feed(b"data: ")
    with pytest.raises(SseLineTooLong):
        for _ in range(100):
            parser.feed(b"x" * 100)


def test_huge_complete_line_and_huge_event_raise():
    with pytest.raises(SseLineTooLong):
        SseParser(1024).feed(b"data: " + b"x" * 2000 + b"\n\n")
    with pytest.raises(SseLineTooLong):
        SseParser(1024).feed(b"data: xxxxxxxxxx\n" * 200)


# ---- hypothesis: random streams, random splits --------------------------------------------

_text = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20)
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw):
    """(bytes, expected events) built from a random event structure with random line endings."""
    out = bytearray()
    prev = [b""]

    def eol():
        choice = draw(_eol)
        if prev[0] == b"\r" and choice == b"\n":  # CR then LF would be one CRLF line end
            choice = b"\r\n"
        prev[0] = choice
        return choice

    if draw(st.booleans()):
        out += b"\xef\xbb\xbf"
    expected = []
    last_id = None
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out += b":" + draw(_text).encode() + eol()
        event = draw(st.one_of(st.none(), st.sampled_from(["update", "error", "x y"])))
        if event is not None:
            out += b"event: " + event.encode() + eol()
        if draw(st.booleans()):
            ident = draw(st.text(alphabet="abc123", max_size=5))
            out += b"id: " + ident.encode() + eol()
            last_id = ident
        values = []
        for line in draw(st.lists(_text, min_size=1, max_size=3)):
            body = line.encode()
            if draw(st.booleans()):
                out += b"data: " + body + eol()
                values.append(body)
            else:
                out += b"data:" + body + eol()
                values.append(body[1:] if body.startswith(b" ") else body)
        out += eol()
        expected.append(SseEvent(event or "message", b"\n".join(values), last_id))
    return bytes(out), expected


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(0, 10_000), max_size=8))
def test_random_streams_any_split_same_events(stream_and_expected, cuts):
    stream, expected = stream_and_expected
    whole = SseParser().feed(stream)
    assert whole == expected
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(stream[prev:p])
        prev = p
    pieces.append(stream[prev:])
    split, _ = feed_pieces(pieces)
    assert split == whole


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=6))
def test_arbitrary_bytes_never_crash_and_split_invariant(stream, cuts):
    whole = SseParser().feed(stream)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(stream[prev:p])
        prev = p
    pieces.append(stream[prev:])
    assert feed_pieces(pieces)[0] == whole
