"""Investigation, not product code: the CPU time vLLM 0.10.2's and 0.11.0's API server spends per
/v1/chat/completions request for a gpt-oss model, rendering the prompt with openai-harmony on its event loop (the
gpt-oss counterpart of bench/chat_template_parse.py).

    OPENAI_HARMONY_VENV/bin/python bench/harmony_render.py [--markdown] [--requests N] [--lengths 128,2000,...]

--markdown prints the table that bench/results/harmony_render.md holds and the line kneecap's --endpoint chat prices
gpt-oss requests with (kneecap.sim.config HARMONY_RENDER_MS): the render's cost as a fixed part plus a part per prompt
token, plus the streamed response's harmony parser, created once per request before it first waits for the engine.

What it times, per request, is what both releases run synchronously in OpenAIServingChat.create_chat_completion for a
gpt-oss model (serving_chat.py: `self.use_harmony = model_config.hf_config.model_type == "gpt_oss"`, :146 in 0.11.0;
the harmony branch calls `self._make_request_with_harmony(request)` without an await, :260 in 0.11.0) before the
request is handed to the engine: _make_request_with_harmony (serving_chat.py:1564-1597 in 0.11.0, :1558-1591 in
0.10.2, the same code) builds the system message (harmony_utils.py get_system_message: today's date, the default
reasoning effort, the "commentary" channel dropped as no custom tools are given), the empty developer message
(get_developer_message(tools=None)), one harmony Message per chat message (parse_chat_input: a list of text parts
becomes TextContent items) and then render_for_completion (harmony_utils.py:249-253 in 0.11.0): Conversation
.from_messages, the conversation serialised to JSON, and openai-harmony's Rust encoder parsing it and tokenising the
whole prompt (o200k_harmony). Unlike the Jinja path, where the tokenizer runs behind an await (serving_engine.py
_preprocess_chat), the harmony path tokenises the user's prompt on the event loop itself: the cost grows with the
prompt. harmony_utils.py is the same in both releases bar tool and output handling this path does not reach (a diff
of the two sdists); both ask for `openai-harmony >= 0.0.3` (requirements/common.txt:51), and 0.0.4 was the newest
openai-harmony from 2025-08-09 to 2025-11-05, the window in which both releases came out: so 0.0.4 is timed.

The request is the one `vllm bench serve --endpoint /v1/chat/completions --dataset-name random` sends
(vllm/benchmarks/lib/endpoint_request_func.py:237-258 in 0.11.0: one user message whose content is
[{"type": "text", "text": prompt}], no reasoning_effort, no tools) with RandomDataset's prompts
(vllm/benchmarks/datasets.py:374-560 in 0.11.0, the same rule in 0.10.2): for request i a run of consecutive vocabulary
ids (offset + i + arange(input_len)) % vocab_size, decoded, re-encoded, cut to input_len and decoded again, the
offsets drawn by numpy.default_rng(seed). The vocabulary is o200k_base's 199,998 ranks (gpt-oss's tokenizer adds only
special tokens above them; num_special_tokens_to_add is 0 for it).

openai-harmony loads o200k_base.tiktoken on first use, downloading it unless TIKTOKEN_ENCODINGS_BASE names a folder
that holds it; the script checks the file's SHA-256 against the one openai-harmony expects (below). The encoding is
loaded once before timing, as vLLM's server does at start-up (get_stop_tokens_for_assistant_actions in
OpenAIServingChat.__init__).

Needs only openai-harmony==0.0.4 and numpy (a scratch venv); kneecap's venv has neither.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import statistics
import sys
import time

import numpy as np
from hostinfo import host
from openai_harmony import (
    ChannelConfig,
    Conversation,
    DeveloperContent,
    HarmonyEncodingName,
    Message,
    Role,
    StreamableParser,
    SystemContent,
    TextContent,
    load_harmony_encoding,
)

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
VOCAB_SIZE = 199_998  # o200k_base's ranks 0..199997; gpt-oss's tokenizer.vocab_size
LENGTHS = (128, 2000, 4000, 32000)  # GPUStack's gpt-oss random-dataset input lengths


def get_system_message() -> Message:
    """vLLM's harmony_utils.get_system_message (0.11.0 :61-100) as _make_request_with_harmony calls it for a chat
    request without reasoning_effort: reasoning_effort=None, browser/python descriptions None, no custom tools."""
    content = SystemContent.new()
    start_date = datetime.datetime.now().strftime("%Y-%m-%d")
    content = content.with_conversation_start_date(start_date)
    channel_config = content.channel_config
    new_config = ChannelConfig.require_channels([c for c in channel_config.valid_channels if c != "commentary"])
    content = content.with_channel_config(new_config)
    return Message.from_role_and_content(Role.SYSTEM, content)


def get_developer_message() -> Message:
    """harmony_utils.get_developer_message(tools=None) (0.11.0 :117-146)."""
    return Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new())


def parse_chat_input(chat_msg: dict) -> list[Message]:
    """harmony_utils.parse_chat_input (0.11.0 :207-246), the plain user-message branch."""
    role = chat_msg.get("role")
    content = chat_msg.get("content", "")
    if isinstance(content, str):
        contents = [TextContent(text=content)]
    else:
        contents = [TextContent(text=c.get("text", "")) for c in content]
    return [Message.from_role_and_contents(role, contents)]


def make_request_with_harmony(encoding, chat_messages: list[dict]) -> list[int]:
    """OpenAIServingChat._make_request_with_harmony (0.11.0 serving_chat.py:1564-1597) up to the prompt's token ids
    (render_for_completion, harmony_utils.py:249-253)."""
    messages = [get_system_message(), get_developer_message()]
    for chat_msg in chat_messages:
        messages.extend(parse_chat_input(chat_msg))
    conversation = Conversation.from_messages(messages)
    return encoding.render_conversation_for_completion(conversation, Role.ASSISTANT)


def random_prompts(encoding, input_len: int, n: int, seed: int) -> list[str]:
    """RandomDataset.sample's prompts (range ratio 0, no prefix) for n requests of input_len tokens."""
    rng = np.random.default_rng(seed)
    rng.integers(input_len, input_len + 1, size=n)  # input lengths (fixed): drawn first, as get_sampling_params does
    rng.integers(1, 2, size=n)  # output lengths: drawn next (their values do not matter here)
    offsets = rng.integers(0, VOCAB_SIZE, size=n)
    prompts = []
    for i in range(n):
        seq = ((int(offsets[i]) + i + np.arange(input_len)) % VOCAB_SIZE).tolist()
        prompt = encoding.decode(seq)
        prompts.append(encoding.decode(encoding.encode(prompt, disallowed_special=())[:input_len]))
    return prompts


