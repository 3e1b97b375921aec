"""Fuzz targets shared by tests/fuzz (a few hundred cases each) and bench/fuzz.py (10,000+ each).

Each target is a hypothesis strategy plus a `check(example)` that feeds the example to one of
kneecap's parsers and raises `Escaped` when anything but the parser's documented error gets out
(KneecapError and its subclasses are the documented errors; KeyError, TypeError, AttributeError,
ZeroDivisionError, RecursionError... are bugs) or when a stated invariant does not hold.
No sockets, no clocks; files only under a temporary folder the caller passes in.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from kneecap.errors import KneecapError

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "tests" / "model" / "configs"
EXAMPLES_DIR = REPO / "examples"


class Escaped(AssertionError):
    """A non-KneecapError escaped a parser, or an invariant broke; the message carries a repro."""


def escaped(target: str, example: Any, exc: BaseException) -> Escaped:
    text = repr(example)
    if len(text) > 600:
        text = text[:600] + "..."
    return Escaped(f"{target}: {type(exc).__name__}: {exc!s:.300} — repro: {text}")


def signature(exc: BaseException) -> str:
    """Where a failure comes from: the exception type and the innermost kneecap frame (file:line)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    inner = [f for f in frames if "/kneecap/" in f.filename and "/tests/" not in f.filename]
    where = f"{Path(inner[-1].filename).name}:{inner[-1].lineno}" if inner else "?"
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, Escaped) and cause is not None:
        return signature(cause)
    return f"{type(exc).__name__}@{where}"


# ------------------------------------------------------------------------------------------------
# shared value strategies
# ------------------------------------------------------------------------------------------------

_INTS = st.one_of(st.integers(-3, 300), st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, -(10**30)]))
_FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 0.5, 1e-300, 1e300]))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    _FLOATS,
    st.text(max_size=12),
    st.sampled_from(["", "bf16", "float16", "fp8", "full_attention", "sliding_attention", "llama"]),
)
JSONISH = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


# ------------------------------------------------------------------------------------------------
# 1. SSE parser (kneecap.client.sse): only SseLineTooLong (a KneecapError) may escape; split invariance
# ------------------------------------------------------------------------------------------------

_SSE_PIECES = [
    b"data:",
    b"data: ",
    b"data",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b":",
    b": ping",
    b"event:",
    b"event: error",
    b"id:",
    b"id: 7",
    b"id: a\x00b",
    b"retry:",
    b"retry: 100",
    b"retry: x",
    b"\xef\xbb\xbf",
    b"\xef\xbb",
    b"{",
    b'{"choices": [{"text": "a"}]}',
    b"[DONE]",
    b"\x00",
    b"\xff\xfe",
    b" ",
    b"x" * 40,
]
SSE_STREAM = st.lists(st.one_of(st.sampled_from(_SSE_PIECES), st.binary(max_size=16)), max_size=40).map(b"".join)


@st.composite
def sse_case(draw):
    stream = draw(SSE_STREAM)
    cuts = sorted(set(draw(st.lists(st.integers(0, max(len(stream), 0)), max_size=8))))
    limit = draw(st.sampled_from([4 * 1024 * 1024, 64, 8]))
    return stream, cuts, limit


def _feed_all(parser, pieces):
    events = []
    for piece in pieces:
        events.extend(parser.feed(piece))
    return events


