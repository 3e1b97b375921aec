"""Exact-length prompts (token ids, calibrated text), shared-prefix groups, datasets."""

from __future__ import annotations

import json

import pytest

from kneecap.client.datasets import DatasetPrompts, load_prompts
from kneecap.client.prompts import (
    LocalTokenizer,
    RandomTextPrompts,
    RandomTokenPrompts,
    ServerTokenizer,
    prompt_sha256,
    token_id_range,
)
from kneecap.errors import KneecapError
from kneecap.workload import LengthDist, RequestClass, RequestSpec, Workload, make_requests
from servers.scripted import start_scripted_server


def spec(i, n, group=None, prefix=0):
    return RequestSpec(
        index=i,
        request_id=f"r{i}",
        class_name="c",
        input_tokens=n,
        output_tokens=4,
        prefix_group=group,
        prefix_tokens=prefix,
    )


def test_token_prompts_exact_unique_and_reproducible():
    src = RandomTokenPrompts(seed=7, low=100, high=5000)
    a, b = src.prompt_for(spec(0, 300)), src.prompt_for(spec(1, 300))
    assert len(a.content) == a.num_tokens == 300 and all(100 <= t < 5000 for t in a.content)
    assert a.content[:8] != b.content[:8]  # unique from the first tokens on: no accidental prefix-cache hits
    assert src.prompt_for(spec(0, 300)) == a and RandomTokenPrompts(seed=8).prompt_for(spec(0, 300)) != a
    assert a.sha256 == prompt_sha256(list(a.content))


def test_shared_prefix_groups():
    wl = Workload(
        classes=(
            RequestClass(
                name="chat",
                input=LengthDist.fixed(64),
                output=LengthDist.fixed(4),
                shared_prefix_tokens=48,
                num_prefix_groups=2,
            ),
        )
    )
    specs = make_requests(wl, 12, seed=1)
    src = RandomTokenPrompts()
    prompts = [src.prompt_for(s) for s in specs]
    for s, p in zip(specs, prompts):
        same = [q for t, q in zip(specs, prompts) if t.prefix_group == s.prefix_group]
        assert all(q.content[:48] == p.content[:48] for q in same)
        other = [q for t, q in zip(specs, prompts) if t.prefix_group != s.prefix_group]
        assert all(q.content[:48] != p.content[:48] for q in other)
    assert len({p.content for p in prompts}) == 12  # the suffixes still differ


class WordCounter:
    """Counts like a tokenizer whose every word is one token plus one BOS token."""

    def count(self, text):
        return len(text.split()) + 1


class LumpyCounter:
    """Some words are two tokens: calibration must still converge."""

    def count(self, text):
        return sum(2 if len(w) > 6 else 1 for w in text.split())


@pytest.mark.parametrize(
    "counter,n",
    [
        (WordCounter(), 2),
        (WordCounter(), 100),
        (WordCounter(), 1000),
        (LumpyCounter(), 1),
        (LumpyCounter(), 5),
        (LumpyCounter(), 1000),
    ],
)
def test_text_prompts_are_calibrated_exactly(counter, n):
    p = RandomTextPrompts(counter=counter, seed=3).prompt_for(spec(2, n))
    assert p.num_tokens == n == counter.count(p.content)


def test_text_prompt_with_local_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from kneecap.client.prompts import WORDS

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    counter = LocalTokenizer(str(path))
    p = RandomTextPrompts(counter=counter).prompt_for(spec(0, 77))
    assert p.num_tokens == 77 == len(tok.encode(p.content).ids)
    with pytest.raises(KneecapError):
        LocalTokenizer(str(tmp_path / "missing.json"))


def test_text_prompt_calibrated_by_the_servers_tokenize_endpoint():
    url, srv = start_scripted_server()
    try:
        p = RandomTextPrompts(counter=ServerTokenizer(url, model="m", api_key="secret-k")).prompt_for(spec(0, 50))
        assert p.num_tokens == 50 == len(p.content.split())  # the scripted server tokenizes by whitespace
        assert "secret-k" not in repr(ServerTokenizer(url, api_key="secret-k"))
        with pytest.raises(KneecapError):
            ServerTokenizer(url + "/nope").count("x")
    finally:
        srv.stop()


