"""kneecap.workload.datasets: ShareGPT / custom JSONL readers, the context-length filter, seeded sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.client.prompts import prompt_sha256 as client_sha256
from kneecap.errors import KneecapError
from kneecap.workload.datasets import (
    NO_FILTER,
    LengthFilter,
    estimate_tokens,
    parse_dataset,
    read_dataset,
    sample_dataset,
)

DATA = Path(__file__).parent / "data"


def words(text: str) -> int:
    """A stand-in token counter: whitespace words (the client passes /tokenize or a tokenizer here)."""
    return len(text.split())


def test_sharegpt_v3_layout_first_human_turn_and_its_reply():
    entries = read_dataset(DATA / "sharegpt_v3_shape.json")
    # the empty conversation is dropped; the one opening with "gpt" gives its human turn
    assert [e.line for e in entries] == [1, 2, 3, 5]
    assert entries[0].prompt.startswith("Summarize the plot of Hamlet")
    assert entries[0].reply.startswith("Prince Hamlet learns")
    assert entries[2].prompt == "A data engineering role at a logistics company."
    assert entries[2].reply.startswith("Great. Lead with pipelines")


def test_custom_jsonl_output_len_and_bad_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"prompt": "one two three four five", "output_len": 7}\n\n{"prompt": "six seven"}\n')
    entries = read_dataset(path)
    assert [(e.prompt, e.output_len, e.line) for e in entries] == [
        ("one two three four five", 7, 1),
        ("six seven", None, 3),
    ]
    path.write_text('{"prompt": "a"}\n{"prompt": "b", "output_len": 0}\n')
    with pytest.raises(KneecapError) as err:
        read_dataset(path)
    assert "line 2" in err.value.one_line() and str(path) in err.value.one_line()
    path.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(KneecapError) as err:
        read_dataset(path)
    assert "line 2 is not valid JSON" in err.value.one_line()


def test_lengths_come_from_the_data():
    entries = read_dataset(DATA / "sharegpt_v3_shape.json")
    sample = sample_dataset(entries, 4, words, seed=0)
    by_line = {r.source_line: r for r in sample.requests}
    hamlet = by_line[1]
    assert hamlet.spec.input_tokens == words(entries[0].prompt)
    assert hamlet.spec.output_tokens == words(entries[0].reply)
    assert hamlet.prompt_sha256 == client_sha256(hamlet.prompt)
    assert [r.spec.request_id for r in sample.requests] == ["r0", "r1", "r2", "r3"]


def test_sampling_is_seeded_and_oversamples_like_vllm():
    entries = read_dataset(DATA / "sharegpt_v3_shape.json")
    a = sample_dataset(entries, 10, words, seed=3)
    assert a == sample_dataset(entries, 10, words, seed=3)
    assert [r.source_line for r in a.requests] != [
        r.source_line for r in sample_dataset(entries, 10, words, seed=4).requests
    ]
    assert a.oversampled == 6 and len(a.requests) == 10


def test_length_filter_drops_samples_longer_than_the_context():
    # prompt + reply words: 54, 8, 23 and 57 (line 5), so a 54-token context drops line 5 alone
    entries = read_dataset(DATA / "sharegpt_v3_shape.json")
    sample = sample_dataset(entries, 4, words, length_filter=LengthFilter(max_total_tokens=54))
    assert 5 not in {r.source_line for r in sample.requests}
    assert sample.rejected == {"total_too_long": 1} and sample.oversampled == 1
    assert LengthFilter(max_total_tokens=2048).why_rejected(1000, 1049) == "total_too_long"
    assert LengthFilter(max_total_tokens=2048).why_rejected(1000, 1048) is None


def test_forced_output_len():
    entries = read_dataset(DATA / "sharegpt_v3_shape.json")
    sample = sample_dataset(entries, 4, words, output_len=2)
    assert {r.spec.output_tokens for r in sample.requests} == {2}


def test_entry_without_reply_needs_an_output_length(tmp_path):
    entries = parse_dataset(b'{"prompt": "a b c d e"}\n', "inline")
    with pytest.raises(KneecapError, match="no reply and no output_len"):
        sample_dataset(entries, 1, words)
    assert sample_dataset(entries, 1, words, default_output_len=9).requests[0].spec.output_tokens == 9


def test_conversation_ending_on_the_human_turn_is_skipped_not_fatal():
    lines = [
        {"conversations": [{"from": "human", "value": "a question left unanswered"}]},
        {"conversations": [{"from": "human", "value": "a b c d"}, {"from": "gpt", "value": "e f g"}]},
    ]
    entries = parse_dataset("\n".join(json.dumps(x) for x in lines).encode(), "inline")
    sample = sample_dataset(entries, 2, words)
    assert sample.rejected == {"no_reply": 1} and {r.source_line for r in sample.requests} == {2}
    assert sample.requests[0].spec.output_tokens == 3


def test_bad_filters_are_one_line_errors():
    with pytest.raises(KneecapError):
        LengthFilter(max_total_tokens=-1)
    with pytest.raises(KneecapError, match="holds no prompts"):
        parse_dataset(b"[]", "x")
    with pytest.raises(KneecapError, match="no dataset entry passes"):
        sample_dataset(
            parse_dataset(b'{"prompt": "a"}', "x"),
            1,
            words,
            length_filter=LengthFilter(max_total_tokens=5),
            default_output_len=5,
        )


def test_estimate_is_four_characters_a_token():
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000
    assert NO_FILTER.why_rejected(10**6, 10**6) is None
