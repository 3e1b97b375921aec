"""OpenAI-compatible wire format: request bodies for /v1/completions and /v1/chat/completions,
and decoding of the streamed SSE events that come back into token timings.

Owns: which JSON fields are sent (stream_options.include_usage, max_tokens = OSL, ignore_eos /
min_tokens, continuous_usage_stats) and how chunks are read (tokens per chunk, reasoning vs answer
deltas, usage-only chunks, [DONE], error objects). Pure: no sockets, no clocks; the driver hands
in (arrival time, events) pairs and gets plain numbers back.
Field names: OpenAI API reference (completions / chat streaming, `stream_options`), vLLM's
protocol.py (`ignore_eos`, `min_tokens`, `stream_options.continuous_usage_stats`, `reasoning_content`),
llama.cpp server README (`ignore_eos`, `reasoning_content`), SGLang's OpenAI adapter (`ignore_eos`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import orjson

from kneecap.client.sse import SseEvent
from kneecap.errors import KneecapError
from kneecap.workload.endpoints import CHAT, COMPLETIONS, check_endpoint


_DONE = b"[DONE]"

# error_kind values produced while decoding (the driver adds the transport ones)
MALFORMED_SSE = "malformed_sse"
SERVER_ERROR_EVENT = "server_error_event"


def request_body(
    endpoint: str,
    model: str,
    prompt: str | Sequence[int],
    max_tokens: int,
    *,
    stream: bool = True,
    ignore_eos: bool = False,
    min_tokens: bool = False,
    continuous_usage_stats: bool = False,
    extra_body: Mapping[str, Any] | None = None,
) -> dict:
    """The JSON body of one request. `prompt` is text, or token ids (completions endpoint only).

    max_tokens is the requested output length (OSL). ignore_eos asks the server to keep generating
    past an end-of-sequence token (vLLM, SGLang, llama.cpp honour it; OpenAI itself rejects it);
    min_tokens = max_tokens pins the length on servers that support min_tokens (vLLM).
    extra_body is merged last and wins.
    """
    if max_tokens < 1:
        raise KneecapError(f"max_tokens must be >= 1, got {max_tokens}", "pass a positive --osl")
    body: dict[str, Any] = {"model": model}
    if endpoint == COMPLETIONS:
        body["prompt"] = prompt if isinstance(prompt, str) else list(prompt)
    elif endpoint == CHAT:
        if not isinstance(prompt, str):
            raise KneecapError(
                "the chat endpoint needs text prompts, not token ids",
                "use --endpoint completions, or give a tokenizer so prompts are text",
            )
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        check_endpoint(endpoint)  # raises the one-line error
    body["max_tokens"] = int(max_tokens)
    if stream:
        body["stream"] = True
        options: dict[str, Any] = {"include_usage": True}
        if continuous_usage_stats:
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
    else:
        body["stream"] = False
    if ignore_eos:
        body["ignore_eos"] = True
    if min_tokens:
        body["min_tokens"] = int(max_tokens)
    if extra_body:
        body.update(extra_body)
    return body


def encode_body(body: Mapping[str, Any]) -> bytes:
    return orjson.dumps(body)


@dataclass
class StreamResult:
    """What a response said, in the driver's clock (seconds since the run epoch).

    chunk_times/chunk_tokens: one entry per socket read that carried generated tokens, with the
    number of tokens it carried (reasoning included). Token counts per event: the completion_tokens
    delta when the server sends usage in every chunk (continuous usage stats), else 1 for each event
    whose text / content / reasoning delta is non-empty.
    """

    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    first_token_at: float | None = None  # first token of any kind (reasoning included)
    first_answer_at: float | None = None  # first answer (non-reasoning) token
    prompt_tokens: int | None = None  # usage, as the server reported it
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = (
        None  # usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache had
    )
    finish_reason: str | None = None
    done: bool = False  # saw data: [DONE]
    error_kind: str | None = None
    error_message: str | None = None


def _error_text(err: Any) -> str:
    if isinstance(err, Mapping):
        msg = err.get("message") or err.get("msg") or err
        code = err.get("code") or err.get("type")
        return f"{code}: {msg}" if code else str(msg)
    return str(err)


def _count(value: Any) -> int | None:
    """A usage token count, or None when it is not a whole number >= 0 (bools, floats, negatives: not reported)."""
    return value if type(value) is int and value >= 0 else None


def _apply_usage(result: StreamResult, usage: Mapping[str, Any]) -> int | None:
    pt = _count(usage.get("prompt_tokens"))
    ct = _count(usage.get("completion_tokens"))
    if pt is not None:
        result.prompt_tokens = pt
    if ct is not None:
        result.output_tokens = ct
    prompt_details = usage.get("prompt_tokens_details")  # vLLM --enable-prompt-tokens-details, SGLang, OpenAI
    if isinstance(prompt_details, Mapping):
        cached = _count(prompt_details.get("cached_tokens"))
        if cached is not None:
            result.cached_tokens = cached
    details = usage.get("completion_tokens_details")
    if isinstance(details, Mapping):
        rt = _count(details.get("reasoning_tokens"))
        if rt is not None:
            result.reasoning_tokens = rt
    return ct


def _not_a_chunk(result: StreamResult, what: str, data: bytes) -> None:
    """Record a JSON object that does not have the OpenAI shape (choices: list of objects, delta and usage objects)."""
    result.error_kind, result.error_message = MALFORMED_SSE, f"{what}: {data[:120]!r}"


class StreamDecoder:
    """Decodes a streamed response read by read: feed(t, events) with each read's arrival time and
    the SSE events it completed; `result` holds the numbers so far (memory: two numbers per read).

    usage_deltas: the request asked for continuous usage stats, so a chunk's tokens are the
    increase of usage.completion_tokens. Without it a usage object beside choices is only a total
    (llama.cpp puts the final usage on its last chunk, with empty text and finish_reason) and is
    never counted as tokens of that chunk.
    Stops at the first malformed event or error object and reports it in error_kind
    ("malformed_sse" / "server_error_event"); tokens seen before it are kept, later events ignored.
    """

    __slots__ = ("result", "usage_deltas", "_last_ct", "text_sink")

    def __init__(self, usage_deltas: bool = False, text_sink: list | None = None):
        self.result = StreamResult()
        self.usage_deltas = usage_deltas
        self._last_ct = 0  # running completion_tokens under continuous usage stats
        self.text_sink = text_sink  # a list the answer's text pieces are appended to (multi-turn needs the answer)

    def feed(self, t: float, events: Sequence[SseEvent]) -> None:
        result = self.result
        if result.error_kind:
            return
        loads = orjson.loads
        tokens = 0
        answer = False
        for event, data, _ in events:
            if data == _DONE:
                result.done = True
                continue
            if event == "error":
                result.error_kind, result.error_message = (
                    SERVER_ERROR_EVENT,
                    f"error event: {data[:300].decode('utf-8', 'replace')}",
                )
                break
            try:
                obj = loads(data)
            except orjson.JSONDecodeError:
                result.error_kind, result.error_message = MALFORMED_SSE, f"event data is not JSON: {data[:120]!r}"
                break
            if type(obj) is not dict:
                result.error_kind, result.error_message = (
                    MALFORMED_SSE,
                    f"event data is not a JSON object: {data[:120]!r}",
                )
                break
            err = obj.get("error")
            if err is not None:
                result.error_kind, result.error_message = SERVER_ERROR_EVENT, _error_text(err)[:500]
                break
            choices = obj.get("choices")
            usage = obj.get("usage")
            if usage and type(usage) is not dict:  # shape checks: a few ns each, on every event
                _not_a_chunk(result, "event usage is not a JSON object", data)
                break
            k = 0
            if choices:
                choice = choices[0] if type(choices) is list else None
                if type(choice) is not dict:
                    _not_a_chunk(result, "event choices is not a list of JSON objects", data)
                    break
                delta = choice.get("delta")
                if delta is not None:  # chat
                    if type(delta) is not dict:
                        _not_a_chunk(result, "event choices[0].delta is not a JSON object", data)
                        break
                    if delta.get("content"):
                        k = 1
                        answer = True
                        if self.text_sink is not None:
                            self.text_sink.append(delta["content"])
                    elif delta.get("reasoning_content") or delta.get("reasoning"):
                        k = 1
                elif choice.get("text"):  # completions
                    k = 1
                    answer = True
                    if self.text_sink is not None:
                        self.text_sink.append(choice["text"])
                fr = choice.get("finish_reason")
                if fr and type(fr) is str:
                    result.finish_reason = fr
                if usage:
                    ct = _apply_usage(result, usage)
                    if self.usage_deltas and ct is not None:  # continuous usage stats: exact tokens in this chunk
                        k = max(ct - self._last_ct, 0)
                        self._last_ct = ct
                        if k and delta is None:  # completions have no reasoning: a token whose text vLLM holds back
                            answer = True  # (a partial UTF-8 character, text "") is still an answer token
            elif usage:  # the usage-only chunk at the end (stream_options.include_usage)
                _apply_usage(result, usage)
            tokens += k
        if tokens:
            result.chunk_times.append(t)
            result.chunk_tokens.append(tokens)
            if result.first_token_at is None:
                result.first_token_at = t
        if answer and result.first_answer_at is None:
            result.first_answer_at = t


def decode_stream(reads: Iterable[tuple[float, Sequence[SseEvent]]], usage_deltas: bool = False) -> StreamResult:
    """Decode a whole streamed response given as (read arrival time, events completed by that read)."""
    decoder = StreamDecoder(usage_deltas)
    for t, events in reads:
        decoder.feed(t, events)
    return decoder.result