def check_sse(case) -> None:
    from kneecap.client.sse import SseLineTooLong, SseParser

    stream, cuts, limit = case
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    results = []
    for parts in ([stream], pieces, [bytes([b]) for b in stream]):
        parser = SseParser(limit)
        try:
            events = _feed_all(parser, parts)
            results.append(("ok", events, parser.pending, parser.last_event_id, parser.retry_ms))
        except SseLineTooLong as exc:
            if not exc.message or "\n" in exc.one_line():
                raise Escaped(f"sse: SseLineTooLong without a one-line message — repro: {case!r}") from exc
            results.append(("too_long",))
        except Exception as exc:  # noqa: BLE001 - the point of the fuzzer
            raise escaped("sse", case, exc) from exc
    # the parser's fast path (whole `data: ...` events, nothing carried over) only runs after the first
    # feed: the same bytes after a comment line, in one feed (general path) and in two (fast path)
    for parts in ([b":\n" + stream], [b":\n", stream]):
        parser = SseParser(limit)
        try:
            results.append(("ok", _feed_all(parser, parts), parser.pending, parser.last_event_id, parser.retry_ms))
        except SseLineTooLong:
            results.append(("too_long",))
        except Exception as exc:  # noqa: BLE001
            raise escaped("sse", case, exc) from exc
    if results[3] != results[4]:
        raise Escaped(f"sse: the fast path changed the events: {results[3]!r} vs {results[4]!r} — repro: {case!r}")
    del results[3:]
    whole = results[0]
    for other in results[1:]:
        if other[0] != whole[0]:
            raise Escaped(f"sse: whole stream {whole[0]} but split stream {other[0]} — repro: {case!r}")
        if whole[0] == "ok" and other[1:] != whole[1:]:
            raise Escaped(f"sse: split changed the events: {whole[1:]!r} vs {other[1:]!r} — repro: {case!r}")


# ------------------------------------------------------------------------------------------------
# 2. OpenAI chunk decoder (kneecap.client.openai): decode_stream never raises
# ------------------------------------------------------------------------------------------------

_USAGE = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"prompt_tokens": _INTS, "completion_tokens": _INTS, "completion_tokens_details": JSONISH}
    ),
    JSONISH,
)
_DELTA = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"content": _SCALARS, "reasoning_content": _SCALARS, "reasoning": _SCALARS, "role": _SCALARS}
    ),
    JSONISH,
)
_CHOICE = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"delta": _DELTA, "text": _SCALARS, "finish_reason": _SCALARS, "message": JSONISH, "index": _INTS}
    ),
    JSONISH,
)
CHUNK_OBJ = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(st.lists(_CHOICE, max_size=2), JSONISH),
            "usage": _USAGE,
            "error": JSONISH,
            "model": _SCALARS,
        },
    ),
    JSONISH,
)


def _json_bytes(value) -> bytes:
    try:
        import orjson

        return orjson.dumps(value)
    except TypeError:  # nan / inf / huge ints: fall back to Python's JSON (NaN, Infinity, bigints)
        return json.dumps(value).encode()


CHUNK_DATA = st.one_of(CHUNK_OBJ.map(_json_bytes), st.binary(max_size=24), st.just(b"[DONE]"))


@st.composite
def chunk_case(draw):
    from kneecap.client.sse import SseEvent

    reads = []
    t = 0.0
    for events in draw(
        st.lists(
            st.lists(st.tuples(st.sampled_from(["message", "error", "ping"]), CHUNK_DATA), min_size=1, max_size=3),
            max_size=5,
        )
    ):
        t += 0.01
        reads.append((t, [SseEvent(name, data, None) for name, data in events]))
    return reads


def check_chunks(case) -> None:
    from kneecap.client import openai as oa

    reads = case
    try:
        res = oa.decode_stream(reads)
    except Exception as exc:  # noqa: BLE001
        raise escaped("chunk decoder", case, exc) from exc
    if len(res.chunk_times) != len(res.chunk_tokens):
        raise Escaped(
            f"chunk decoder: {len(res.chunk_times)} chunk times vs {len(res.chunk_tokens)} counts — repro: {case!r}"
        )
    if res.chunk_times and res.first_token_at != res.chunk_times[0]:
        raise Escaped(
            f"chunk decoder: first_token_at {res.first_token_at} is not the first chunk time — repro: {case!r}"
        )
    if any(type(k) is not int or k < 0 for k in res.chunk_tokens):
        raise Escaped(f"chunk decoder: token counts {res.chunk_tokens!r} are not whole numbers >= 0 — repro: {case!r}")
    # the exact outcome, from the format's rules applied to each event in order: the first event that is not
    # an ordinary chunk sets error_kind, and decoding stops there
    expected = next(
        (
            kind
            for _, events in reads
            for name, data, _ in events
            for kind in [event_outcome(name, data)]
            if kind is not OK
        ),
        OK,
    )
    if res.error_kind != expected:
        raise Escaped(f"chunk decoder: error_kind {res.error_kind!r}, the format says {expected!r} — repro: {case!r}")