def time_requests(encoding, prompts: list[str], rounds: int) -> tuple[float, float, int]:
    """Median and mean CPU ms per request over `rounds` passes over the prompts, and the median prompt tokens."""
    samples, lengths = [], []
    for _ in range(rounds):
        for prompt in prompts:
            chat = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
            t0 = time.process_time_ns()
            ids = make_request_with_harmony(encoding, chat)
            samples.append((time.process_time_ns() - t0) / 1e6)
            lengths.append(len(ids))
    return statistics.median(samples), statistics.fmean(samples), int(statistics.median(lengths))


def time_encode(encoding, prompts: list[str], rounds: int) -> float:
    """Median CPU ms to tokenise the prompt alone (the part of the render that grows with the prompt)."""
    samples = []
    for _ in range(rounds):
        for prompt in prompts:
            t0 = time.process_time_ns()
            encoding.encode(prompt, disallowed_special=())
            samples.append((time.process_time_ns() - t0) / 1e6)
    return statistics.median(samples)


def time_stream_parser(encoding, rounds: int = 500) -> float:
    """Median CPU ms to create the streaming response's harmony parser (serving_chat.py:499-503 in 0.11.0,
    get_streamable_parser_for_assistant: StreamableParser(encoding, Role.ASSISTANT)), which the streamed response's
    generator does once per request before it first waits for the engine's output."""
    samples = []
    for _ in range(rounds):
        t0 = time.process_time_ns()
        StreamableParser(encoding, role=Role.ASSISTANT)
        samples.append((time.process_time_ns() - t0) / 1e6)
    return statistics.median(samples)


