"""The live per-level progress display on stderr (rich), and its silent twin for --quiet / --json.

`on_record` sits on the hot path (called once per finished request), so it only bumps counters;
rich redraws from its own refresh thread a few times a second.
"""

from __future__ import annotations

import sys


class SilentProgress:
    """Same interface, prints nothing (--quiet, --json, or stderr not wanted)."""

    def start_level(self, label: str, total: int, phase: str = "measure") -> None:
        pass

    def on_record(self, ok: bool) -> None:
        pass

    def end_level(self, line: str | None = None) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def close(self) -> None:
        pass


class RichProgress(SilentProgress):
    """One progress bar per level: requests done / planned, failures, elapsed time."""

    REFRESH_PER_S = 4  # low, so redrawing never competes with the driver for the GIL

    def __init__(self, console=None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console(file=sys.stderr, highlight=False)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            console=self.console,
            refresh_per_second=self.REFRESH_PER_S,
            transient=False,
        )
        self._task = None
        self._failed = 0
        self._done = 0
        self._closed = False
        self._started = False  # the live display starts with the first level or note: an error before any
        # (an unreachable server, say) then stays one line, with no blank line a stopped empty display leaves

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._progress.start()

    def start_level(self, label: str, total: int, phase: str = "measure") -> None:
        self._start()
        self.end_level()
        self._failed = 0
        self._done = 0
        desc = f"{label} warmup" if phase == "warmup" else label
        self._task = self._progress.add_task(desc, total=total, failed=0)

    def on_record(self, ok: bool) -> None:
        self._done += 1
        if not ok:
            self._failed += 1
        if self._task is not None:
            self._progress.update(self._task, completed=self._done, failed=self._failed)

    def end_level(self, line: str | None = None) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=self._done, failed=self._failed)
            self._progress.stop_task(self._task)
            self._task = None
        if line:
            self._start()
            self._progress.console.print(line, markup=False, highlight=False)

    def note(self, line: str) -> None:
        self._start()
        self._progress.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.end_level()
        if self._started:
            self._progress.stop()


class PlainNotes(SilentProgress):
    """No bars, but warnings still reach stderr (used with --json, where stdout is reserved)."""

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)


def make_progress(*, quiet: bool, json_out: bool) -> SilentProgress:
    if quiet:
        return SilentProgress()
    if json_out:
        return PlainNotes()
    return RichProgress()