def _strict_json(data: bytes):
    """RFC 8259 JSON (no NaN / Infinity), or raises ValueError."""

    def _refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(data.decode("utf-8"), parse_constant=_refuse)


def event_outcome(name: str, data: bytes) -> str | None:
    """What the OpenAI streaming format makes of one event: OK, MALFORMED or SERVER_ERROR. `data: [DONE]` ends
    the stream; an `event: error` is the server's error; the data must be a JSON object; a non-null "error"
    member is the server's error; "usage" (when set) must be an object, "choices" (when set) a list whose first
    member (the client asks for one choice) is an object, and a choice's "delta" (when present) an object."""
    if data == b"[DONE]":
        return OK
    if name == "error":
        return SERVER_ERROR
    try:
        obj = _strict_json(data)
    except ValueError:  # not UTF-8, not JSON
        return MALFORMED
    if type(obj) is not dict:
        return MALFORMED
    if obj.get("error") is not None:
        return SERVER_ERROR
    if obj.get("usage") and type(obj["usage"]) is not dict:
        return MALFORMED
    choices = obj.get("choices")
    if choices:
        if type(choices) is not list or type(choices[0]) is not dict:
            return MALFORMED
        if choices[0].get("delta") is not None and type(choices[0]["delta"]) is not dict:
            return MALFORMED
    return OK


# Labelled cases: each event is drawn from one of three families whose
# outcome the OpenAI streaming format fixes — a well-formed chunk (its tokens and whether it is answer
# text known by construction), a malformed one (not JSON, not an object, choices / delta / usage of the
# wrong type) or an error (`event: error`, or an object with a non-null "error") — so the expected
# result is computed from the labels, not from the decoder. Rules (StreamDecoder's docstring): a chunk
# with answer text (completions `text`, chat `delta.content`) or reasoning text counts one token; the
# first malformed or error event ends decoding (tokens before it, in its read too, are kept).
OK = None
MALFORMED = "malformed_sse"
SERVER_ERROR = "server_error_event"
_TOKEN_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)  # valid UTF-8
_NAMES = st.sampled_from(["message", "ping", "completion"])  # any name but "error" is an ordinary event


@dataclass(frozen=True)
class Labelled:
    name: str
    data: bytes
    kind: str | None  # OK, MALFORMED or SERVER_ERROR
    tokens: int = 0
    answer: bool = False
    done: bool = False


@st.composite
def _good_chunk(draw) -> Labelled:
    form = draw(
        st.sampled_from(["text", "content", "reasoning", "empty_text", "role", "usage_only", "no_choices", "done"])
    )
    name = draw(_NAMES)
    if form == "done":
        return Labelled(name, b"[DONE]", OK, done=True)
    tokens, answer, obj = 0, False, {}
    if form == "text":
        choice, tokens, answer = {"index": 0, "text": draw(_TOKEN_TEXT)}, 1, True
    elif form == "content":
        choice, tokens, answer = {"index": 0, "delta": {"content": draw(_TOKEN_TEXT)}}, 1, True
    elif form == "reasoning":
        key = draw(st.sampled_from(["reasoning_content", "reasoning"]))
        choice, tokens = (
            {"index": 0, "delta": {key: draw(_TOKEN_TEXT), "content": draw(st.sampled_from([None, ""]))}},
            1,
        )
    elif form == "empty_text":
        choice = {"index": 0, "text": ""}
    elif form == "role":
        choice = {"index": 0, "delta": {"role": "assistant"}}
    else:
        choice = None
    if choice is not None:
        choice["finish_reason"] = draw(st.sampled_from([None, "length", "stop"]))
        obj["choices"] = [choice]
    elif form == "usage_only":
        obj["choices"] = draw(st.sampled_from([[], None]))
    if form == "usage_only" or draw(st.booleans()):
        obj["usage"] = {"prompt_tokens": draw(st.integers(0, 4096)), "completion_tokens": draw(st.integers(0, 4096))}
    if draw(st.booleans()):
        obj["error"] = None  # null: no error
    return Labelled(name, json.dumps(obj).encode(), OK, tokens, answer)


