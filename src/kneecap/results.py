"""The results folder of a bench / simulate / run: requests.jsonl, summary.json, manifest.json.

Owns those files and their write policy; computes nothing (metrics/ does). summary.json is
replaced atomically (temp file in the same folder, fsync, os.replace, fsync the folder), so a
reader or a SIGKILL sees the previous summary or the new one, never half of one.
manifest.json says what ran where, with secrets redacted from the command line.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from kneecap.errors import KneecapError

RECORDS_FILE = "requests.jsonl"
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "manifest.json"
KINDS = ("bench", "simulate", "run")
CELL_RECORDS_DIR = "records"  # `kneecap run`: one records file per cell, beside its trace and a discarded attempt
_CELL_RECORDS = re.compile(r"cell-\d{4,}\.jsonl")
REDACTED = "<redacted>"
LEVEL_REQUIRED_KEYS = (
    "requests",
    "completed",
    "failed",
    "duration_s",
    "output_tok_s",
    "input_tok_s",
    "total_tok_s",
    "request_s",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "errors",
)


def cell_records_name(index: int, part: str | None = None) -> str:
    """'records/cell-0003.jsonl' (a run's cell records, relative to its folder); part 'trace' or 'discarded'
    names the cell's engine trace or its set-aside attempt ('records/cell-0003.trace.jsonl')."""
    return f"{CELL_RECORDS_DIR}/cell-{index:04d}{'.' + part if part else ''}.jsonl"


def cell_records_files(folder: str | os.PathLike) -> list[Path]:
    """A run folder's cell records files, in cell order: not the cells' traces nor their discarded attempts."""
    directory = Path(folder) / CELL_RECORDS_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _CELL_RECORDS.fullmatch(p.name))


# --- redaction -------------------------------------------------------------------------------------

# A flag is secret when its name holds one of these. Plural "tokens" (--max-tokens, --kv-tokens) and
# "tokenizer" are counts and paths, not credentials, so they are removed before matching "token".
# A name ending in a reference word (--api-key-env NAME, --api-key-file PATH) holds where the secret
# is, not the secret, and is kept (resume reads it back from manifest.json).
_SECRET_PARTS = ("key", "token", "secret", "passw", "auth", "credential", "bearer", "cookie")
_NOT_SECRET_PARTS = ("tokens", "tokenizer")
_REFERENCE_WORDS = ("env", "file", "path", "var")
_VALUE_PATTERNS = (
    (
        re.compile(r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|cookie)(\s*[:=]\s*)(.+)"),
        lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}",
    ),
    (re.compile(r"(?i)\bbearer\s+\S+"), lambda m: f"Bearer {REDACTED}"),
    (re.compile(r"(?i)(://[^/\s:@]+:)[^/\s@]+@"), lambda m: f"{m.group(1)}{REDACTED}@"),  # user:pass@host
    (
        re.compile(r"(?i)([?&][^=&\s]*(?:key|token|secret|passw|auth|sig)[^=&\s]*=)[^&\s]+"),
        lambda m: f"{m.group(1)}{REDACTED}",
    ),  # ?api_key=...
    (re.compile(r"\b(?:sk|hf|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{8,}"), lambda m: REDACTED),  # well-known key prefixes
)


def is_secret_name(name: str) -> bool:
    """Does a flag / field / header name (e.g. '--api-key', 'Authorization') name a secret?"""
    text = name.lower().lstrip("-")
    if re.split(r"[^a-z0-9]+", text)[-1] in _REFERENCE_WORDS:
        return False
    for part in _NOT_SECRET_PARTS:
        text = text.replace(part, " ")
    return any(part in text for part in _SECRET_PARTS)


def redact_text(text: str) -> str:
    """Redact secret-looking values inside one string (headers, bearer tokens, URL credentials)."""
    for pattern, repl in _VALUE_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with every secret value replaced by '<redacted>'.

    Redacted: the value after (or `=`-joined to) a flag whose name names a secret
    (is_secret_name), and secret-looking text anywhere (Authorization / Bearer headers, URL
    credentials, key=... query parameters, sk-/hf_-style keys).
    """
    out: list[str] = []
    redact_next = False
    for arg in argv:
        arg = str(arg)
        if redact_next and not arg.startswith("--"):
            out.append(REDACTED)
            redact_next = False
            continue
        redact_next = False
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(name)
                    redact_next = True
                continue
        out.append(redact_text(arg))
    return out


def redact_value(value: Any) -> Any:
    """Redact a JSON-like value: string values of secret-named dict keys are replaced (numbers,
    booleans and None are kept: they are settings, not credentials); all strings are scrubbed."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_name(str(k)) and isinstance(v, str) and v else redact_value(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


