"""Prompt datasets: a file of prompts (JSONL or one JSON array) and a PromptSource over it.

Owns: reading `{"prompt": ...}` lines, ShareGPT records (`{"conversations": [{"from": "human",
"value": ...}, ...]}`, the layout of ShareGPT_V3_unfiltered_cleaned_split.json used by vLLM's and
SGLang's benchmarks) and OpenAI-style `{"messages": [{"role": "user", "content": ...}]}`; the first
user turn is the prompt. Random prompts (exact lengths from kneecap.workload) live in prompts.py;
shared-prefix groups come from the workload's RequestClass (shared_prefix_tokens, num_prefix_groups)
and are honoured by the prompt sources there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from kneecap.client.prompts import Prompt, TokenCounter
from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec

_USER_ROLES = ("human", "user")


def prompt_of_record(obj: object) -> str | None:
    """The prompt text of one dataset record, or None when it has none."""
    if not isinstance(obj, dict):
        return None
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        return prompt
    turns = obj.get("conversations")
    if isinstance(turns, list):  # ShareGPT
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") in _USER_ROLES and isinstance(turn.get("value"), str):
                return turn["value"]
        return None
    messages = obj.get("messages")
    if isinstance(messages, list):  # OpenAI chat layout
        for m in messages:
            if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                return m["content"]
    return None


def load_prompts(path: str | Path, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file (one record a line) or a JSON array file; empty prompts are skipped."""
    import orjson

    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise KneecapError(f"cannot read dataset {p}: {exc.strerror}", "pass an existing JSONL or JSON file") from None
    records: list[object]
    if raw.lstrip()[:1] == b"[":
        try:
            records = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise KneecapError(f"dataset {p} is not valid JSON: {exc}", "fix the file or give one JSON object per line") from None
    else:
        records = []
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                raise KneecapError(f"dataset {p} line {lineno} is not valid JSON",
                                   'give one JSON object per line, e.g. {"prompt": "..."}') from None
    prompts: list[str] = []
    for obj in records:
        text = prompt_of_record(obj)
        if text:
            prompts.append(text)
            if limit is not None and len(prompts) >= limit:
                break
    if not prompts:
        raise KneecapError(f"dataset {p} holds no prompts",
                           'use {"prompt": ...} lines, ShareGPT "conversations", or OpenAI "messages"')
    return prompts


@dataclass(frozen=True)
class DatasetPrompts:
    """Prompts taken from a dataset in a seeded order; request i gets the i-th (cycling).

    The prompt's length is the dataset's, not spec.input_tokens: num_tokens is the counter's count
    when a counter is given, else None (the server's usage then says).
    """

    texts: tuple[str, ...]
    seed: int = 0
    counter: TokenCounter | None = None
    _order: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.texts:
            raise KneecapError("a dataset prompt source needs at least one prompt", "check the dataset file")
        order = list(range(len(self.texts)))
        random.Random(f"kneecap-dataset:{self.seed}").shuffle(order)
        object.__setattr__(self, "_order", tuple(order))

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        text = self.texts[self._order[spec.index % len(self.texts)]]
        return Prompt.of(text, self.counter.count(text) if self.counter is not None else None)
