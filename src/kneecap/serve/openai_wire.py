"""OpenAI-compatible wire format of the simulated server: request bodies in, response bodies and SSE bytes out.

Owns parsing of /v1/completions and /v1/chat/completions bodies into a ParsedRequest (prompt length
by the pseudo-tokenizer, max_tokens, stream, stream_options) and the byte layout of every chunk,
following vLLM's OpenAI server (vllm/entrypoints/openai/protocol.py: CompletionStreamResponse,
ChatCompletionStreamResponse, UsageInfo; serving_completion.py / serving_chat.py: the finish reason
rides on the chunk carrying the last token, then one usage-only chunk with "choices": [] when
stream_options.include_usage is set, then `data: [DONE]`). Pure: no sockets, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from kneecap.serve.pseudo_tokens import encode_text, filler_piece, filler_text
from kneecap.workload.endpoints import CHAT, COMPLETIONS

DEFAULT_COMPLETION_MAX_TOKENS = 16  # vLLM CompletionRequest.max_tokens default (protocol.py), as OpenAI's
DONE = b"data: [DONE]\n\n"


class BadRequest(Exception):
    """A request the server refuses with HTTP 400 (vLLM's ErrorResponse body)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


def error_body(message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None) -> bytes:
    """vLLM's ErrorResponse: {"object": "error", "message", "type", "param", "code"}."""
    return orjson.dumps({"object": "error", "message": message, "type": err_type, "param": param, "code": status})


@dataclass(frozen=True)
class ParsedRequest:
    """One generation request, lengths in tokens (pseudo-tokenizer rule, see pseudo_tokens.py)."""

    endpoint: str
    model: str
    prompt_tokens: int
    prompt_ids: tuple[int, ...]  # token ids (pseudo-tokenizer ids for text): the prefix cache keys on them
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _int_field(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, got {value!r}", name)
    return value


def _prompt_ids(prompt: Any) -> list[int]:
    """str -> one id per word; [int] -> the ids; a batch of one of either is accepted; longer batches are refused."""
    if isinstance(prompt, str):
        return encode_text(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return prompt
        if len(prompt) == 1:
            return _prompt_ids(prompt[0])
        raise BadRequest("batched prompts are not supported by kneecap serve; send one prompt per request", "prompt")
    raise BadRequest("prompt must be a string, a list of token ids, or a list of one of those", "prompt")


def _message_ids(messages: Any) -> list[int]:
    """Ids of every message's content words, in order (no chat-template tokens)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content}", "messages")
    words: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object with role and content", "messages")
        content = m.get("content")
        if isinstance(content, str):
            words.append(content)
        elif isinstance(content, list):  # content parts: the text parts
            words.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content is not None:
            raise BadRequest("message content must be a string or a list of parts", "messages")
    return encode_text(" ".join(words))


def parse_request(endpoint: str, body: Any, *, served_model: str, max_model_len: int) -> ParsedRequest:
    """Validate a request body; BadRequest names the field. Output length is exactly max_tokens: the simulated
    model never ends early, so ignore_eos and min_tokens are accepted and always hold."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model") or served_model
    if model != served_model:
        raise BadRequest(f"The model `{model}` does not exist. This server serves `{served_model}`.", "model")
    if (body.get("n") or 1) != 1:
        raise BadRequest("n > 1 is not supported by kneecap serve", "n")
    if endpoint == COMPLETIONS:
        if "prompt" not in body:
            raise BadRequest("prompt is required", "prompt")
        ids = _prompt_ids(body["prompt"])
    else:
        ids = _message_ids(body.get("messages"))
    prompt_tokens = len(ids)
    max_tokens = _int_field(body, "max_tokens")
    if endpoint == CHAT:
        max_tokens = _int_field(body, "max_completion_tokens") or max_tokens
    if max_tokens is None:
        max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if endpoint == COMPLETIONS else max(1, max_model_len - prompt_tokens)
    min_tokens = _int_field(body, "min_tokens")
    if min_tokens is not None and min_tokens > max_tokens:
        raise BadRequest(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})", "min_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        # vLLM's wording (serving_engine.py _validate_input)
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            f"completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    if options and not stream:
        raise BadRequest("stream_options can only be set when stream is true", "stream_options")
    return ParsedRequest(
        endpoint=endpoint,
        model=model,
        prompt_tokens=prompt_tokens,
        prompt_ids=tuple(ids),
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
    )


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    """The usage object; with cached_tokens (the prompt tokens the prefix cache held), also
    prompt_tokens_details.cached_tokens, as vLLM 0.32 sends it in a response's final usage with
    --enable-prompt-tokens-details (vllm/entrypoints/openai/chat_completion/serving.py _make_prompt_tokens_details)."""
    out = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


class ChunkWriter:
    """Bytes of one streamed response. Token chunks are pre-split templates (the text is plain ASCII filler,
    so no JSON escaping is needed); usage-bearing chunks go through orjson."""

    def __init__(self, req: ParsedRequest, request_id: str, created: int):
        self.req = req
        self.head = {
            "id": request_id,
            "object": "text_completion" if req.endpoint == COMPLETIONS else "chat.completion.chunk",
            "created": created,
            "model": req.model,
        }
        head = orjson.dumps(self.head)[:-1]  # without the closing brace
        if req.endpoint == COMPLETIONS:
            self._pre = b"data: " + head + b',"choices":[{"index":0,"text":"'
            self._post = b'","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
        else:
            self._pre = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":"'
            self._post = b'"},"logprobs":null,"finish_reason":null}]}\n\n'

    def _choice(self, index: int, finish: str | None) -> dict:
        text = filler_piece(index)
        if self.req.endpoint == COMPLETIONS:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}

    def _event(self, obj: dict) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def opening(self) -> bytes:
        """Chat's first chunk (the assistant role, empty content), as vLLM sends it; nothing for completions."""
        if self.req.endpoint != CHAT:
            return b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        body = dict(self.head, choices=[choice])
        if self.req.continuous_usage:
            body["usage"] = usage(self.req.prompt_tokens, 0)
        return self._event(body)

    def tokens(self, start: int, stop: int) -> bytes:
        """One SSE event per output token index in [start, stop); the last token of the response carries
        finish_reason "length" (the simulated model always runs to max_tokens)."""
        req = self.req
        last = req.max_tokens - 1
        parts = []
        for i in range(start, stop):
            if i == last or req.continuous_usage:
                body = dict(self.head, choices=[self._choice(i, "length" if i == last else None)])
                if req.continuous_usage:
                    body["usage"] = usage(req.prompt_tokens, i + 1)
                elif req.endpoint == COMPLETIONS:
                    body["usage"] = None
                parts.append(self._event(body))
            else:
                parts.append(self._pre + filler_piece(i).encode() + self._post)
        return b"".join(parts)

    def closing(self, cached_tokens: int | None = None) -> bytes:
        """The usage-only chunk (when asked for) and [DONE]."""
        out = b""
        if self.req.include_usage:
            out = self._event(
                dict(self.head, choices=[], usage=usage(self.req.prompt_tokens, self.req.max_tokens, cached_tokens))
            )
        return out + DONE


def full_response(req: ParsedRequest, request_id: str, created: int, cached_tokens: int | None = None) -> bytes:
    """The non-streamed response body."""
    text = filler_text(req.max_tokens)
    if req.endpoint == COMPLETIONS:
        obj, choice = (
            "text_completion",
            {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None},
        )
    else:
        obj, choice = (
            "chat.completion",
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            },
        )
    return orjson.dumps(
        {
            "id": request_id,
            "object": obj,
            "created": created,
            "model": req.model,
            "choices": [choice],
            "usage": usage(req.prompt_tokens, req.max_tokens, cached_tokens),
        }
    )