# --- environment -----------------------------------------------------------------------------------


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _gpus() -> list[dict] | None:
    """GPUs as nvidia-smi lists them (None when there is no nvidia-smi or it fails)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    rows = [[p.strip() for p in line.split(",")] for line in proc.stdout.splitlines()]
    return [dict(zip(("name", "memory_total", "driver_version"), row)) for row in rows if len(row) == 3]


def _package_versions(names: Sequence[str]) -> dict:
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict:
    """What ran the measurement (no hostname, no user name, no environment variables)."""
    from kneecap import __version__

    return {
        "kneecap_version": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "os": platform.system(),
        "os_release": platform.release(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
        "packages": _package_versions(("numpy", "aiohttp", "orjson", "uvloop")),
    }


# --- summary ---------------------------------------------------------------------------------------


def build_summary(
    kind: str,
    levels: Sequence[Mapping],
    knee: Mapping | None,
    stopped: Mapping | None,
    *,
    model_executed: bool,
    benchmark_executed: bool,
    manifest: Mapping | str | None = MANIFEST_FILE,
    **extra,
) -> dict:
    """The summary.json document: {kind, levels, knee, stopped, manifest, model_executed,
    benchmark_executed, ...extra}.

    model_executed: a real model produced the tokens (False for the simulator).
    benchmark_executed: a real server was driven and timed (False for the simulator, which
    computes its times, and for dry runs).
    manifest: the manifest dict, or its file name relative to the results folder.
    """
    if kind not in KINDS:
        raise KneecapError(f"unknown summary kind {kind!r}", f"use one of {', '.join(KINDS)}")
    summary = {
        "kind": kind,
        "levels": [dict(level) for level in levels],
        "knee": dict(knee) if knee is not None else None,
        "stopped": dict(stopped) if stopped is not None else None,
        "manifest": manifest,
        "model_executed": bool(model_executed),
        "benchmark_executed": bool(benchmark_executed),
    }
    summary.update(extra)  # named parameters above cannot collide with extra's keys
    return summary


def level_is_complete(level: Mapping) -> bool:
    """A level entry is complete when it has every DESIGN key and is not marked partial."""
    return all(k in level for k in LEVEL_REQUIRED_KEYS) and not level.get("partial", False)


def _dumps(doc: Any) -> bytes:
    import orjson

    try:
        return (
            orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n"
        )
    except TypeError as exc:
        raise KneecapError(
            f"summary is not JSON-serialisable ({exc})", "pass plain numbers, strings, lists and dicts"
        ) from None


class ResultsDir:
    """A results folder: DIR/requests.jsonl, DIR/summary.json, DIR/manifest.json."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise KneecapError(
                f"results path {self.path} exists and is not a folder",
                "pass --out a folder path (it is created if missing)",
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KneecapError(
                f"cannot create results folder {self.path}: {exc.strerror}", "pass --out a writable folder"
            ) from None
        self.records_path = self.path / RECORDS_FILE
        self.summary_path = self.path / SUMMARY_FILE
        self.manifest_path = self.path / MANIFEST_FILE

    def open_writer(self):
        """An append-only RecordWriter on requests.jsonl (existing records are kept: resume appends)."""
        from kneecap.records import RecordWriter

        return RecordWriter(self.records_path)

    def _read_json(self, target: Path) -> dict | None:
        import orjson

        if not target.exists():
            return None
        try:
            return orjson.loads(target.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise KneecapError(
                f"{target} is not valid JSON ({exc})", f"delete it to start over, or recompute it from {RECORDS_FILE}"
            ) from None

    def write_summary(self, summary: Mapping) -> None:
        """Replace summary.json atomically (call after every level)."""
        write_atomic(self.summary_path, _dumps(summary))

    def read_summary(self) -> dict | None:
        """summary.json as a dict, None when it does not exist yet."""
        return self._read_json(self.summary_path)

    def write_manifest(self, command_argv: Sequence[str], extra: Mapping | None = None) -> dict:
        """Write manifest.json (environment + redacted command line + redacted extra); returns it."""
        manifest = {
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **environment(),
            "command": redact_argv(command_argv),
        }
        if extra:
            manifest.update(redact_value(dict(extra)))
        write_atomic(self.manifest_path, _dumps(manifest))
        return manifest

    def read_manifest(self) -> dict | None:
        return self._read_json(self.manifest_path)

    def completed_levels(self) -> list[int]:
        """Indexes of the levels summary.json holds complete (for --resume), sorted.

        The index is the entry's `level` field (summarize_level sets it from the records), else
        its position in `levels`.
        """
        summary = self.read_summary()
        if not summary:
            return []
        done = set()
        for position, level in enumerate(summary.get("levels") or []):
            if isinstance(level, Mapping) and level_is_complete(level):
                index = level.get("level", position)
                if isinstance(index, int):
                    done.add(index)
        return sorted(done)


def current_argv() -> list[str]:
    """This process's command line as the user typed it (program name shortened to 'kneecap')."""
    return ["kneecap", *sys.argv[1:]]


def write_atomic(target: Path, data: bytes) -> None:
    """Replace `target` with `data` atomically: write a temp file in the same folder, fsync it, rename it
    over the target, fsync the folder. A crash leaves the old file or the new one, never a torn one."""
    folder = Path(target).parent
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(target).name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)
    os.close(dir_fd)