_NOT_LIST = st.sampled_from([158, {"a": 1}, "x", True, 1.5])  # truthy, not a list
_NOT_OBJECT = st.sampled_from(["", None, 1, [], "x", True])
_NOT_OBJECT_TRUTHY = st.sampled_from([243, "x", [1], True])


@st.composite
def _malformed_chunk(draw) -> Labelled:
    form = draw(
        st.sampled_from(
            ["not_json", "not_object", "choices_not_list", "choice_not_object", "delta_not_object", "usage_not_object"]
        )
    )
    if form == "not_json":  # nothing, a bare word, a lone brace, bad UTF-8, or an object cut before its last brace
        cut = json.dumps({"choices": [{"text": draw(_TOKEN_TEXT)}]}).encode()[:-1]
        data = draw(st.sampled_from([b"", b"hello", b"{", b"\xff\xfe", cut]))
    elif form == "not_object":
        data = json.dumps(draw(st.sampled_from([[1], [], 3, "s", None, True]))).encode()
    elif form == "choices_not_list":
        data = json.dumps({"choices": draw(_NOT_LIST)}).encode()
    elif form == "choice_not_object":
        data = json.dumps({"choices": [draw(_NOT_OBJECT)]}).encode()
    elif form == "delta_not_object":
        data = json.dumps(
            {"choices": [{"index": 0, "delta": draw(st.sampled_from(["x", 1, [], False, 0, ""]))}]}
        ).encode()
    else:  # usage of the wrong type, beside a chunk that would otherwise count a token
        data = json.dumps({"choices": [{"index": 0, "text": "a"}], "usage": draw(_NOT_OBJECT_TRUTHY)}).encode()
    return Labelled(draw(_NAMES), data, MALFORMED)


@st.composite
def _error_chunk(draw) -> Labelled:
    if draw(st.booleans()):  # `event: error`, whatever its data ([DONE] aside)
        data = draw(
            st.one_of(
                _good_chunk().map(lambda ev: ev.data).filter(lambda d: d != b"[DONE]"),
                st.sampled_from([b"", b"overloaded", b'{"message": "x"}']),
            )
        )
        return Labelled("error", data, SERVER_ERROR)
    err = draw(st.sampled_from([{"message": "too many requests", "code": 429}, "boom", 0, False, [], {}]))
    obj = {"error": err}
    if draw(st.booleans()):
        obj["usage"] = 243  # the error object wins over a malformed rest
    return Labelled(draw(_NAMES), json.dumps(obj).encode(), SERVER_ERROR)


LABELLED_EVENT = st.one_of(_good_chunk(), _good_chunk(), _good_chunk(), _malformed_chunk(), _error_chunk())


@st.composite
def labelled_stream_case(draw):
    """Reads (1-3 labelled events each) at 10 ms apart."""
    return draw(st.lists(st.lists(LABELLED_EVENT, min_size=1, max_size=3), max_size=6))


def expected_stream(reads: list[list[Labelled]]) -> dict:
    """What decode_stream must report, from the labels alone."""
    chunk_times, chunk_tokens = [], []
    first_answer_at, error_kind, done = None, None, False
    for i, events in enumerate(reads):
        t = 0.01 * (i + 1)
        tokens = 0
        for ev in events:
            if ev.kind is not OK:
                error_kind = ev.kind
                break
            tokens += ev.tokens
            done = done or ev.done
            if ev.answer and first_answer_at is None:
                first_answer_at = t
        if tokens:
            chunk_times.append(t)
            chunk_tokens.append(tokens)
        if error_kind is not None:
            break
    return {
        "error_kind": error_kind,
        "chunk_times": chunk_times,
        "chunk_tokens": chunk_tokens,
        "first_token_at": chunk_times[0] if chunk_times else None,
        "first_answer_at": first_answer_at,
        "done": done,
    }


def check_labelled_stream(reads: list[list[Labelled]]) -> None:
    from kneecap.client import openai as oa
    from kneecap.client.sse import SseEvent

    stream = [(0.01 * (i + 1), [SseEvent(ev.name, ev.data, None) for ev in events]) for i, events in enumerate(reads)]
    try:
        result = oa.decode_stream(stream)
    except Exception as exc:  # noqa: BLE001
        raise escaped("chunk decoder", reads, exc) from exc
    got = {
        key: getattr(result, key)
        for key in ("error_kind", "chunk_times", "chunk_tokens", "first_token_at", "first_answer_at", "done")
    }
    want = expected_stream(reads)
    if got != want:
        raise Escaped(f"chunk decoder: got {got!r}, the labels say {want!r} — repro: {reads!r}")


