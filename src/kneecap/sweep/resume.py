"""requests.jsonl as the sweep reads it back: one level's records, and `--resume DIR`'s bookkeeping.

A level's statistics are computed from its records read back from requests.jsonl (from the byte
offset where the level started), so memory does not grow with the length of a level.
`--resume DIR`: which levels are done, and moving the records of unfinished levels aside.

A level is done when summary.json holds its complete entry (kneecap.results decides). Records
of any other level (a level killed half-way) are moved from requests.jsonl to
requests.discarded.jsonl, so the re-run of that level is the only copy its statistics see:
no level is duplicated and none is lost. The rewrite is atomic (temp file, fsync, rename).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

DISCARDED_FILE = "requests.discarded.jsonl"


def _level_of(line: bytes) -> int | None:
    import orjson

    try:
        value = orjson.loads(line).get("level")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def set_aside_records(records_path: Path, keep_levels: set[int]) -> tuple[int, int]:
    """Keep only lines whose `level` is in keep_levels; move the rest (and any torn tail) aside.

    Returns (kept, moved). A missing requests.jsonl is (0, 0).
    """
    records_path = Path(records_path)
    if not records_path.exists():
        return 0, 0
    keep: list[bytes] = []
    moved: list[bytes] = []
    with open(records_path, "rb") as fh:
        for line in fh:
            if line.endswith(b"\n") and _level_of(line) in keep_levels:
                keep.append(line)
            elif line.strip():
                moved.append(line if line.endswith(b"\n") else line + b"\n")
    if not moved:
        return len(keep), 0
    discarded = records_path.with_name(DISCARDED_FILE)
    fd = os.open(discarded, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"".join(moved))
        os.fsync(fd)
    finally:
        os.close(fd)
    from kneecap.results import write_atomic

    write_atomic(records_path, b"".join(keep))
    return len(keep), len(moved)


class RecordsFile:
    """Read-back side of requests.jsonl (the RecordWriter appends with os.write: no buffer to flush)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def tell(self) -> int:
        """Current size in bytes: where the next record will start."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def level_records(self, level: int, offset: int = 0) -> Iterator:
        """Records of `level` from byte `offset` on (a torn or corrupt line is skipped, as iter_records does)."""
        import orjson

        from kneecap.records import RequestRecord

        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                try:
                    data = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(data, dict) and data.get("level") == level:
                    yield RequestRecord.from_dict(data)
