"""Read a results folder (or a plan.json / summary.json file) and say which kind it is.

Strict about the kind (bench, simulate, run, plan — anything else is an error naming the
file), tolerant about everything else: optional files and keys that are absent are listed in
`missing` so the page can say what it could not show. This is the only module of the report
package that reads files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kneecap.errors import KneecapError

KINDS = ("bench", "simulate", "run", "plan")
SWEEP_KINDS = ("bench", "simulate")
PLAN_KEYS = ("ledger", "kv_bytes_per_token")  # what makes a JSON document a `kneecap plan --json` output
MAX_TRACE_ROWS = 200_000  # longer simulator traces are thinned evenly for plotting


MAX_ERROR_SAMPLES = 3  # distinct error messages kept per (level, error kind)


@dataclass(frozen=True)
class RecordDigest:
    """The little a report needs from the raw records, gathered in one streaming pass (a sweep at
    C=1024 can hold millions of chunk timestamps; none of them is kept).

    num_records: records read (warmup included); chunk_token_counts: {tokens in one chunk: chunks},
    over completed non-warmup requests; error_samples: {(level, error kind): up to
    MAX_ERROR_SAMPLES distinct messages, as the server or client wrote them}.
    """

    num_records: int = 0
    chunk_token_counts: dict = field(default_factory=dict)
    error_samples: dict = field(default_factory=dict)


def digest_records(records) -> RecordDigest:
    """One pass over RequestRecords (any iterable) -> RecordDigest."""
    from collections import Counter

    count = 0
    chunks: Counter = Counter()  # its update() counts a list in C: a long level has millions of chunks
    errors: dict[tuple[int, str], list[str]] = {}
    for rec in records:
        count += 1
        if rec.status == "ok":
            if not rec.warmup:
                chunks.update(rec.chunk_tokens)
                if not rec.chunk_tokens and rec.token_runs:  # a simulated request: one token per engine step
                    chunks[1] += sum(n for _, n, _ in rec.token_runs)
        elif rec.error_message:
            bucket = errors.setdefault((rec.level, rec.error_kind or rec.status), [])
            if rec.error_message not in bucket and len(bucket) < MAX_ERROR_SAMPLES:
                bucket.append(rec.error_message)
    return RecordDigest(count, dict(chunks), {key: tuple(v) for key, v in errors.items()})


@dataclass(frozen=True)
class Results:
    """Everything a report page needs from one results location. Times in s, sizes in bytes."""

    kind: str
    path: Path  # the folder (or the file's folder when a file was given)
    summary: dict  # summary.json, or the plan JSON for kind "plan"
    records: "RecordDigest | None" = None  # what the page needs from requests.jsonl (or records/*.jsonl)
    trace: tuple = ()  # simulator trace rows (dicts), thinned to at most MAX_TRACE_ROWS
    timeline: tuple = ()  # server-metric samples over time (dicts), if the driver wrote them
    plan: dict | None = None  # a plan.json found next to a sweep or run summary
    missing: tuple[str, ...] = field(default_factory=tuple)  # optional inputs that were absent

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise KneecapError(
                f"unknown results kind {self.kind!r} in {self.path}", f"kneecap report reads {', '.join(KINDS)} results"
            )

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KneecapError(f"{path} does not exist", "pass a results folder written by bench, simulate, run or plan")
    except (OSError, UnicodeDecodeError) as exc:
        raise KneecapError(f"cannot read {path}: {exc}", "check the path and its permissions")
    except json.JSONDecodeError as exc:
        raise KneecapError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            "re-run the command that wrote it, or recompute the summary from its records",
        )
    if not isinstance(data, dict):
        raise KneecapError(
            f"{path} holds a JSON {type(data).__name__}, not an object",
            "pass a summary.json or plan.json written by kneecap",
        )
    return data


def _kind_of(data: dict, path: Path) -> str:
    kind = data.get("kind")
    if kind is None and all(k in data for k in PLAN_KEYS):
        return "plan"
    if kind not in KINDS:
        found = "no 'kind' key" if kind is None else f"kind {kind!r}"
        raise KneecapError(
            f"{path} has {found}; kneecap report reads {', '.join(KINDS)} results",
            "pass a folder written by `kneecap bench|simulate|run --out DIR` or a `kneecap plan --json` file",
        )
    return kind


def _read_jsonl_dicts(path: Path, limit: int | None = None) -> list[dict]:
    """JSON-object lines as dicts, evenly thinned to at most `limit` rows: a first pass counts the
    lines, the second decodes only every k-th one, so a long trace never sits in memory whole.
    A torn last line or a corrupt line is skipped."""
    import orjson

    step = 1
    if limit is not None:
        with open(path, "rb") as fh:
            total = sum(1 for _ in fh)
        step = max(1, -(-total // limit))  # ceil(total / limit)
    rows: list[dict] = []
    with open(path, "rb") as fh:
        for index, line in enumerate(fh):
            if index % step or not line.endswith(b"\n"):
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _read_records(folder: Path) -> tuple[RecordDigest | None, list[str]]:
    from itertools import chain

    from kneecap.records import iter_records

    from kneecap.results import RECORDS_FILE, cell_records_files

    single = folder / RECORDS_FILE
    paths = [single] if single.is_file() else cell_records_files(folder)
    if not paths:
        return None, ["requests.jsonl (per-request records: no tokens-per-chunk histogram, no error messages)"]
    try:
        return digest_records(chain.from_iterable(iter_records(p) for p in paths)), []
    except OSError as exc:
        raise KneecapError(f"cannot read the records in {folder}: {exc.strerror}", "check the folder's permissions")


def _manifest(folder: Path, value: object) -> dict | None:
    """The manifest: inline in the summary, or a file it names (default manifest.json)."""
    if isinstance(value, dict):
        return value
    name = value if isinstance(value, str) and value else "manifest.json"
    path = folder / name
    if Path(name).name != name or not path.is_file():  # only a file inside the results folder
        return None
    try:
        return _read_json(path)
    except KneecapError:
        return None


def load_results(location: str | Path) -> Results:
    """Load a bench/simulate/run folder, a folder holding plan.json, or a plan/summary JSON file."""
    path = Path(location)
    if not path.exists():
        raise KneecapError(f"{path} does not exist", "pass a results folder written by bench, simulate, run or plan")
    if path.is_file():
        data = _read_json(path)
        kind = _kind_of(data, path)
        folder = path.parent
    elif (path / "summary.json").is_file():
        folder = path
        data = _read_json(path / "summary.json")
        kind = _kind_of(data, path / "summary.json")
    elif (path / "plan.json").is_file():
        data = _read_json(path / "plan.json")
        _kind_of(data, path / "plan.json")
        return Results(kind="plan", path=path, summary=data)
    else:
        raise KneecapError(
            f"{path} holds neither summary.json nor plan.json",
            "pass a folder written by `kneecap bench|simulate|run --out DIR`, or a plan.json",
        )
    if kind == "plan":
        return Results(kind="plan", path=folder, summary=data)

    missing: list[str] = []
    records, absent = _read_records(folder)
    missing.extend(absent)
    trace, timeline = (
        tuple(_read_jsonl_dicts(folder / name, MAX_TRACE_ROWS)) if (folder / name).is_file() else ()
        for name in ("trace.jsonl", "server_metrics.jsonl")
    )  # simulate's steps; bench's scrapes
    plan = None
    if (folder / "plan.json").is_file():
        plan_data = _read_json(folder / "plan.json")
        plan = plan_data if all(k in plan_data for k in PLAN_KEYS) else None
    data = dict(data)
    data["manifest"] = _manifest(folder, data.get("manifest"))
    if data["manifest"] is None:
        missing.append("manifest (command line, versions, environment)")
    return Results(
        kind=kind,
        path=folder,
        summary=data,
        records=records,
        trace=trace,
        timeline=timeline,
        plan=plan,
        missing=tuple(missing),
    )