# ------------------------------------------------------------------------------------------------
# 3. config.json reader (kneecap.model): from_hf_config on dicts, load_model + plan on mutated real files
# ------------------------------------------------------------------------------------------------


def real_configs() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(CONFIG_DIR.glob("*.json"))}


def _all_keys(configs: dict[str, dict]) -> list[str]:
    keys: set[str] = set()
    for cfg in configs.values():
        keys.update(cfg)
        if isinstance(cfg.get("text_config"), dict):
            keys.update(cfg["text_config"])
    return sorted(keys)


_CONFIGS = real_configs()
_CONFIG_KEYS = _all_keys(_CONFIGS)


@st.composite
def config_dict(draw):
    """Either a dict over real config keys with arbitrary values, or a real config with 1-4 mutations."""
    from kneecap.model.hf_config import MODEL_TYPES

    if draw(st.booleans()):
        cfg = draw(st.dictionaries(st.sampled_from(_CONFIG_KEYS), st.one_of(JSONISH, _INTS), max_size=12))
        if draw(st.booleans()):
            cfg["model_type"] = draw(st.sampled_from(sorted(MODEL_TYPES) + ["gemma3", "llama4", "nope", ""]))
        return cfg
    name = draw(st.sampled_from(sorted(_CONFIGS)))
    cfg = copy.deepcopy(_CONFIGS[name])
    for _ in range(draw(st.integers(1, 4))):
        target = cfg
        if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()):
            target = cfg["text_config"]
        key = draw(st.sampled_from(sorted(target) or ["model_type"]))
        action = draw(st.sampled_from(["delete", "set", "set_int", "scale"]))
        if action == "delete":
            target.pop(key, None)
        elif action == "set":
            target[key] = draw(JSONISH)
        elif action == "set_int":
            target[key] = draw(_INTS)
        elif isinstance(target.get(key), (int, float)) and not isinstance(target.get(key), bool):
            target[key] = target[key] * draw(st.sampled_from([0, -1, 3, 1000, 0.5]))
    return cfg


def check_config(cfg) -> None:
    from kneecap.model.hf_config import from_hf_config
    from kneecap.model.kv import kv_bytes_per_token

    try:
        model = from_hf_config(copy.deepcopy(cfg), name="fuzz", source="fuzz/config.json")
        kv_bytes_per_token(model, 2)
    except KneecapError as exc:
        _one_line(exc, "config.json", cfg)
    except Exception as exc:  # noqa: BLE001
        raise escaped("config.json", cfg, exc) from exc


def check_config_file(cfg, folder: Path | None = None) -> None:
    """The whole path a user takes: the dict written as config.json, `kneecap plan --model PATH` core."""
    from kneecap.plan.build import DeploymentRequest, plan_deployment

    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))  # Python's JSON: NaN / Infinity / big ints written as read_json accepts them
        try:
            plan_deployment(DeploymentRequest(model=str(path), gpu="h100-sxm", context=4096))
        except KneecapError as exc:
            _one_line(exc, "config.json file", cfg)
        except Exception as exc:  # noqa: BLE001
            raise escaped("config.json file + plan", cfg, exc) from exc


def _one_line(exc: KneecapError, target: str, example) -> None:
    line = exc.one_line()
    if "\n" in line or not exc.message.strip():
        raise Escaped(f"{target}: KneecapError message is empty or not one line: {line!r} — repro: {example!r}")


# ------------------------------------------------------------------------------------------------
# 4. GGUF reader (kneecap.model.gguf_reader.read_gguf): mutated / truncated tiny files
# ------------------------------------------------------------------------------------------------