def time_stream_tokens(encoding, rounds: int = 200) -> float:
    """Median CPU ms per generated token of the streamed response's harmony parsing (serving_chat.py:677-684 in
    0.11.0: parser.process(token) and the channel, recipient and content delta read back), for a short reply in
    the analysis channel then the final one. Not priced: the rest of the per-chunk work (the response's pydantic
    objects, the detokenizer) is not timed here."""
    reply = (
        "<|channel|>analysis<|message|>The user sent random text; reply briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>I could not make sense of that text."
    )
    tokens = encoding.encode(reply, allowed_special="all")
    samples = []
    for _ in range(rounds):
        parser = StreamableParser(encoding, role=Role.ASSISTANT)
        t0 = time.process_time_ns()
        for token in tokens:
            parser.process(token)
            _ = (parser.current_channel, parser.current_recipient, parser.last_content_delta)
        samples.append((time.process_time_ns() - t0) / 1e6 / len(tokens))
    return statistics.median(samples)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """The line ms = fixed + per_token x tokens through (prompt tokens, median ms) points that minimises the squared
    relative errors (weights 1 / ms^2: a plain least-squares line would follow the 32,000-token point and miss the
    short prompts' cost by half)."""
    w = [1.0 / y**2 for _, y in points]
    s, sx, sy = sum(w), sum(wi * x for wi, (x, _) in zip(w, points)), sum(wi * y for wi, (_, y) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxy = sum(wi * x * y for wi, (x, y) in zip(w, points))
    det = s * sxx - sx * sx
    per_token = (s * sxy - sx * sy) / det if det else 0.0
    return (sy - per_token * sx) / s, per_token


def check_vocab() -> None:
    base = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if not base:
        return  # openai-harmony downloads and checks it itself
    path = os.path.join(base, "o200k_base.tiktoken")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != O200K_BASE_SHA256:
        sys.exit(f"error: {path} is not o200k_base (sha256 {digest}); give the file openai-harmony expects")


def main(argv: list[str]) -> int:
    markdown = "--markdown" in argv
    requests, lengths, rounds, seed = 20, LENGTHS, 5, 42
    for i, arg in enumerate(argv):
        if arg == "--requests":
            requests = int(argv[i + 1])
        elif arg == "--lengths":
            lengths = tuple(int(x) for x in argv[i + 1].split(","))
        elif arg == "--rounds":
            rounds = int(argv[i + 1])
    check_vocab()
    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    encoding.stop_tokens_for_assistant_actions()  # as the server's start-up does
    from importlib.metadata import version

    if markdown:
        print(
            f"host before: {host()}; openai-harmony {version('openai-harmony')}, Python {platform.python_version()}\n"
        )
        print(
            "| prompt tokens asked | prompt tokens rendered | median ms CPU per request | mean ms | of which tokenising the prompt (median ms) |"
        )
        print("|---:|---:|---:|---:|---:|")
    points = []
    for input_len in lengths:
        prompts = random_prompts(encoding, input_len, requests, seed)
        n_rounds = rounds if input_len <= 4000 else max(1, rounds // 5)
        make_request_with_harmony(encoding, [{"role": "user", "content": [{"type": "text", "text": prompts[0]}]}])
        median, mean, rendered = time_requests(encoding, prompts, n_rounds)
        enc = time_encode(encoding, prompts, n_rounds)
        points.append((input_len, median))
        if markdown:
            print(f"| {input_len} | {rendered} | {median:.3f} | {mean:.3f} | {enc:.3f} |")
        else:
            print(
                f"{input_len} tokens ({rendered} rendered): {median:.3f} ms median, {mean:.3f} mean, encode {enc:.3f}"
            )
    fixed, per_token = fit(points)
    parser_ms, token_ms = time_stream_parser(encoding), time_stream_tokens(encoding)
    print(
        f"\nrender line through the medians (prompt tokens asked, relative least squares): {fixed:.4f} ms + "
        f"{per_token * 1e3:.4f} us per prompt token; stream parser per request {parser_ms:.4f} ms; stream parsing "
        f"per generated token {token_ms * 1e3:.2f} us"
    )
    for input_len, median in points:
        print(f"  {input_len} tokens: line {fixed + per_token * input_len:.3f} ms vs median {median:.3f} ms")
    print(
        f"priced per request (render line + stream parser): {fixed + parser_ms:.4f} ms + {per_token * 1e3:.4f} us/token"
    )
    if markdown:
        print(f"\nhost after: {host()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
