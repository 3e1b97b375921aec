"""Datasets users bring: ShareGPT conversations or {prompt, output_len?} lines -> sampled requests.

Owns the one reader per dataset format (parse_dataset; read_dataset is the thin file wrapper),
vLLM's context-length filter, and seeded sampling into DatasetRequests whose input/output lengths come
from the data. Token counts come from a `count_tokens(text) -> int` the caller passes: the HTTP
client passes the server's /tokenize or a local tokenizer; the simulator passes estimate_tokens
(about 4 characters per token). Sends nothing; the client's PromptSource lives in client/datasets.py.

Layouts read (a JSON array file, or JSONL with one record a line):
- ShareGPT, as ShareGPT_V3_unfiltered_cleaned_split.json ships it
  (https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered):
  {"id": ..., "conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}.
  vLLM's ShareGPTDataset (vllm/benchmarks/datasets/sharegpt.py, vLLM main 2026, commit 237145e)
  keeps entries with >= 2 turns, takes conversations[0] as the prompt and conversations[1] as the
  completion whose token count is the output length. kneecap takes the first human/user turn and the
  turn after it, which is the same pair whenever the conversation opens with the human (and never
  sends a model reply as a prompt).
- custom: {"prompt": "...", "output_len": 128} (output_len optional), vLLM's `custom` dataset.
- OpenAI chat: {"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec

_USER_ROLES = ("human", "user")
_REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing")
CHARS_PER_TOKEN_ESTIMATE = 4.0  # OpenAI: "one token generally corresponds to ~4 characters of text
# for common English text" (https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them)

TokenCountFn = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: ceil(characters / 4), at least 1 (what the simulator uses)."""
    return max(1, -(-len(text) // int(CHARS_PER_TOKEN_ESTIMATE)))


def prompt_sha256(content: str | Sequence[int]) -> str:
    """sha256 hex of a prompt: UTF-8 of text, or of the JSON list of token ids (what records keep)."""
    if isinstance(content, str):
        data = content.encode("utf-8")
    else:
        data = json.dumps(list(content), separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class DatasetEntry:
    """One usable record: its prompt, the reference reply (ShareGPT/chat) or a fixed output_len."""

    prompt: str
    reply: str | None = None
    output_len: int | None = None
    line: int = 0  # 1-based line (JSONL) or element number (JSON array) in the file
    conversation: bool = False  # from ShareGPT "conversations" / chat "messages" (else a {"prompt"} line)


def _turn_text(turn: object, key: str) -> str | None:
    if isinstance(turn, dict) and isinstance(turn.get(key), str):
        return turn[key]
    return None


def _pair(turns: list, role_key: str, text_key: str) -> tuple[str | None, str | None]:
    for i, turn in enumerate(turns):
        if isinstance(turn, dict) and turn.get(role_key) in _USER_ROLES and _turn_text(turn, text_key) is not None:
            reply = None
            if i + 1 < len(turns) and isinstance(turns[i + 1], dict) and turns[i + 1].get(role_key) in _REPLY_ROLES:
                reply = _turn_text(turns[i + 1], text_key)
            return turn[text_key], reply
    return None, None


def entry_of_record(obj: object, line: int = 0) -> DatasetEntry | None:
    """The DatasetEntry of one parsed record, or None when the record holds no prompt."""
    if not isinstance(obj, dict):
        return None
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        out = obj.get("output_len")
        if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
            raise KneecapError(
                f"dataset line {line}: output_len must be a whole number >= 1, got {out!r}",
                'write e.g. {"prompt": "...", "output_len": 128}, or leave output_len out',
            )
        return DatasetEntry(prompt=prompt, output_len=out, line=line) if prompt else None
    for key, role_key, text_key in (("conversations", "from", "value"), ("messages", "role", "content")):
        seq = obj.get(key)
        if isinstance(seq, list):
            text, reply = _pair(seq, role_key, text_key)
            return DatasetEntry(prompt=text, reply=reply, line=line, conversation=True) if text else None
    return None


def parse_dataset(raw: bytes, source: str = "dataset") -> list[DatasetEntry]:
    """Every usable entry of a dataset file's bytes, in file order. Bad JSON names the file and line."""
    import orjson

    numbered: list[tuple[int, object]]
    if raw.lstrip()[:1] == b"[":
        try:
            numbered = list(enumerate(orjson.loads(raw), 1))
        except orjson.JSONDecodeError as exc:
            raise KneecapError(
                f"dataset {source} is not valid JSON: {exc}", "fix the file or give one JSON object per line"
            ) from None
    else:
        numbered = []
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((lineno, orjson.loads(line)))
            except orjson.JSONDecodeError:
                raise KneecapError(
                    f"dataset {source} line {lineno} is not valid JSON",
                    'give one JSON object per line, e.g. {"prompt": "..."}',
                ) from None
    entries: list[DatasetEntry] = []
    for lineno, obj in numbered:
        try:
            entry = entry_of_record(obj, lineno)
        except KneecapError as exc:
            raise KneecapError(f"dataset {source}: {exc.message}", exc.hint) from None
        if entry is not None:
            entries.append(entry)
    if not entries:
        raise KneecapError(
            f"dataset {source} holds no prompts",
            'use {"prompt": ...} lines, ShareGPT "conversations", or OpenAI "messages"',
        )
    return entries


def read_dataset(path: str | Path) -> list[DatasetEntry]:
    """parse_dataset over a file; a missing or unreadable file is a one-line error."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise KneecapError(f"cannot read dataset {p}: {exc.strerror}", "pass an existing JSONL or JSON file") from None
    return parse_dataset(raw, str(p))


@dataclass(frozen=True)
class LengthFilter:
    """Keep a sample only if its input + output tokens fit max_total_tokens (None = no bound): the context bound of
    vLLM's is_valid_sequence (vllm/benchmarks/datasets/utils.py)."""

    max_total_tokens: int | None = None

    def __post_init__(self) -> None:
        v = self.max_total_tokens
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise KneecapError(
                f"length filter max_total_tokens must be a whole number >= 0, got {v!r}", "fix the filter bound"
            )

    def why_rejected(self, input_tokens: int, output_tokens: int) -> str | None:
        """None when the sample passes, else why not."""
        if self.max_total_tokens is not None and input_tokens + output_tokens > self.max_total_tokens:
            return "total_too_long"
        return None


NO_FILTER = LengthFilter()


@dataclass(frozen=True)
class DatasetRequest:
    """One sampled request: lengths from the data, the prompt text to send, and its hash for records."""

    spec: RequestSpec
    prompt: str  # what the client sends; records keep only prompt_sha256 unless asked to keep prompts
    prompt_sha256: str
    source_line: int


@dataclass(frozen=True)
class DatasetSample:
    """The sampled requests and how many entries each filter reason dropped."""

    requests: tuple[DatasetRequest, ...]
    rejected: dict
    oversampled: int  # requests that repeat an earlier entry because too few entries passed the filter


def sample_dataset(
    entries: Sequence[DatasetEntry],
    n: int,
    count_tokens: TokenCountFn,
    *,
    seed: int = 0,
    length_filter: LengthFilter = NO_FILTER,
    output_len: int | None = None,
    default_output_len: int | None = None,
) -> DatasetSample:
    """n requests from a dataset, deterministic in (entries, n, seed, count_tokens).

    Entries are shuffled with the seed and taken in that order while they pass the filter (as vLLM
    does). Output length: `output_len` when forced; else the entry's output_len; else the reply's
    token count; else `default_output_len`; else a conversation is skipped (counted as no_reply)
    and a {"prompt"} line without output_len is an error. When fewer
    than n entries pass, the passing ones are drawn again with replacement (vLLM's oversampling).
    """
    if n < 0:
        raise KneecapError(f"request count must be >= 0, got {n}", "pass a positive --requests")
    if output_len is not None and output_len < 1:
        raise KneecapError(f"output length must be >= 1, got {output_len}", "pass e.g. --osl 128")
    order = list(range(len(entries)))
    rng = random.Random(f"kneecap-dataset-sample:{seed}")
    rng.shuffle(order)
    picked: list[tuple[DatasetEntry, int, int]] = []
    rejected: dict = {}
    for i in order:
        if len(picked) >= n:
            break
        e = entries[i]
        isl = int(count_tokens(e.prompt))
        if output_len is not None:
            osl = output_len
        elif e.output_len is not None:
            osl = e.output_len
        elif e.reply is not None:
            osl = int(count_tokens(e.reply))
        elif default_output_len is not None:
            osl = default_output_len
        elif e.conversation:  # a conversation whose prompt got no reply: nothing to size the output by
            rejected["no_reply"] = rejected.get("no_reply", 0) + 1
            continue
        else:
            raise KneecapError(
                f"dataset line {e.line} has no reply and no output_len to size the output",
                "add output_len to the line, or pass a fixed output length",
            )
        why = length_filter.why_rejected(isl, osl)
        if why is None and (isl < 1 or osl < 1):
            why = "empty"
        if why is not None:
            rejected[why] = rejected.get(why, 0) + 1
            continue
        picked.append((e, isl, osl))
    extra = 0
    if len(picked) < n:
        if not picked:
            raise KneecapError(
                f"no dataset entry passes the length filter ({dict(sorted(rejected.items()))})",
                "loosen the length filter or use a dataset with shorter turns",
            )
        extra = n - len(picked)
        picked.extend(rng.choices(picked, k=extra))
    out = []
    for k, (e, isl, osl) in enumerate(picked):
        spec = RequestSpec(index=k, request_id=f"r{k}", class_name="dataset", input_tokens=isl, output_tokens=osl)
        out.append(
            DatasetRequest(spec=spec, prompt=e.prompt, prompt_sha256=prompt_sha256(e.prompt), source_line=e.line)
        )
    return DatasetSample(requests=tuple(out), rejected=dict(sorted(rejected.items())), oversampled=extra)


DATASET_NAMES = ("random", "sharegpt", "jsonl", "custom")  # --dataset / --dataset-name values, as vLLM's bench serve


def dataset_flag(dataset: str | None, path: str | None) -> str | None:
    """--dataset / --dataset-name and --dataset-path as vLLM's bench serve takes them, into one value: None
    (not given), "random", or the file's path (--dataset PATH alone is the path too)."""
    if path is None:
        if dataset in DATASET_NAMES[1:]:
            raise KneecapError(
                f"--dataset {dataset} needs the file", f"pass --dataset-path PATH with --dataset {dataset}"
            )
        return dataset
    if dataset not in (None, *DATASET_NAMES[1:]):
        raise KneecapError(
            f"--dataset {dataset} and --dataset-path {path} both name the data",
            "pass --dataset sharegpt (or jsonl) --dataset-path PATH, or the path alone",
        )
    return path