def write_tiny_gguf(path: Path, meta_overrides: dict | None = None) -> bytes:
    """A 2-layer llama GGUF (a few KB), written with gguf.GGUFWriter; returns its bytes."""
    import gguf
    import numpy as np

    meta = {
        "llama.block_count": 2,
        "llama.embedding_length": 16,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.context_length": 256,
        "llama.feed_forward_length": 32,
    }
    meta.update(meta_overrides or {})
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("fuzz")
    for key, value in meta.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            if 0 <= value < 2**32:
                writer.add_uint32(key, value)
            elif -(2**63) <= value < 2**63:
                writer.add_int64(key, value)
            else:
                writer.add_uint64(key, value % 2**64)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list) and value and all(isinstance(v, int) and 0 <= v < 2**31 for v in value):
            writer.add_array(key, value)
    hidden, kv_dim, ffn, vocab = 16, 8, 32, 20
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,), "output.weight": (vocab, hidden)}
    for i in range(2):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (hidden,),
            f"blk.{i}.attn_q.weight": (hidden, hidden),
            f"blk.{i}.attn_k.weight": (kv_dim, hidden),
            f"blk.{i}.attn_v.weight": (kv_dim, hidden),
            f"blk.{i}.attn_output.weight": (hidden, hidden),
            f"blk.{i}.ffn_gate.weight": (ffn, hidden),
            f"blk.{i}.ffn_up.weight": (ffn, hidden),
            f"blk.{i}.ffn_down.weight": (hidden, ffn),
            f"blk.{i}.ffn_norm.weight": (hidden,),
        }
    for name, shape in shapes.items():
        writer.add_tensor(name, np.ones(shape, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


_GGUF_BASE: bytes | None = None


def gguf_base() -> bytes:
    global _GGUF_BASE
    if _GGUF_BASE is None:
        with tempfile.TemporaryDirectory() as tmp:
            _GGUF_BASE = write_tiny_gguf(Path(tmp) / "base.gguf")
    return _GGUF_BASE


_GGUF_META_KEYS = [
    "llama.block_count",
    "llama.embedding_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.context_length",
    "llama.feed_forward_length",
    "llama.attention.key_length",
    "llama.attention.value_length",
    "llama.attention.sliding_window",
    "llama.expert_count",
    "llama.expert_used_count",
    "general.architecture",
    "general.name",
    "llama.rope.dimension_count",
    "llama.vocab_size",
]


@st.composite
def gguf_case(draw):
    """('bytes', mutated file bytes) or ('meta', metadata overrides written with GGUFWriter)."""
    if draw(st.integers(0, 3)) == 0:
        overrides = draw(
            st.dictionaries(
                st.sampled_from(_GGUF_META_KEYS),
                st.one_of(
                    _INTS,
                    st.floats(allow_nan=True, width=32),
                    st.text(max_size=8),
                    st.booleans(),
                    st.lists(st.integers(0, 40), max_size=4),
                ),
                max_size=4,
            )
        )
        return ("meta", overrides)
    base = bytearray(gguf_base())
    header_end = min(len(base), 1200)  # the header and metadata live in the first ~1 KB of this file
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(0, min(len(base), header_end) - 1)))
        if op == "flip" and base:
            base[pos] ^= draw(st.integers(1, 255))
        elif op == "set" and len(base) >= pos + 8:
            base[pos : pos + 8] = draw(
                st.sampled_from(
                    [
                        b"\xff" * 8,
                        b"\x00" * 8,
                        b"\x7f" + b"\xff" * 7,
                        (2**31).to_bytes(8, "little"),
                        (3).to_bytes(8, "little"),
                    ]
                )
            )
        elif op == "truncate":
            del base[draw(st.integers(0, len(base))) :]
        elif op == "insert":
            base[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del base[pos : pos + draw(st.integers(1, 8))]
    return ("bytes", bytes(base))


def check_gguf(case, folder: Path | None = None) -> None:
    from kneecap.model.gguf_reader import read_gguf

    kind, payload = case
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "fuzz.gguf"
        if kind == "meta":
            try:
                write_tiny_gguf(path, payload)
            except Exception:  # noqa: BLE001 - GGUFWriter refused the value: nothing to read
                return
        else:
            path.write_bytes(payload)
        try:
            model = read_gguf(path)
            from kneecap.model.kv import kv_bytes_per_token

            kv_bytes_per_token(model, 2)
        except KneecapError as exc:
            _one_line(exc, "gguf", case if kind == "meta" else f"{len(payload)} bytes")
        except Exception as exc:  # noqa: BLE001
            shown = case if kind == "meta" else ("bytes", _diff_repr(payload))
            raise escaped("gguf", shown, exc) from exc


def _diff_repr(data: bytes) -> str:
    """A short repro of a mutated GGUF: its length and the byte ranges that differ from the base file."""
    base = gguf_base()
    diffs = [i for i in range(min(len(base), len(data))) if base[i] != data[i]]
    if not diffs:
        return f"base file cut to {len(data)} of {len(base)} bytes"
    first = diffs[0]
    return f"{len(data)} bytes (base {len(base)}), first difference at byte {first}: {data[first : first + 16]!r}"


# ------------------------------------------------------------------------------------------------
# 5. load-plan YAML (kneecap.loadplan.schema.load_plan_file): mutated example plans
# ------------------------------------------------------------------------------------------------


def example_plans() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(EXAMPLES_DIR.glob("*.yaml"))}


