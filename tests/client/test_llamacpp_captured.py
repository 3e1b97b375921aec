"""Payloads captured from a real llama.cpp server (xllamacpp 2026.10, build b0-unknown, the tiny
character-level test GGUF of tests/llamacpp/tiny_gguf.py, -c 4096 -np 4) read by the client's parsers.
Captured with tests/llamacpp/llamacpp_server.py; files in tests/client/data/."""

from __future__ import annotations

import json
from pathlib import Path

from kneecap.client.openai import decode_stream
from kneecap.client.server_info import LLAMACPP, combine
from kneecap.client.server_metrics import sample_from_text
from kneecap.client.sse import SseParser

DATA = Path(__file__).parent / "data"


def load(name):
    return json.loads((DATA / name).read_text())


def test_capacity_from_real_props_slots_and_models():
    info = combine(
        "http://x",
        models=load("llamacpp_models.json"),
        props=load("llamacpp_props.json"),
        slots=load("llamacpp_slots.json"),
        metrics_text=(DATA / "llamacpp_metrics.txt").read_text(),
    )
    assert info.engine == LLAMACPP
    assert (info.num_slots, info.slot_context_tokens, info.kv_capacity_tokens) == (4, 1024, 4096)  # -c 4096 -np 4
    assert (info.vocab_size, info.version) == (355, "b0-unknown")


def test_real_metrics_have_requests_but_no_kv_gauge_in_this_build():
    s = sample_from_text((DATA / "llamacpp_metrics.txt").read_text())
    assert (s.engine, s.running, s.waiting, s.kv_usage) == ("llama.cpp", 0.0, 0.0, None)


def feed_bytewise_and_whole(raw):
    whole = SseParser().feed(raw)
    p = SseParser()
    pieces = [e for i in range(len(raw)) for e in p.feed(raw[i : i + 1])]
    assert pieces == whole
    return whole


def test_real_completions_stream():
    events = feed_bytewise_and_whole((DATA / "llamacpp_stream_completions.sse").read_bytes())
    r = decode_stream([(float(i), [e]) for i, e in enumerate(events)])
    # 5 text chunks, then llama.cpp's last chunk (empty text, finish_reason, usage total) and [DONE]
    assert (r.chunk_tokens, r.output_tokens, r.prompt_tokens, r.finish_reason, r.done) == (
        [1] * 5,
        5,
        4,
        "length",
        True,
    )


def test_real_chat_stream():
    events = feed_bytewise_and_whole((DATA / "llamacpp_stream_chat.sse").read_bytes())
    r = decode_stream([(float(i), [e]) for i, e in enumerate(events)])
    assert (sum(r.chunk_tokens), r.output_tokens, r.done) == (4, 4, True)
    assert r.first_answer_at == r.first_token_at
