"""Pure parts of `kneecap serve`: request parsing, the pseudo-tokenizer round trip, chunk bytes, /metrics text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from kneecap.client.openai import decode_stream, request_body
from kneecap.client.sse import SseParser
from kneecap.client.server_info import parse_vllm_cache_config
from kneecap.serve import openai_wire as wire
from kneecap.serve.prom import exposition
from kneecap.serve.pseudo_tokens import encode_text, filler_text
from kneecap.serve.realtime import ServerCounters


def parse(body, endpoint=wire.COMPLETIONS, max_model_len=4096):
    return wire.parse_request(endpoint, body, served_model="m", max_model_len=max_model_len)


@given(st.integers(1, 300), st.integers(1, 64))
def test_the_client_reads_back_exact_lengths(num_words, max_tokens):
    """kneecap's own client body -> server chunks -> kneecap's own decoder: exact ISL and OSL."""
    body = request_body(
        "completions", "m", " ".join(["word"] * num_words), max_tokens, ignore_eos=True, min_tokens=True
    )
    req = parse(body)
    assert (req.prompt_tokens, req.max_tokens, req.stream, req.include_usage) == (num_words, max_tokens, True, True)
    writer = wire.ChunkWriter(req, "cmpl-1", 0)
    raw = writer.opening() + writer.tokens(0, max_tokens) + writer.closing()
    events = SseParser().feed(raw)
    result = decode_stream([(0.0, events)])
    assert result.done and result.error_kind is None
    assert sum(result.chunk_tokens) == max_tokens and result.output_tokens == max_tokens
    assert result.prompt_tokens == num_words and result.finish_reason == "length"
    assert len(encode_text(filler_text(max_tokens))) == max_tokens


def test_token_id_prompts_count_ids_and_batch_of_one_is_accepted():
    assert parse({"prompt": [5, 6, 7], "max_tokens": 2}).prompt_tokens == 3
    assert parse({"prompt": [[5, 6, 7, 8]], "max_tokens": 2}).prompt_tokens == 4
    assert parse({"prompt": ["a b"], "max_tokens": 2}).prompt_tokens == 2


def test_defaults_follow_vllm():
    assert parse({"prompt": "a"}).max_tokens == 16
    chat = parse({"messages": [{"role": "user", "content": "a b c"}]}, wire.CHAT, max_model_len=100)
    assert chat.max_tokens == 97 and chat.prompt_tokens == 3


@pytest.mark.parametrize(
    "body, param",
    [
        ({"prompt": "a", "max_tokens": 4096}, "max_tokens"),
        ({"prompt": "a", "max_tokens": True}, "max_tokens"),
        ({"prompt": "a", "max_tokens": 3, "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": {"x": 1}}, "prompt"),
    ],
)
def test_refusals_name_the_field(body, param):
    with pytest.raises(wire.BadRequest) as info:
        parse(body)
    assert info.value.param == param


def test_exposition_is_read_by_the_bench_parsers():
    gauges = {
        "num_running": 3,
        "num_waiting": 2,
        "kv_usage": 0.25,
        "num_preemptions": 7,
        "num_kv_blocks": 1234,
        "block_size": 16,
        "virtual_s": 1.5,
        "prefix_caching": True,
    }
    text = exposition('m"odel', gauges, ServerCounters(prompt_tokens_total=10, generation_tokens_total=20))
    cache = parse_vllm_cache_config(text)
    assert cache["kv_capacity_tokens"] == 1234 * 16 and cache["block_size"] == 16
    from kneecap.client.server_metrics import sample_from_text

    s = sample_from_text(text)
    assert (s.engine, s.kv_usage, s.running, s.waiting, s.preemptions_total) == ("vllm", 0.25, 3, 2, 7)


def test_error_body_is_vllm_shaped():
    assert json.loads(wire.error_body("nope", 400, param="x")) == {
        "object": "error",
        "message": "nope",
        "type": "BadRequestError",
        "param": "x",
        "code": 400,
    }