_PLANS = example_plans()
_YAML_NOISE = [
    ":",
    " ",
    "  ",
    "-",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "\t",
    "'",
    '"',
    "#",
    "&a",
    "*a",
    "!!python/object:os.system",
    "? ",
    "|",
    ">",
    "\n",
    "0",
    "-1",
    "1e999",
    ".nan",
    "null",
    "~",
    "yes",
    "kind: fixed",
    "steps: auto",
    "\x00",
]


@st.composite
def plan_text(draw):
    name = draw(st.sampled_from(sorted(_PLANS)))
    text = _PLANS[name]
    mode = draw(st.sampled_from(["lines", "chars", "tree", "bytes"]))
    if mode == "bytes":
        return draw(st.binary(max_size=200))
    if mode == "tree":
        import yaml

        data = yaml.safe_load(text)
        for _ in range(draw(st.integers(1, 3))):
            node, key = _pick_leaf(draw, data)
            if node is None:
                break
            action = draw(st.sampled_from(["delete", "set", "rename"]))
            if action == "delete":
                del node[key]
            elif action == "rename" and isinstance(node, dict):
                node[key + draw(st.sampled_from(["_", "s", "x"]))] = node.pop(key)
            else:
                node[key] = draw(JSONISH)
        try:
            return yaml.safe_dump(data, sort_keys=False)
        except yaml.YAMLError:
            return text
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if mode == "lines" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            op = draw(st.sampled_from(["delete", "duplicate", "indent", "dedent", "swap"]))
            if op == "delete":
                del lines[i]
            elif op == "duplicate":
                lines.insert(i, lines[i])
            elif op == "indent":
                lines[i] = "  " + lines[i]
            elif op == "dedent":
                lines[i] = lines[i][2:] if lines[i].startswith("  ") else lines[i]
            elif op == "swap":
                j = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
        else:
            joined = "".join(lines)
            pos = draw(st.integers(0, len(joined)))
            noise = draw(st.one_of(st.sampled_from(_YAML_NOISE), st.text(max_size=4)))
            cut = draw(st.integers(0, 3))
            joined = joined[:pos] + noise + joined[pos + cut :]
            lines = joined.splitlines(keepends=True)
    return "".join(lines)


def _pick_leaf(draw, data):
    """A (container, key) inside the parsed plan, walking down a random path."""
    node, key = None, None
    current = data
    for _ in range(draw(st.integers(1, 5))):
        if isinstance(current, dict) and current:
            k = draw(st.sampled_from(sorted(current, key=str)))
            node, key, current = current, k, current[k]
        elif isinstance(current, list) and current:
            k = draw(st.integers(0, len(current) - 1))
            node, key, current = current, k, current[k]
        else:
            break
    return node, key


_FILE_LINE = re.compile(r":\d+: ")