def test_datasets_jsonl_sharegpt_openai_and_array(tmp_path):
    lines = [
        {"prompt": "plain one"},
        {
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "human", "value": "sharegpt q"},
                {"from": "gpt", "value": "a"},
            ]
        },
        {"messages": [{"role": "user", "content": "openai q"}]},
        {"other": 1},
    ]
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert load_prompts(jl) == ["plain one", "sharegpt q", "openai q"]
    arr = tmp_path / "sharegpt.json"
    arr.write_text(json.dumps(lines[1:2] * 3))
    assert load_prompts(arr) == ["sharegpt q"] * 3
    src = DatasetPrompts(tuple(load_prompts(jl)), seed=1)
    got = [src.prompt_for(spec(i, 10)) for i in range(6)]
    assert sorted(p.content for p in got[:3]) == ["openai q", "plain one", "sharegpt q"] and got[3:] == got[:3]
    assert got[0].num_tokens is None


@pytest.mark.parametrize(
    "content,fragment", [("{bad\n", "line 1"), ('{"x": 1}\n', "no prompts"), ("[1,", "not valid JSON")]
)
def test_bad_datasets_are_one_line_errors(tmp_path, content, fragment):
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(KneecapError) as err:
        load_prompts(path)
    assert fragment in err.value.one_line()
    with pytest.raises(KneecapError):
        load_prompts(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    "vocab,low,high", [(260, 26, 260), (355, 35, 355), (32000, 1000, 30000), (151936, 1000, 30000)]
)
def test_token_range_for_a_vocabulary(vocab, low, high):
    assert token_id_range(vocab) == (low, high)
    src = RandomTokenPrompts(low=low, high=high)
    assert all(low <= t < high for t in src.prompt_for(spec(0, 500)).content)
    with pytest.raises(KneecapError):
        token_id_range(4)


class ByteCounter:
    """A byte-level tokenizer with a BOS token (the 260-token vocabulary of tests/vllm/tiny_llama.py)."""

    def __init__(self):
        self.calls = 0

    def count(self, text):
        self.calls += 1
        return len(text.encode()) + 1


@pytest.mark.parametrize("n", [1, 2, 16, 100, 1000])
def test_text_calibration_converges_in_a_few_counts_when_words_are_many_tokens(n):
    counter = ByteCounter()
    p = RandomTextPrompts(counter=counter, seed=5).prompt_for(spec(3, n))
    assert p.num_tokens == n == counter.count(p.content)
    assert counter.calls <= 16  # interpolation over the cut, not one word at a time


def test_salt_changes_every_prompt_and_the_template_overhead_is_left_out():
    a = RandomTokenPrompts(seed=1, salt="a").prompt_for(spec(0, 64))
    b = RandomTokenPrompts(seed=1, salt="b").prompt_for(spec(0, 64))
    assert a.content[:4] != b.content[:4] and a == RandomTokenPrompts(seed=1, salt="a").prompt_for(spec(0, 64))
    t = RandomTextPrompts(counter=WordCounter(), salt="x", overhead_tokens=7).prompt_for(spec(0, 50))
    assert WordCounter().count(t.content) == 43 and t.num_tokens == 50
    u = RandomTextPrompts(counter=WordCounter(), salt="y", overhead_tokens=7).prompt_for(spec(0, 50))
    assert u.content.split()[:3] != t.content.split()[:3]


def test_text_prefix_groups_share_their_calibrated_prefix():
    src = RandomTextPrompts(counter=ByteCounter(), seed=2)
    a, b, c = (src.prompt_for(spec(i, 200, group=g, prefix=120)) for i, g in ((0, 0), (1, 0), (2, 1)))
    assert a.content[:100] == b.content[:100] != c.content[:100]
    assert a.num_tokens == b.num_tokens == c.num_tokens == 200
