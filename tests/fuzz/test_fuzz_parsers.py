"""Hypothesis fuzzing of every parser that reads outside input: only the documented error may escape.

A few hundred cases per target keep CI fast; bench/fuzz.py runs 10,000+ per target. The targets and
their invariants live in fuzz_targets.py. Each bug the fuzzer found is pinned below by its minimal
repro, as a regression test.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

import fuzz_targets as ft
from kneecap.errors import KneecapError

FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


# -- SSE parser ------------------------------------------------------------------------------------


@FAST
@given(ft.sse_case())
def test_sse_parser_only_raises_line_too_long_and_is_split_invariant(case):
    ft.check_sse(case)


@settings(max_examples=300, deadline=None)
@given(ft.st.binary(max_size=300), ft.st.lists(ft.st.integers(0, 300), max_size=10))
def test_sse_parser_on_raw_bytes(stream, cuts):
    ft.check_sse((stream, sorted({c for c in cuts if c <= len(stream)}), 64))


# -- OpenAI chunk decoder (kneecap.client.openai): malformed shapes are malformed_sse, never an exception --

# Minimal repros found by the fuzzer; each made StreamDecoder.feed / decode_stream raise
# instead of reporting malformed_sse. End to end (a server sending `data: {"choices": 158}`), the driver
# catches the exception and records the request as `client_error` ("a bug in the client") instead of
# `malformed_sse` (the server's fault): checked by hand against a 10-line aiohttp server, tap on and off.
CHUNK_BUGS = [
    pytest.param(b'{"choices": 158}', id="choices-not-a-list-TypeError"),
    pytest.param(b'{"choices": {"a": 1}}', id="choices-a-dict-KeyError"),
    pytest.param(b'{"choices": [""]}', id="choice-not-an-object-AttributeError"),
    pytest.param(b'{"choices": [null]}', id="choice-null-AttributeError"),
    pytest.param(b'{"choices": [{"delta": "x"}]}', id="delta-not-an-object-AttributeError"),
    pytest.param(b'{"choices": [], "usage": 243}', id="usage-not-an-object-AttributeError"),
]


@pytest.mark.parametrize("data", CHUNK_BUGS)
def test_decode_stream_reports_malformed_chunks_instead_of_raising(data):
    from kneecap.client import openai as oa
    from kneecap.client.sse import SseEvent

    result = oa.decode_stream([(0.01, [SseEvent("message", data, None)])])
    assert result.error_kind == oa.MALFORMED_SSE  # each repro has a member of the wrong type
    assert (result.chunk_tokens, result.done) == ([], False)


@FAST
@given(ft.labelled_stream_case())
def test_chunk_decoder_reports_exactly_what_each_generated_stream_holds(reads):
    """Each event is drawn well-formed, malformed or an error, so the outcome (error kind, tokens per read,
    first token and answer, [DONE]) is known before decoding: fuzz_targets.expected_stream."""
    ft.check_labelled_stream(reads)


@FAST
@given(ft.chunk_case())
def test_chunk_decoder_keeps_its_invariants_on_arbitrary_chunks(case):
    """Any JSON shape, any bytes: never an exception, chunk times and counts in step (bench/fuzz.py runs
    this target at 10,000+ cases; the labelled tests above pin the outcome itself)."""
    ft.check_chunks(case)


# -- config.json reader (kneecap.model) --------------------------------------------------------------


@FAST
@given(ft.config_dict())
def test_config_reader_only_raises_kneecap_error(cfg):
    ft.check_config(cfg)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ft.config_dict())
def test_config_file_through_plan_only_raises_kneecap_error(tmp_path_factory, cfg):
    ft.check_config_file(cfg, tmp_path_factory.getbasetemp())


# regressions: each of these escaped as the exception named in its id before the fix in kneecap/model/
CONFIG_REGRESSIONS = [
    pytest.param({"architectures": 5, "model_type": "llama"}, id="architectures-int-TypeError"),
    pytest.param({"architectures": {"": None}, "model_type": "llama"}, id="architectures-dict-KeyError"),
    pytest.param({"model_type": []}, id="model_type-list-unhashable"),
    pytest.param(
        {"model_type": "llama4", "text_config": {"model_type": {"a": 1}}}, id="text-model_type-dict-unhashable"
    ),
    pytest.param(
        {
            "model_type": "qwen2",
            "num_hidden_layers": 2**63,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "vocab_size": 10,
            "intermediate_size": 128,
        },
        id="layers-2^63-OverflowError",
    ),
    pytest.param(
        {
            "model_type": "qwen2",
            "num_hidden_layers": 2**31,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "vocab_size": 10,
            "intermediate_size": 128,
        },
        id="layers-2^31-16GiB-list",
    ),
]


@pytest.mark.parametrize("cfg", CONFIG_REGRESSIONS)
def test_config_reader_regressions(cfg):
    from kneecap.model.hf_config import from_hf_config

    with pytest.raises(KneecapError) as info:
        from_hf_config(cfg, name="fuzz", source="fuzz/config.json")
    assert "fuzz/config.json" in info.value.message


def test_jamba_with_zero_attention_layers_is_a_one_line_error():
    """Found by the fuzzer: a Jamba config whose attention layers all vanish divided by zero in the KV notes."""
    from kneecap.model.hf_config import from_hf_config

    cfg = json.loads((ft.CONFIG_DIR / "ai21-jamba-1.5-mini.json").read_text())
    cfg["attn_layer_offset"] = 10**6  # no layer index reaches the offset: zero attention layers
    with pytest.raises(KneecapError) as info:
        from_hf_config(cfg, name="fuzz", source="fuzz/config.json")
    assert "fuzz/config.json" in info.value.message


# -- GGUF reader ------------------------------------------------------------------------------------


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ft.gguf_case())
def test_gguf_reader_only_raises_kneecap_error(tmp_path_factory, case):
    ft.check_gguf(case, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"llama.vocab_size": "abc"}, id="vocab-string-ValueError"),
        pytest.param({"llama.attention.sliding_window": "false"}, id="window-string-ValueError"),
        pytest.param({"llama.block_count": 2**64 - 5}, id="block_count-huge-OverflowError"),
    ],
)
def test_gguf_reader_regressions(tmp_path, overrides):
    from kneecap.model.gguf_reader import read_gguf

    path = tmp_path / "bad.gguf"
    ft.write_tiny_gguf(path, overrides)
    with pytest.raises(KneecapError) as info:
        read_gguf(path)
    assert str(path) in info.value.message


def test_gguf_truncated_at_every_header_byte(tmp_path):
    """Every third cut point in the first 300 bytes of a real tiny file: each is a one-line KneecapError."""
    base = ft.gguf_base()
    for cut in range(0, 300, 3):
        ft.check_gguf(("bytes", base[:cut]), tmp_path)


# -- load-plan YAML ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ft.plan_text())
def test_plan_loader_only_raises_kneecap_error_naming_file_and_line(tmp_path_factory, text):
    ft.check_plan(text, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("data,line", [(b"\xe8", 1), (b"name: x\nseed: \xff\n", 2), (b"name: x\n\x9c: 1\n", 2)])
def test_plan_loader_non_utf8_and_bad_characters_name_file_and_line(tmp_path, data, line):
    """Found by the fuzzer: UnicodeDecodeError escaped, and a reader error named no line."""
    from kneecap.loadplan.schema import load_plan_file

    path = tmp_path / "plan.yaml"
    path.write_bytes(data if b"\x9c" not in data else data.replace(b"\x9c", "\x9c".encode()))
    with pytest.raises(KneecapError) as info:
        load_plan_file(path)
    assert f"{path}:{line}:" in info.value.message


# -- records reader ---------------------------------------------------------------------------------


@FAST
@given(ft.records_file())
def test_records_reader_skips_torn_and_garbage_lines(tmp_path_factory, case):
    ft.check_records(case, tmp_path_factory.getbasetemp())


def test_records_reader_skips_json_lines_that_are_not_objects(tmp_path):
    """Found by the fuzzer: a line `[]` or `1` raised AttributeError out of iter_records."""
    from kneecap.records import read_records

    good = ft._valid_line(1)
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"[]\n1\nnull\n" + good + b'"s"\n' + good[:-5])
    assert [r.request_id for r in read_records(path)] == ["r1"]


@pytest.mark.parametrize("steps", ["[1, .inf]", "[1e999]", "[.nan]", "[2, -.inf]"])
def test_plan_loader_non_finite_steps_name_file_and_line(tmp_path, steps):
    """Found by bench/fuzz.py: `steps: [1e999]` (YAML reads inf) raised OverflowError in the whole-number check."""
    from kneecap.loadplan.schema import load_plan_file

    text = ft.example_plans()["quick.yaml"].replace("steps: [1, 4, 16, 64, 256]", f"steps: {steps}")
    assert steps in text
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(KneecapError) as info:
        load_plan_file(path)
    assert f"{path}:" in info.value.message and "load.steps" in info.value.message