def check_plan(text, folder: Path | None = None) -> None:
    from kneecap.loadplan.schema import load_plan_file
    from kneecap.workload import Workload, make_requests

    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "plan.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        try:
            spec, base = load_plan_file(path)
            for name, cls in spec.classes.items():
                rc = cls.to_request_class(name, base)
                make_requests(Workload(classes=(rc,)), 8, spec.seed)
        except KneecapError as exc:
            _one_line(exc, "plan", text)
            if str(path) not in exc.message:
                raise Escaped(f"plan: the error does not name the file: {exc.one_line()!r} — repro: {text!r}") from None
            structural = (
                "YAML syntax error" in exc.message
                or "unknown field" in exc.message
                or "field required" in exc.message.lower()
            )
            if structural and not _FILE_LINE.search(exc.message):
                raise Escaped(
                    f"plan: the error does not name file:line: {exc.one_line()!r} — repro: {text!r}"
                ) from None
        except Exception as exc:  # noqa: BLE001
            raise escaped("plan", text, exc) from exc


# ------------------------------------------------------------------------------------------------
# 6. records reader (kneecap.records.iter_records): torn / garbage files
# ------------------------------------------------------------------------------------------------


def _valid_line(i: int) -> bytes:
    from kneecap.records import RequestRecord, dumps_record

    return dumps_record(
        RequestRecord(
            request_id=f"r{i}",
            level=0,
            sent_at=0.1 * i,
            end_at=0.1 * i + 0.05,
            chunk_times=[0.1 * i + 0.01],
            chunk_tokens=[1],
        )
    )


_GARBAGE_LINES = [
    b"\n",
    b"{\n",
    b"[]\n",
    b"[1, 2]\n",
    b"1\n",
    b"null\n",
    b'"text"\n',
    b"true\n",
    b"{}\n",
    b'{"level": 0}\n',
    b'{"request_id": "x", "level": 0, "bogus": 1}\n',
    b"\xff\xfe\n",
    b"NaN\n",
    b'{"request_id": "x", "level": 0, "status": "ok", "chunk_times": "abc"}\n',
    b"\x00\n",
]


@st.composite
def records_file(draw):
    """(file bytes, number of lines that are valid records and complete)."""
    parts, valid = [], 0
    for i, kind in enumerate(draw(st.lists(st.sampled_from(["valid", "garbage", "binary"]), max_size=12))):
        if kind == "valid":
            parts.append(_valid_line(i))
            valid += 1
        elif kind == "garbage":
            parts.append(draw(st.sampled_from(_GARBAGE_LINES)))
        else:
            parts.append(draw(st.binary(max_size=20)).replace(b"\n", b"") + b"\n")
    data = b"".join(parts)
    tail = draw(st.sampled_from(["none", "torn", "binary"]))
    if tail == "torn":
        line = _valid_line(99)
        data += line[: draw(st.integers(1, len(line) - 1))]
    elif tail == "binary":
        data += draw(st.binary(max_size=30)).replace(b"\n", b"")
    return data, valid


def check_records(case, folder: Path | None = None) -> None:
    from kneecap.records import RequestRecord, iter_records

    data, valid = case
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "requests.jsonl"
        path.write_bytes(data)
        try:
            records = list(iter_records(path))
        except Exception as exc:  # noqa: BLE001 - the reader promises never to fail on a torn / corrupt file
            raise escaped("records", data, exc) from exc
    if not all(isinstance(r, RequestRecord) for r in records):
        raise Escaped(f"records: a non-record came out — repro: {data!r}")
    ids = [r.request_id for r in records if r.request_id.startswith("r")]
    if len(ids) < valid:
        raise Escaped(f"records: {valid} valid complete lines but only {len(ids)} records read — repro: {data!r}")


# ------------------------------------------------------------------------------------------------
# the registry bench/fuzz.py iterates
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    strategy: Any
    check: Callable[..., None]
    needs_folder: bool = False


TARGETS = (
    Target("sse", sse_case(), check_sse),
    Target("chunk-decoder", chunk_case(), check_chunks),
    Target("config.json", config_dict(), check_config),
    Target("config.json+plan", config_dict(), check_config_file, needs_folder=True),
    Target("gguf", gguf_case(), check_gguf, needs_folder=True),
    Target("plan-yaml", plan_text(), check_plan, needs_folder=True),
    Target("records", records_file(), check_records, needs_folder=True),
)


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


logging.getLogger("gguf").setLevel(logging.ERROR)  # GGUFWriter warns on every duplicated key the fuzzer writes
