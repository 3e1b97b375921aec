"""Trace replay: timed request traces (Mooncake, Qwen-Bailian, BurstGPT; Weka agentic in workload/agentic.py) ->
timed request specs and prompts.

Owns parsing the published trace formats (pure: text in; read_trace is the thin file reader),
the replay schedule (send offsets from the trace's timestamps, divided by replay_speed), the
context-length check, and token prompts in which equal hash ids give equal 512-token blocks, so a
server's prefix cache sees the trace's reuse. Sends nothing.

Formats:
- Mooncake (https://github.com/kvcache-ai/Mooncake, FAST25-release/README.md and
  FAST25-release/traces/*.jsonl): one JSON object a line, {"timestamp": ms since the first request,
  "input_length": tokens, "output_length": tokens, "hash_ids": [one id per 512-token block of the
  prompt]}; requests sharing leading hash ids share that prefix. (NVIDIA Dynamo's
  benchmarks/data_generator/README.md documents the same format: timestamp "in milliseconds ...
  since the first request", block size 512.)
- Qwen-Bailian (https://github.com/alibaba-edu/qwen-bailian-usagetraces-anon, README "Data Specification"; the
  traces of "KVCache Cache in the Wild", USENIX ATC '25): one JSON object a line, {"chat_id": n,
  "parent_chat_id": n or -1 for a root, "timestamp": seconds since the trace's start, "input_length": tokens,
  "output_length": tokens, "type": text/search/image/file, "turn": n, "hash_ids": [one id per 16-token block]}.
  A child is its session's next request: replayed no earlier than its timestamp and never before its parent's
  answer is back; several children of one parent (a fan-out) go out together once it is.
- BurstGPT (https://github.com/HPMLL/BurstGPT, release v1.1 CSVs): header
  `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, Timestamp in seconds from
  the trace's start; a failed request has 0 response tokens (the README's "failure"). No prefix
  identity, so every replayed prompt is unique.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec
from kneecap.workload.trace_rows import Trace, TraceRow

BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
BAILIAN_KEYS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length")


def _whole(value: object, what: str, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < minimum:
        raise KneecapError(
            f"{where}: {what} must be a whole number >= {minimum}, got {value!r}",
            "fix or remove that line of the trace",
        )
    return int(value)


def _hash_ids(obj: dict, where: str) -> tuple[int, ...] | None:
    """A row's optional hash_ids (the prompt's prefix blocks) as a tuple, or None where the row has none."""
    hash_ids = obj.get("hash_ids")
    if hash_ids is None:
        return None
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        raise KneecapError(f"{where}: hash_ids must be a list of integers", "fix that line")
    return tuple(hash_ids)


def parse_mooncake(text: str, source: str = "trace") -> Trace:
    """Rows of a Mooncake-format JSONL trace. Any broken line raises, naming the file and line."""
    import orjson

    rows: list[TraceRow] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"trace {source} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise KneecapError(
                f"{where} is not valid JSON",
                'each line must be {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}',
            ) from None
        missing = [k for k in MOONCAKE_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise KneecapError(
                f"{where} lacks {', '.join(missing)}",
                "a Mooncake trace line needs timestamp (ms), input_length and output_length",
            )
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
            raise KneecapError(f"{where}: timestamp must be a number of milliseconds >= 0, got {ts!r}", "fix that line")
        hash_ids = _hash_ids(obj, where)
        rows.append(
            TraceRow(
                line=lineno,
                timestamp_s=float(ts) / 1000.0,
                input_tokens=_whole(obj["input_length"], "input_length", where, 1),
                output_tokens=_whole(obj["output_length"], "output_length", where, 1),
                hash_ids=hash_ids,
            )
        )
    if not rows:
        raise KneecapError(f"trace {source} holds no requests", "pass a Mooncake JSONL trace with one request a line")
    return Trace(source=source, format="mooncake", rows=tuple(rows))


def parse_bailian(text: str, source: str = "trace") -> Trace:
    """Rows of a Qwen-Bailian JSONL trace (timestamps in seconds, parent_chat_id -1 for a root). Any broken line
    raises, naming the file and line; so does a chat_id given twice."""
    import orjson

    rows: list[TraceRow] = []
    seen: set[int] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"trace {source} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise KneecapError(
                f"{where} is not valid JSON",
                'each line must be {"chat_id": n, "parent_chat_id": n '
                'or -1, "timestamp": s, "input_length": n, "output_length": n, "hash_ids": [...]}',
            ) from None
        missing = [k for k in BAILIAN_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise KneecapError(
                f"{where} lacks {', '.join(missing)}",
                "a Qwen-Bailian trace line needs chat_id, parent_chat_id, timestamp (s), input_length "
                "and output_length",
            )
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
            raise KneecapError(f"{where}: timestamp must be a number of seconds >= 0, got {ts!r}", "fix that line")
        chat = _whole(obj["chat_id"], "chat_id", where, 0)
        if chat in seen:
            raise KneecapError(f"{where}: chat_id {chat} appears twice", "give each request its own chat_id")
        seen.add(chat)
        parent = obj["parent_chat_id"]
        parent = None if parent == -1 else _whole(parent, "parent_chat_id", where, 0)
        hash_ids = _hash_ids(obj, where)
        rows.append(
            TraceRow(
                line=lineno,
                timestamp_s=float(ts),
                input_tokens=_whole(obj["input_length"], "input_length", where, 1),
                output_tokens=_whole(obj["output_length"], "output_length", where, 1),
                hash_ids=hash_ids,
                key=chat,
                after_keys=() if parent is None else (parent,),
            )
        )
    if not rows:
        raise KneecapError(
            f"trace {source} holds no requests", "pass a Qwen-Bailian JSONL trace with one request a line"
        )
    return Trace(source=source, format="bailian", rows=tuple(rows))


def parse_burstgpt(text: str, source: str = "trace") -> Trace:
    """Rows of a BurstGPT-style CSV (a Timestamp column plus request/response token columns).

    Rows with 0 response tokens are the trace's failed requests: kept out of `rows`, listed in
    failed_rows. Any other broken row raises, naming the file and line.
    """
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise KneecapError(f"trace {source} is empty", "pass a BurstGPT CSV with its header line")
    header = [h.strip() for h in header]
    col = {name: i for i, name in enumerate(header)}
    need = ("Timestamp", "Request tokens", "Response tokens")
    missing = [n for n in need if n not in col]
    if missing:
        raise KneecapError(
            f"trace {source} has no {', '.join(missing)} column",
            f"a BurstGPT CSV starts with the header {','.join(BURSTGPT_COLUMNS)}",
        )
    rows: list[TraceRow] = []
    failed: list[int] = []
    for lineno, fields in enumerate(reader, 2):
        if not fields or not "".join(fields).strip():
            continue
        where = f"trace {source} line {lineno}"
        if len(fields) < len(header):
            raise KneecapError(f"{where} has {len(fields)} fields, the header has {len(header)}", "fix that line")
        try:
            ts = float(fields[col["Timestamp"]])
            isl = float(fields[col["Request tokens"]])
            osl = float(fields[col["Response tokens"]])
        except ValueError:
            raise KneecapError(
                f"{where}: Timestamp, Request tokens and Response tokens must be numbers", "fix that line"
            ) from None
        if ts < 0:
            raise KneecapError(f"{where}: Timestamp must be >= 0 seconds, got {ts}", "fix that line")
        if osl == 0:
            failed.append(lineno)
            continue
        rows.append(
            TraceRow(
                line=lineno,
                timestamp_s=ts,
                input_tokens=_whole(isl, "Request tokens", where, 1),
                output_tokens=_whole(osl, "Response tokens", where, 1),
            )
        )
    if not rows:
        raise KneecapError(f"trace {source} holds no replayable requests", "pass a BurstGPT CSV with data rows")
    return Trace(source=source, format="burstgpt", rows=tuple(rows), failed_rows=tuple(failed))


def parse_trace(text: str, source: str = "trace") -> Trace:
    """JSONL when the first non-blank character is '{' (Qwen-Bailian when its first object has a chat_id, else
    Mooncake), else a BurstGPT-style CSV."""
    if not text.strip():
        raise KneecapError(
            f"trace {source} is empty",
            "pass a Mooncake or Qwen-Bailian JSONL, a BurstGPT CSV or a Weka agentic .json file with its requests",
        )
    if text.lstrip()[:1] != "{":
        return parse_burstgpt(text, source)
    first = text.lstrip().split("\n", 1)[0]
    if '"chat_id"' in first:
        return parse_bailian(text, source)
    whole = _one_object(text)
    if whole is not None:  # one JSON object, not a line each: a Weka agentic conversation
        from kneecap.workload.agentic import parse_agentic

        return parse_agentic([(source, whole)], source)
    return parse_mooncake(text, source)


def _one_object(text: str) -> object | None:
    """The JSON object `text` holds, when it is one object with a "requests" list (else None)."""
    import orjson

    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("requests"), list) else None


def read_trace(path: str | Path) -> Trace:
    """A trace file (its format from its text), or a folder of Weka agentic conversations."""
    p = Path(path)
    if p.is_dir():
        from kneecap.workload.agentic import read_agentic

        return read_agentic(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KneecapError(
            f"cannot read trace {p}: {getattr(exc, 'strerror', None) or exc}",
            "pass an existing Mooncake or Qwen-Bailian .jsonl, BurstGPT .csv or Weka agentic .json file",
        ) from None
    return parse_trace(text, str(p))


@dataclass(frozen=True)
class TimedRequest:
    """A request to send `send_at_s` seconds after the replay starts."""

    spec: RequestSpec
    send_at_s: float


@dataclass(frozen=True)
class Replay:
    """The replay plan: timed requests in send order, and rows skipped for being too long."""

    requests: tuple[TimedRequest, ...]
    too_long_lines: tuple[int, ...] = ()


def _lines_text(lines: Sequence[int], limit: int = 5) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def plan_replay(
    trace: Trace, *, replay_speed: float = 1.0, max_context_tokens: int | None = None, skip_too_long: bool = False
) -> Replay:
    """Timed requests from a trace: send offset = (timestamp - first timestamp) / replay_speed.

    Rows are sent in timestamp order (stable for equal timestamps). A row whose input + output
    tokens exceed max_context_tokens raises (naming the lines and how many) before anything is
    sent, unless skip_too_long, which drops them and lists them in too_long_lines.
    """
    if not replay_speed > 0:
        raise KneecapError(
            f"replay speed must be positive, got {replay_speed!r}", "pass e.g. --replay-speed 2 (twice as fast)"
        )
    rows = sorted(trace.rows, key=lambda r: r.timestamp_s)
    too_long: list[int] = []
    if max_context_tokens is not None:
        too_long = sorted(r.line for r in rows if r.input_tokens + r.output_tokens > max_context_tokens)
        if too_long and not skip_too_long:
            raise KneecapError(
                f"{len(too_long)} of {len(rows)} trace rows exceed the {max_context_tokens}-token context "
                f"(input + output), lines {_lines_text(too_long)} of {trace.source}",
                "skip them (skip_too_long / --skip-too-long) or serve with a longer context",
            )
        bad = set(too_long)
        rows = [r for r in rows if r.line not in bad]
    if not rows:
        raise KneecapError(
            f"no request of trace {trace.source} is left to replay", "check the filters and the context length"
        )
    t0 = rows[0].timestamp_s
    out = []
    ids = {r.key: f"t{i}" for i, r in enumerate(rows) if r.key is not None}
    for i, r in enumerate(rows):
        spec = RequestSpec(
            index=i,
            request_id=f"t{i}",
            class_name=trace.format,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            block_hashes=tuple(r.hash_ids or ()),
            block_tokens=trace.block_tokens,
            after_ids=tuple(ids[k] for k in r.after_keys if k in ids),  # one outside the replay: answered
            think_s=r.think_s / replay_speed,
        )
        out.append(TimedRequest(spec=spec, send_at_s=(r.timestamp_s - t0) / replay_speed))
    return Replay(requests=tuple(out), too_long_lines=tuple(too_long))


@dataclass(frozen=True)
class TraceSchedule:
    schedule: tuple  # (send offset at speed 1 s, RequestSpec)
    rate: float  # mean request rate at speed 1 (requests/s)
    too_long_lines: tuple[int, ...] = ()


def replay_schedule(path: str, context_tokens: int | None, skip_too_long: bool) -> TraceSchedule:
    """A trace file's requests at speed 1, (send offset s, RequestSpec) in send order (plan_replay), and its mean rate:
    what bench and simulate replay."""
    replay = plan_replay(read_trace(path), max_context_tokens=context_tokens, skip_too_long=skip_too_long)
    schedule = tuple((r.send_at_s, r.spec) for r in replay.requests)
    return TraceSchedule(schedule=schedule, rate=replay_rate(schedule), too_long_lines=replay.too_long_lines)


def replay_rate(schedule) -> float:
    """A trace's mean request rate at speed 1 (requests/s): (rows - 1) over its span, bench and simulate alike."""
    n = len(schedule)
    span = schedule[-1][0] - schedule[0][0] if n else 0.0
    return (n - 1) / span if n > 1 and span > 0 else float(max(n, 1))
