"""A sweep's records kept in memory, for a run of the one level runner (kneecap.sweep.runner) that writes no
requests.jsonl: its write_record sink and its records_file read-back side in one (calibrate's replays)."""

from __future__ import annotations

from kneecap.records import RequestRecord


class MemoryRecords:
    """write(record) keeps a record; tell() and level_records(level, offset) read them back as
    kneecap.sweep.resume.RecordsFile reads requests.jsonl (offsets count records, not bytes)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def write(self, record: RequestRecord) -> None:
        self.records.append(record)

    def tell(self) -> int:
        return len(self.records)

    def level_records(self, level: int, offset: int = 0):
        return (r for r in self.records[offset:] if r.level == level)
