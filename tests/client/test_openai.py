"""OpenAI bodies and chunk decoding (pure)."""

from __future__ import annotations

import orjson
import pytest

from kneecap.client.openai import decode_stream, encode_body, request_body
from kneecap.client.sse import SseEvent, SseParser
from kneecap.errors import KneecapError


def ev(obj, event="message"):
    return SseEvent(event, obj if isinstance(obj, bytes) else orjson.dumps(obj))


def comp(text, finish=None, usage=None):
    o = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        o["usage"] = usage
    return ev(o)


def chat(delta, finish=None):
    return ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE_ONLY = ev(
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
    }
)
DONE = SseEvent("message", b"[DONE]")


def test_completions_body():
    body = request_body(
        "completions",
        "m",
        [5, 6, 7],
        128,
        ignore_eos=True,
        min_tokens=True,
        continuous_usage_stats=True,
        extra_body={"temperature": 0, "cache_prompt": False},
    )
    assert body == {
        "model": "m",
        "prompt": [5, 6, 7],
        "max_tokens": 128,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "min_tokens": 128,
        "temperature": 0,
        "cache_prompt": False,
    }
    assert orjson.loads(encode_body(body)) == body


def test_chat_body_and_plain_defaults():
    body = request_body("chat", "m", "hello there", 8)
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request_body("completions", "m", "x", 4, stream=False) == {
        "model": "m",
        "prompt": "x",
        "max_tokens": 4,
        "stream": False,
    }


@pytest.mark.parametrize("args", [("chat", "m", [1, 2], 4), ("completions", "m", "x", 0), ("embeddings", "m", "x", 4)])
def test_bad_bodies_are_one_line_errors(args):
    with pytest.raises(KneecapError):
        request_body(*args)


def test_decode_completions_stream_with_two_events_in_one_read():
    reads = [(1.0, [comp("a")]), (1.5, [comp("b"), comp("c")]), (2.0, [comp("", "length")]), (2.1, [USAGE_ONLY, DONE])]
    r = decode_stream(reads)
    assert (r.chunk_times, r.chunk_tokens) == ([1.0, 1.5], [1, 2])
    assert (r.first_token_at, r.first_answer_at, r.done, r.finish_reason) == (1.0, 1.0, True, "length")
    assert (r.prompt_tokens, r.output_tokens, r.reasoning_tokens, r.error_kind) == (12, 3, 1, None)


def test_decode_chat_reasoning_then_answer():
    reads = [
        (1.0, [chat({"role": "assistant", "content": ""})]),
        (1.1, [chat({"reasoning_content": "hm"})]),
        (1.2, [chat({"reasoning": "so"})]),
        (1.3, [chat({"content": "yes"})]),
        (1.4, [chat({}, "stop"), DONE]),
    ]
    r = decode_stream(reads)
    assert (r.chunk_times, r.chunk_tokens, r.first_token_at, r.first_answer_at) == (
        [1.1, 1.2, 1.3],
        [1, 1, 1],
        1.1,
        1.3,
    )


def test_continuous_usage_deltas():
    reads = [
        (1.0, [comp("ab", usage={"prompt_tokens": 4, "completion_tokens": 2})]),
        (2.0, [comp("cde", usage={"prompt_tokens": 4, "completion_tokens": 5})]),
        (3.0, [comp("", "length", usage={"prompt_tokens": 4, "completion_tokens": 5})]),
        (3.1, [DONE]),
    ]
    r = decode_stream(reads, usage_deltas=True)
    assert (r.chunk_times, r.chunk_tokens, r.output_tokens) == ([1.0, 2.0], [2, 3], 5)


def test_continuous_usage_counts_a_completion_token_whose_text_is_held_back_as_an_answer():
    # vLLM holds back the text of a partial UTF-8 character: the chunk says "" but usage counts the token
    reads = [
        (1.0, [comp("", usage={"prompt_tokens": 4, "completion_tokens": 1})]),
        (2.0, [comp("\u00e9xy", usage={"prompt_tokens": 4, "completion_tokens": 4})]),
    ]
    r = decode_stream(reads, usage_deltas=True)
    assert (r.chunk_tokens, r.first_token_at, r.first_answer_at) == ([1, 3], 1.0, 1.0)


def test_llamacpp_final_chunk_usage_is_a_total_not_more_tokens():
    # llama.cpp's last chunk: empty text, finish_reason and usage with the total (no continuous stats asked)
    reads = [
        (1.0, [comp("a")]),
        (2.0, [comp("b")]),
        (3.0, [comp("c")]),
        (3.1, [comp("", "length", usage={"prompt_tokens": 4, "completion_tokens": 3}), DONE]),
    ]
    r = decode_stream(reads)
    assert (r.chunk_tokens, r.output_tokens, r.finish_reason) == ([1, 1, 1], 3, "length")
    # ... and when a server puts the total on a chunk that still carries text, that chunk counts one
    reads[2] = (3.0, [comp("c", "length", usage={"prompt_tokens": 4, "completion_tokens": 3})])
    assert decode_stream(reads[:3]).chunk_tokens == [1, 1, 1]


@pytest.mark.parametrize(
    "bad,kind",
    [
        (SseEvent("message", b"{not json"), "malformed_sse"),
        (SseEvent("message", b"[1, 2]"), "malformed_sse"),
        (
            ev({"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}),
            "server_error_event",
        ),
        (SseEvent("error", b"boom"), "server_error_event"),
    ],
)
def test_decode_errors_keep_earlier_tokens(bad, kind):
    r = decode_stream([(1.0, [comp("a")]), (2.0, [bad, comp("never read")])])
    assert r.error_kind == kind and r.chunk_tokens == [1] and not r.done


def test_decode_from_real_wire_bytes():
    wire = (
        b'data: {"choices":[{"index":0,"text":" Hello","finish_reason":null}]}\r\n\r\n'
        b": ping\r\n\r\n"
        b'data: {"choices":[{"index":0,"text":"!","finish_reason":"length"}]}\r\n\r\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    r = decode_stream([(0.5, SseParser().feed(wire))])
    assert (r.chunk_tokens, r.output_tokens, r.done) == ([2], 2, True)
