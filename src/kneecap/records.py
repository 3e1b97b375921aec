"""RequestRecord: what every driver (simulator, HTTP client) emits for one request, and its JSONL I/O.

Times are seconds (float) on one monotonic clock per run, measured from the run's epoch
(the simulator's virtual clock starts at 0.0). Metrics, knee, stop rules, capacity and
reports are pure functions of these records. requests.jsonl is the source of truth:
one record per line, appended as requests finish.

Write policy (crash safety): each record is serialised to one complete line and written with
a single os.write on an O_APPEND descriptor, so a SIGKILL leaves at most a torn final line,
which the reader skips; the file is fsync'ed at the end of every level.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterator

# status values
OK = "ok"
ERROR = "error"
TIMEOUT = "timeout"
CANCELLED = "cancelled"


@dataclass
class RequestRecord:
    """One request, start to end. Times in seconds since the run epoch; None = never happened."""

    request_id: str
    level: int  # index of the sweep level / load cell this request belongs to
    concurrency: int | None = None  # closed-loop level (None in open loop)
    rate: float | None = None  # open-loop level, requests/s (None in closed loop)
    class_name: str = "default"
    warmup: bool = False  # warmup requests are recorded but excluded from statistics
    scheduled_at: float | None = None  # when the load pattern intended to send it
    sent_at: float | None = None  # right before the request bytes were written
    first_token_at: float | None = None  # first generated token of any kind (reasoning included)
    first_answer_at: float | None = None  # first answer (non-reasoning) token
    end_at: float | None = None  # last byte of the response / failure time
    chunk_times: list[float] = field(default_factory=list)  # arrival of each token-bearing chunk (read)
    chunk_tokens: list[int] = field(default_factory=list)  # tokens carried by that chunk
    # the simulator's tokens as runs of consecutive engine steps, one token per step:
    # [time of the run's first token s, tokens in the run, time of its last token s]. Its records carry
    # chunk_times only when asked (simulate --token-times); in memory they also reference the level's step
    # timeline (see StepRuns), from which the exact per-token times and gaps come.
    token_runs: list[list] = field(default_factory=list)
    expected_input_tokens: int | None = None  # what the workload asked for
    expected_output_tokens: int | None = None
    prompt_tokens: int | None = None  # as the server reported (usage); None if it did not say
    output_tokens: int | None = None  # as the server reported; None if it did not say
    status: str = OK
    error_kind: str | None = None  # e.g. "http_500", "http_429", "connection", "timeout", "malformed_sse"
    error_message: str | None = None
    prompt_hash: str | None = None  # sha256 of the prompt (prompts themselves are not kept by default)
    prompt: str | None = None  # only with --keep-prompts
    conversation_id: str | None = None  # multi-turn: the conversation this turn belongs to (None otherwise)
    turn: int | None = None  # multi-turn: 1-based turn within it
    extra: dict = field(default_factory=dict)  # driver-specific facts (e.g. simulator: preempted count)

    # in memory only, not a field (never serialised — orjson skips attributes named with a leading underscore —
    # nor compared): the simulator's runs as step indices into the level's shared StepTimeline; None for every
    # other record and for records read back from a file
    _step_runs = None

    @property
    def step_runs(self) -> "StepRuns | None":
        return self._step_runs

    @step_runs.setter
    def step_runs(self, value: "StepRuns | None") -> None:
        self._step_runs = value

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def num_output_tokens(self) -> int:
        """Output tokens: the server's usage count if reported, else the tokens counted in chunks."""
        if self.output_tokens is not None:
            return self.output_tokens
        return sum(self.chunk_tokens)

    def token_times(self) -> list[float]:
        """The time (s) of each token-bearing chunk: chunk_times, or a simulated record's step times."""
        if self.chunk_times or self._step_runs is None:
            return self.chunk_times
        return self._step_runs.times()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RequestRecord":
        return cls(**{k: v for k, v in data.items() if k in _SERIALISED})


class StepTimeline:
    """End times (s) of one engine's steps, step i at ends[i]; appended to as the engine runs and shared by
    the records of its requests (a record's StepRuns index into it). `array()` is a numpy view of it."""

    __slots__ = ("ends", "_array")

    def __init__(self, ends: list[float] | None = None):
        self.ends: list[float] = [] if ends is None else ends
        self._array = None

    def array(self):
        import numpy as np

        if self._array is None or len(self._array) != len(self.ends):
            self._array = np.array(self.ends, dtype=np.float64)
        return self._array


class StepRuns:
    """A simulated request's tokens: one per engine step, in runs of consecutive steps [first step, steps]
    of a StepTimeline. Exactly the per-token times chunk_times would hold, without one float per token."""

    __slots__ = ("timeline", "runs")

    def __init__(self, timeline: StepTimeline, runs: list[list[int]]):
        self.timeline = timeline
        self.runs = runs

    def times(self) -> list[float]:
        """Every token's time (s), as chunk_times would list them."""
        ends = self.timeline.ends
        out: list[float] = []
        for first, n in self.runs:
            out.extend(ends[first : first + n])
        return out


_SERIALISED = frozenset(f.name for f in fields(RequestRecord))


def dumps_record(record: RequestRecord) -> bytes:
    """One record as one JSON line (bytes, newline-terminated).

    orjson serialises the dataclass itself (fields in declaration order, as to_dict() would give):
    dataclasses.asdict deep-copies every list element first, which cost ~0.1 ms of the client's
    single core per 64-token record, on the read path of every other stream in flight. A simulated
    record's in-memory step_runs is left out (its token_runs say the same in seconds).
    """
    import orjson

    return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


class RecordWriter:
    """Appends records to a JSONL file, one os.write per line; `sync()` fsyncs (call per level)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: RequestRecord) -> None:
        data = dumps_record(record)
        written = os.write(self._fd, data)
        while written < len(data):  # a short write on a regular file is rare; finish it
            written += os.write(self._fd, data[written:])

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_records(path: str | os.PathLike) -> Iterator[RequestRecord]:
    """Read records back; a torn or corrupt line (e.g. after SIGKILL) is skipped, never fatal."""
    import orjson

    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break  # torn final line
            try:
                data = orjson.loads(line)
                if isinstance(data, dict):  # a JSON line that is not an object is as corrupt as a torn one
                    yield RequestRecord.from_dict(data)
            except (orjson.JSONDecodeError, TypeError):
                continue


def read_records(path: str | os.PathLike) -> list[RequestRecord]:
    return list(iter_records(path))
