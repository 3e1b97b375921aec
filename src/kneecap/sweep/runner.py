"""The one level runner: the sweep's levels in order — preflight skip, run, summarize, knee, stop rules,
progress, summary.json after every level, resume, interruption — whatever produces the records.

The records come from a LevelDriver passed in: the live HTTP client (kneecap.sweep.http_levels, one
process or many), the simulated engine in virtual time (kneecap.sim.level_driver), or a test's fake.
The runner owns the order of things and what goes into summary.json; the driver owns how a level's
requests are sent and what it learns about the server and itself; the store (kneecap.sweep.store) where
records and summaries are kept. Records reach the store (requests.jsonl) as they finish and the summary
after every level; a killed run keeps every level it finished. Commands enter through kneecap.sweep.door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kneecap.errors import KneecapError
from kneecap.levels import LevelDriver, LevelOptions, LevelRun, SweepLevel
from kneecap.metrics.slo import level_meets_slo
from kneecap.metrics.stability import LevelTimes, judge
from kneecap.records import RequestRecord
from kneecap.sweep.store import SweepStore

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_STOPPED = "stopped"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"  # the client itself failed (one-line error on stderr); --resume continues


@dataclass
class SweepState:
    """What the sweep has learned so far; becomes summary.json."""

    levels: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    stopped: dict | None = None
    status: str = STATUS_RUNNING
    preflight: dict | None = None
    server: dict | None = None
    connections: dict | None = None  # keep-alive or not, and what decided it (kneecap.client.keepalive)
    done: frozenset[int] = frozenset()  # levels a resumed run already has (not run again)


class Sweep:
    """Runs the levels of one sweep (fresh or resumed) and keeps summary.json current.

    `summary_fields()` gives the summary's kind and the keys only this command writes (build_summary's
    arguments); `store` (kneecap.sweep.store.SweepStore) keeps each record as it finishes, reads a level's
    records back and keeps the summary after every level.

    A command above the runner may add: `on_level(level, run, summary, records)`, once a level is summarised and
    before the stop checks, adds its fields to the summary (seeing the driver's LevelRun, e.g. a trace, and the
    records); `stop_rule(summary)`, after the runner's own checks, returns a stop record ({at, reason, detail}) or None.
    """

    def __init__(
        self,
        opts: LevelOptions,
        *,
        state: SweepState,
        sweep_levels: list[SweepLevel],
        driver: LevelDriver,
        store: SweepStore,
        progress,
        slo: dict | None,
        stop_limits,
        summarize_fn: Callable,
        summary_fields: Callable[[], dict],
        on_level: Callable[[SweepLevel, LevelRun, dict, list], None] | None = None,
        stop_rule: Callable[[dict], dict | None] | None = None,
    ):
        self.opts = opts
        self.state = state
        self.sweep_levels = sweep_levels
        self._driver = driver
        self._store = store
        self._progress = progress
        self._slo = slo
        self._limits = stop_limits
        self._summarize = summarize_fn
        self._summary_fields = summary_fields
        self._on_level = on_level
        self._stop_rule = stop_rule
        self._level_offset: int | None = None  # where the level in progress starts in requests.jsonl
        self.extra: dict = {}  # summary keys an orchestration above the runner adds (find-max's max_load)

    # -- summary.json ----------------------------------------------------------------------
    def summary(self) -> dict:
        from kneecap.metrics.knee import find_knee
        from kneecap.results import build_summary

        kind = self.opts.kind
        complete = [lv for lv in self.state.levels if not lv.get("partial")]
        knee = find_knee(complete, kind) if complete else None
        fields = dict(self._summary_fields())
        summary_kind = fields.pop("kind")
        return build_summary(
            summary_kind,
            self.state.levels,
            knee,
            self.state.stopped,
            load=kind,
            status=self.state.status,
            skipped=self.state.skipped,
            preflight=self.state.preflight,
            server=self.state.server,
            connections=self.state.connections,
            slo=self._slo or None,
            **fields,
            **self.extra,
        )

    def save(self) -> dict:
        summary = self.summary()
        self._store.save(summary)
        return summary

    # -- the loop ---------------------------------------------------------------------------
    def run(self, done: frozenset[int] = frozenset()) -> dict:
        """Run every level not in `done` (levels a resumed run already has), in order; return the
        final summary (also written to disk)."""
        self.save()
        current = None
        try:
            for level in self.sweep_levels:
                if level.index in done:
                    continue
                current = level
                if self._skip_by_preflight(level):
                    continue
                stopped = self._after_level(self._run_level(level))
                self.save()
                if stopped:
                    break
            if self.state.stopped is None and any(s["index"] == len(self.sweep_levels) - 1 for s in self.state.skipped):
                self._stop_for_preflight()
            self.state.status = STATUS_STOPPED if self.state.stopped else STATUS_COMPLETE
        except KeyboardInterrupt:
            self._interrupted(current)
        except KneecapError:  # e.g. a client worker died: keep what was measured, resumable, then report
            self.state.status = STATUS_FAILED
            self._store.sync()
            self.save()
            raise
        return self.save()

    def run_one(self, level: SweepLevel) -> dict:
        """One level outside the fixed order (a search chooses it): run, summarised, kept, summary.json
        rewritten. Its records go to requests.jsonl like any level's."""
        summary = self._run_level(level)
        self.save()
        return summary

    def finish(self, status: str = STATUS_COMPLETE) -> dict:
        self.state.status = status
        return self.save()

    def _interrupted(self, level: SweepLevel | None) -> None:
        """Ctrl-C / SIGTERM: keep the records, summarise the cut level as partial (not complete)."""
        self._store.sync()
        cut = list(self._level_records(level)) if level is not None and self._level_offset is not None else []
        if cut:
            partial = self._summarize(cut, **{self.opts.kind: level.value}, duration_s=None, slo=self._slo or None)
            partial.update(level=level.index, partial=True, preflight=level.verdict)
            self.state.levels.append(partial)
        from kneecap.metrics.stop import INTERRUPTED, stop_record

        self.state.stopped = stop_record(
            level.value if level is not None else None,
            INTERRUPTED,
            "stopped by the user (Ctrl-C / SIGTERM); finished records are kept and --resume re-runs the cut level",
        )
        self.state.status = STATUS_INTERRUPTED

    def _skip_by_preflight(self, level: SweepLevel) -> bool:
        verdict = (level.verdict or {}).get("verdict")
        label = self.opts.level_label(level.value)
        if verdict == "tight":
            self._progress.note(
                f"warning: {label} is tight for the KV pool (only the steady state fits): "
                f"expect preemption when requests start together"
            )
        if verdict != "exceeds":
            return False
        if self.opts.force:
            self._progress.note(f"warning: {label} exceeds the KV pool; running it anyway (--force)")
            return False
        self._progress.note(
            f"skipping {label}: it exceeds the server's KV pool "
            f"({_count(level.verdict.get('peak_tokens'))} tokens needed > "
            f"{_count(self.state.preflight.get('kv_capacity_tokens'))}); "
            f"--force runs it anyway"
        )
        self.state.skipped.append({self.opts.kind: level.value, "index": level.index, "reason": "preflight_exceeds"})
        self.save()
        return True

    def _stop_for_preflight(self) -> None:
        """The sweep ran out of levels that fit: stopped at the first of the trailing skipped levels."""
        from kneecap.metrics.stop import PREFLIGHT_EXCEEDS, stop_record

        skipped = {s["index"] for s in self.state.skipped}
        first = len(self.sweep_levels)
        while first > 0 and (first - 1) in skipped:
            first -= 1
        value = self.sweep_levels[first].value
        self.state.stopped = stop_record(
            value,
            PREFLIGHT_EXCEEDS,
            f"{self.opts.level_label(value)} and above exceed the KV pool of "
            f"{_count((self.state.preflight or {}).get('kv_capacity_tokens'))} tokens; "
            "pass --force to run them",
        )

    def _run_level(self, level: SweepLevel) -> dict:
        """Run one level; its summary is kept in the state (records synced) and returned."""
        label = self.opts.level_label(level.value)
        self._level_offset = self._store.tell()

        def keep(record: RequestRecord) -> None:
            self._store.write(record)
            self._progress.on_record(record.ok)

        run = self._driver.run_level(level, keep)
        times = LevelTimes()
        records = times.tap(run.records if run.records is not None else self._level_records(level))
        if self._on_level is not None:
            records = list(records)  # on_level sees them too
        # warmup included: the summarizer excludes and counts them
        summary = self._summarize(records, **{self.opts.kind: level.value}, duration_s=None, slo=self._slo or None)
        summary["level"] = level.index
        summary["preflight"] = level.verdict
        summary["server_metrics"] = run.server_metrics
        # speculative decoding as the server (or the simulated engine) counted it over the level; None when off
        summary["spec"] = (run.server_metrics or {}).get("spec")
        summary["stability"] = judge(times, kind=self.opts.kind, value=level.value)
        if self._slo and isinstance(summary.get("slo"), dict):  # the verdict again, now that stability is known
            met, breaches = level_meets_slo(summary, self._slo)
            summary["slo"] = {"met": met, "breaches": breaches}
        summary.update(run.fields)
        if self._on_level is not None:
            self._on_level(level, run, summary, records)
        ok, failed = summary.get("completed", 0), summary.get("failed", 0)
        self._progress.end_level(
            f"{label}: {ok} ok, {failed} failed, {_fmt(summary.get('output_tok_s'))} output tok/s" + run.note
        )
        self.state.levels.append(summary)
        self._store.sync()
        return summary

    def _level_records(self, level: SweepLevel):
        return self._store.level_records(level.index, self._level_offset or 0)

    def _after_level(self, summary: dict) -> bool:
        """Server-dead check, the key refused, the declared stop rules, then the command's. True when the sweep must stop."""
        from kneecap.metrics.stop import AUTH_REFUSED, SERVER_DEAD, check_stop, stop_record

        gone = self._driver.server_gone(summary)
        if gone:
            summary["server_dead"] = True
            self.state.stopped = stop_record(summary[self.opts.kind], SERVER_DEAD, gone)
            return True
        refused = refused_key(summary)
        if refused:  # the key worked before the sweep began: every later request would be refused too
            self.state.stopped = stop_record(
                summary[self.opts.kind],
                AUTH_REFUSED,
                f"the server refused the API key ({refused}) during {self.opts.level_label(summary[self.opts.kind])}",
            )
            return True
        stopped = check_stop(self.state.levels, self._limits) or (self._stop_rule and self._stop_rule(summary))
        if stopped:
            self.state.stopped = stopped
            return True
        return False


def refused_key(summary: dict) -> str | None:
    """'HTTP 401 to 3 of 8 requests' when a level's requests were refused for the key, else None."""
    from kneecap.metrics.stop import AUTH_REFUSED_KINDS

    errors = summary.get("errors") or {}
    hits = {kind: errors[kind] for kind in AUTH_REFUSED_KINDS if errors.get(kind)}
    if not hits:  # a level cut during its warmup has no measured refusal: its cut says
        cut = summary.get("cut") or {}
        return cut.get("refused") if cut.get("reason") == "auth_refused" else None
    said = " and ".join(f"HTTP {kind[5:]}" for kind in hits)
    return f"{said} to {sum(hits.values())} of {summary.get('requests') or 0} requests"


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _fmt(value) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "—"
