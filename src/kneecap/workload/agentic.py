"""Agentic traces with sub-agent fan-out: Weka's KV-cache-tester format -> trace rows with their dependencies.

Owns parsing one conversation file (pure: JSON text in) or a folder of them (read_agentic, the thin reader) into
kneecap.workload.traces rows, each naming the requests whose answers it waits for. Sends nothing.

The format (https://github.com/callanjfox/kv-cache-tester, docs/trace_replay_tester.md "Trace Format", and the
traces/ it publishes; AIPerf reads the same files): one JSON object a conversation,
{"id", "block_size": tokens a hash id stands for, "hash_id_scope": "local" | "global", "requests": [...]}; a request
is {"t": s, "type": "n" | "s", "in": tokens, "out": tokens, "hash_ids": [...], "think_time": s, ...}; a sub-agent
is {"type": "subagent", "requests": [...its own requests, the same way...]}.

Replay, as the publisher's trace_replay_tester.py does it (its default think-only timing):
- a conversation's requests go one after another: each goes the request's think_time after the previous answer;
- consecutive sub-agent markers start their sub-agents together once the parent's previous answer is back, and the
  parent resumes only when every one of them has finished (its next request waits for all their last answers);
- think times over MAX_THINK_S are cut to it (the tester's --max-delay default);
- a request's own time is when an instant server would let it go (the think times along its chain): the replay
  sends it no earlier than that at the replay's speed, and never before its answers plus its think time;
- "local" hash ids are the file's own: two files' equal ids are different blocks ("global": the same blocks).
"""

from __future__ import annotations

from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.workload.trace_rows import Trace, TraceRow

MAX_THINK_S = 60.0  # trace_replay_tester.py --max-delay default: "Maximum delay between requests (seconds)"
LOCAL_HASH_STRIDE = 1 << 32  # file k's local hash id h becomes k x this + h
FORMAT_HELP = (
    'a Weka agentic trace is one JSON object: {"block_size": n, "requests": [{"type": "n" or "s", "in": n, '
    '"out": n, "hash_ids": [...], "think_time": s} or {"type": "subagent", "requests": [...]}]}'
)


def is_agentic(obj: object) -> bool:
    """True for a JSON object shaped like a Weka conversation (a "requests" list and a "block_size")."""
    return isinstance(obj, dict) and isinstance(obj.get("requests"), list) and "block_size" in obj


class _Walk:
    """Rows of one or more conversations, with keys unique across them."""

    def __init__(self) -> None:
        self.rows: list[TraceRow] = []

    def conversation(self, obj: object, where: str, hash_base: int) -> None:
        if not is_agentic(obj):
            raise KneecapError(f"{where} is not a Weka agentic trace", FORMAT_HELP)
        self.session(obj["requests"], where, hash_base, after=(), start_s=0.0)

    def session(self, entries: list, where: str, hash_base: int, after: tuple[int, ...], start_s: float):
        """Add a session's requests (each after `after` at first, then after the previous); returns the keys whose
        answers end it and when an instant server would have them."""
        last: tuple[int, ...] = after  # the parent's answer the next request (or sub-agent) waits for
        last_s = start_s
        spawned: list[int] = []  # the last answers of sub-agents started since that answer
        spawned_s = start_s
        for i, entry in enumerate(entries):
            at = f"{where} request {i}"
            if not isinstance(entry, dict):
                raise KneecapError(f"{at} is not a JSON object", FORMAT_HELP)
            if entry.get("type") == "subagent":
                sub = entry.get("requests")
                if not isinstance(sub, list):
                    raise KneecapError(f"{at}: a sub-agent needs its own requests list", FORMAT_HELP)
                ends, end_s = self.session(sub, f"{at} (sub-agent)", hash_base, after=last, start_s=last_s)
                spawned.extend(ends)
                spawned_s = max(spawned_s, end_s)
                continue
            key = len(self.rows)
            think = min(_seconds(entry.get("think_time", 0.0), "think_time", at), MAX_THINK_S)
            own_s = max(last_s, spawned_s) + think
            self.rows.append(
                TraceRow(
                    line=key + 1,
                    timestamp_s=own_s,
                    input_tokens=_whole(entry.get("in"), "in", at),
                    output_tokens=_whole(entry.get("out"), "out", at),
                    hash_ids=_hash_ids(entry.get("hash_ids"), at, hash_base),
                    key=key,
                    after_keys=last + tuple(spawned),
                    think_s=think,
                )
            )
            last, last_s, spawned, spawned_s = (key,), own_s, [], own_s
        return last + tuple(spawned), max(last_s, spawned_s)


def _whole(value: object, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise KneecapError(f"{where}: {what} must be a whole number of tokens >= 1, got {value!r}", FORMAT_HELP)
    return int(value)


def _seconds(value: object, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise KneecapError(f"{where}: {what} must be a number of seconds >= 0, got {value!r}", FORMAT_HELP)
    return float(value)


def _hash_ids(value: object, where: str, base: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise KneecapError(f"{where}: hash_ids must be a list of integers", FORMAT_HELP)
    return tuple(base + h for h in value)


def parse_agentic(conversations: list[tuple[str, object]], source: str) -> Trace:
    """One trace of the conversations [(where, parsed JSON)], all starting at once (the tester's --start-users
    N starts N users together)."""
    walk = _Walk()
    sizes = set()
    for k, (where, obj) in enumerate(conversations):
        if not is_agentic(obj):
            raise KneecapError(f"{where} is not a Weka agentic trace", FORMAT_HELP)
        size = obj["block_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise KneecapError(f"{where}: block_size must be a whole number of tokens >= 1, got {size!r}", FORMAT_HELP)
        sizes.add(size)
        local = obj.get("hash_id_scope", "local") != "global"
        walk.conversation(obj, where, hash_base=k * LOCAL_HASH_STRIDE if local else 0)
    if len(sizes) > 1:
        raise KneecapError(
            f"the conversations of {source} hash blocks of different sizes ({sorted(sizes)} tokens)",
            "replay conversations recorded with one block_size together",
        )
    if not walk.rows:
        raise KneecapError(f"trace {source} holds no requests", FORMAT_HELP)
    return Trace(source=source, format="weka", rows=tuple(walk.rows), hash_block_tokens=sizes.pop())


def read_agentic(path: Path) -> Trace:
    """A Weka conversation file, or a folder of them (every *.json in it, in name order)."""
    import orjson

    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise KneecapError(f"folder {path} holds no .json conversation", "pass a Weka trace file or its folder")
    conversations = []
    for f in files:
        try:
            conversations.append((str(f), orjson.loads(f.read_bytes())))
        except OSError as exc:
            raise KneecapError(f"cannot read trace {f}: {exc.strerror or exc}", "pass an existing file") from None
        except orjson.JSONDecodeError:
            raise KneecapError(f"trace {f} is not valid JSON", FORMAT_HELP) from None
    return parse_agentic(conversations, str(path))
