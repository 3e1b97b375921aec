"""Where a sweep keeps what it measures: the one storage port of the level runner (kneecap.sweep.runner).

A SweepStore takes each record as it finishes (`write`), makes the records durable at the end of a level (`sync`),
reads one level's records back (`tell`, then `level_records`) and keeps the summary after every level (`save`).
Two stores: ResultsStore, a results folder (requests.jsonl appended as records finish, summary.json rewritten
after every level: a killed run keeps every level it finished, and --resume continues it), and MemoryStore, the
records in a list and the last summary in memory, for library callers (recommend, calibrate, validation).
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

from kneecap.records import RequestRecord


class SweepStore(Protocol):
    """The runner's storage port: the records as they finish, read back per level, and the summary."""

    def write(self, record: RequestRecord) -> None:
        """Keep one finished record (requests.jsonl: appended at once)."""

    def sync(self) -> None:
        """Make every record written so far durable (a level ended, or the run is cut)."""

    def tell(self) -> int:
        """Where the next record will start (an offset level_records understands)."""

    def level_records(self, level: int, offset: int = 0) -> Iterable[RequestRecord]:
        """The records of `level` kept from `offset` on."""

    def save(self, summary: dict) -> None:
        """Keep the sweep's summary as it stands (summary.json: rewritten after every level)."""


class ResultsStore:
    """A results folder (kneecap.results.ResultsDir) and its open requests.jsonl writer: records appended as they
    finish, read back from requests.jsonl (kneecap.sweep.resume.RecordsFile), summary.json written atomically.
    prepare_record: what the command changes in a record before it is written (bench's privacy rules);
    prepare_summary: the summary as written (simulate sorts its keys). `summary` is the last one written."""

    def __init__(
        self,
        results,
        writer,
        *,
        prepare_record: Callable[[RequestRecord], None] | None = None,
        prepare_summary: Callable[[dict], dict] | None = None,
    ):
        from kneecap.sweep.resume import RecordsFile

        self.results = results
        self._writer = writer
        self._file = RecordsFile(results.records_path)
        self._prepare_record = prepare_record
        self._prepare_summary = prepare_summary
        self.summary: dict | None = None

    def write(self, record: RequestRecord) -> None:
        if self._prepare_record is not None:
            self._prepare_record(record)
        self._writer.write(record)

    def sync(self) -> None:
        self._writer.sync()

    def tell(self) -> int:
        return self._file.tell()

    def level_records(self, level: int, offset: int = 0):
        return self._file.level_records(level, offset)

    def save(self, summary: dict) -> None:
        doc = summary if self._prepare_summary is None else self._prepare_summary(summary)
        self.results.write_summary(doc)
        self.summary = doc


class MemoryStore:
    """The records in a list (offsets count records, not bytes) and the last summary saved, nothing on disk."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.summary: dict | None = None

    def write(self, record: RequestRecord) -> None:
        self.records.append(record)

    def sync(self) -> None:
        pass

    def tell(self) -> int:
        return len(self.records)

    def level_records(self, level: int, offset: int = 0):
        return (r for r in self.records[offset:] if r.level == level)

    def save(self, summary: dict) -> None:
        self.summary = summary
