"""The bench level loop: preflight, warmup, run, poll server metrics, summarize, knee, stop, persist.

Owns the order of things and what goes into summary.json; the driver (kneecap.client), the
statistics (kneecap.metrics), the preflight arithmetic (kneecap.plan.preflight) and the
results folder I/O (kneecap.results) are called, not re-implemented. Records reach
requests.jsonl as they finish; summary.json is rewritten after every level, so a killed run
keeps every level it finished and `--resume` continues from the first one it did not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from kneecap.bench.level import LevelOutcome, LevelTask, run_task
from kneecap.bench.options import KIND_CONCURRENCY, BenchOptions
from kneecap.errors import KneecapError
from kneecap.records import RequestRecord

SUMMARY_KIND = "bench"
STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_STOPPED = "stopped"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"  # the client itself failed (one-line error on stderr); --resume continues

# A level ends with the server probed again when at least this fraction of its requests failed
# at the connection level: the stop rule "server dead" needs a positive check, not a guess.
DEAD_PROBE_FAILED_FRACTION = 0.5


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


@dataclass(frozen=True)
class LevelPlan:
    """One level of the sweep, before it runs."""

    index: int
    value: float
    num_requests: int
    num_warmup: int
    first_index: int  # RequestSpec.index of its first request (unique over the sweep)
    verdict: dict | None = None  # the preflight row for this level, if one was computed


# Request indices (which seed each random prompt, so they must never repeat in a sweep): level i
# uses [i x LEVEL_INDEX_STRIDE, (i + 1) x LEVEL_INDEX_STRIDE), warmup first, then round after round.
LEVEL_INDEX_STRIDE = 10**9


def plan_levels(opts: BenchOptions, verdicts: dict | None = None) -> list[LevelPlan]:
    """Every level in the order given, with request budgets and sweep-unique request indices."""
    return [LevelPlan(index=i, value=value, num_requests=opts.requests_for(value), num_warmup=opts.warmup,
                      first_index=i * LEVEL_INDEX_STRIDE, verdict=(verdicts or {}).get(value))
            for i, value in enumerate(opts.levels)]


def level_specs(opts: BenchOptions, plan: LevelPlan, *, warmup: bool, round_index: int = 0):
    """The requests of one level's warmup or of one of its rounds, drawn from the shared Workload code."""
    from kneecap.workload import LengthDist, RequestClass, Workload, make_requests

    isl = opts.isl if opts.isl is not None else 1
    cls = RequestClass(name="default", input=LengthDist.fixed(isl), output=LengthDist.fixed(opts.osl),
                       shared_prefix_tokens=opts.shared_prefix_tokens, num_prefix_groups=opts.num_prefix_groups)
    if warmup:
        n, start, prefix = plan.num_warmup, plan.first_index, f"L{plan.index}w"
    else:
        n = plan.num_requests
        start = plan.first_index + plan.num_warmup + round_index * plan.num_requests
        prefix = f"L{plan.index}r" if round_index == 0 else f"L{plan.index}r{round_index}-"
    return tuple(make_requests(Workload(classes=(cls,)), n, seed=opts.seed, start_index=start, id_prefix=prefix))


def mostly_connection_failures(summary: dict) -> bool:
    """Did this level fail in a way that suggests the server is gone (not just busy or erroring)?"""
    from kneecap.client import driver

    gone = {driver.CONNECTION_REFUSED, driver.CONNECTION_RESET, driver.TIMEOUT_KIND, driver.STALL,
            driver.INCOMPLETE_STREAM, driver.PROTOCOL_ERROR}
    requests = summary.get("requests") or 0
    if not requests:
        return True
    lost = sum(n for kind, n in (summary.get("errors") or {}).items() if kind in gone)
    return lost / requests >= DEAD_PROBE_FAILED_FRACTION


class Sweep:
    """Runs the levels of one bench sweep (fresh or resumed) and keeps summary.json current.

    `run_share(task, on_record) -> [LevelOutcome]` runs one level (in-process or over workers);
    `probe() -> bool` says whether the server still answers; `poll_metrics()` gives a context
    manager scraping server metrics during the level (its `result()` a dict or None);
    `persist(summary)` writes summary.json.
    """

    def __init__(self, opts: BenchOptions, *, state: SweepState, plans: list[LevelPlan], epoch: float,
                 run_share: Callable, write_record: Callable[[RequestRecord], None], persist: Callable[[dict], None],
                 probe: Callable[[], bool], poll_metrics: Callable, progress, slo: dict | None,
                 stop_limits, knee_fn: Callable, check_stop_fn: Callable, summarize_fn: Callable, sync: Callable[[], None],
                 records_file):
        self.opts = opts
        self.state = state
        self.plans = plans
        self.epoch = epoch
        self._run_share = run_share
        self._write_record = write_record
        self._persist = persist
        self._probe = probe
        self._poll_metrics = poll_metrics
        self._progress = progress
        self._slo = slo
        self._limits = stop_limits
        self._find_knee = knee_fn
        self._check_stop = check_stop_fn
        self._summarize = summarize_fn
        self._sync = sync
        self._records_file = records_file  # kneecap.bench.resume.RecordsFile: reads a level's records back
        self._level_offset: int | None = None  # where the level in progress starts in requests.jsonl

    # -- summary.json ----------------------------------------------------------------------
    def summary(self) -> dict:
        from kneecap.results import build_summary

        kind = self.opts.kind
        complete = [lv for lv in self.state.levels if not lv.get("partial")]
        knee = self._find_knee(complete, kind) if complete else None
        return build_summary(
            SUMMARY_KIND, self.state.levels, knee, self.state.stopped,
            model_executed=True, benchmark_executed=True,
            load=kind, status=self.state.status, skipped=self.state.skipped, preflight=self.state.preflight,
            server=self.state.server, connections=self.state.connections, slo=self._slo or None,
            workers=self.opts.workers,
        )

    def save(self) -> dict:
        summary = self.summary()
        self._persist(summary)
        return summary

    # -- the loop ---------------------------------------------------------------------------
    def run(self, done: frozenset[int] = frozenset()) -> dict:
        """Run every level not in `done` (levels a resumed run already has), in order; return the
        final summary (also written to disk)."""
        self.save()
        current = None
        try:
            for plan in self.plans:
                if plan.index in done:
                    continue
                current = plan
                if self._skip_by_preflight(plan):
                    continue
                summary = self._run_level(plan)
                self.state.levels.append(summary)
                self._sync()
                stopped = self._after_level(summary)
                self.save()
                if stopped:
                    break
            if self.state.stopped is None and any(s["index"] == len(self.plans) - 1 for s in self.state.skipped):
                self._stop_for_preflight()
            self.state.status = STATUS_STOPPED if self.state.stopped else STATUS_COMPLETE
        except KeyboardInterrupt:
            self._interrupted(current)
        except KneecapError:  # e.g. a client worker died: keep what was measured, resumable, then report
            self.state.status = STATUS_FAILED
            self._sync()
            self.save()
            raise
        return self.save()

    def _interrupted(self, plan: LevelPlan | None) -> None:
        """Ctrl-C / SIGTERM: keep the records, summarise the cut level as partial (not complete)."""
        self._sync()
        cut = list(self._level_records(plan)) if plan is not None and self._level_offset is not None else []
        if cut:
            partial = self._summarize(cut, **{self.opts.kind: plan.value}, duration_s=None, slo=self._slo or None)
            partial.update(level=plan.index, partial=True, preflight=plan.verdict)
            self.state.levels.append(partial)
        from kneecap.metrics.stop import INTERRUPTED, stop_record

        self.state.stopped = stop_record(plan.value if plan is not None else None, INTERRUPTED,
                                         "stopped by the user (Ctrl-C / SIGTERM); finished records are kept "
                                         "and --resume re-runs the cut level")
        self.state.status = STATUS_INTERRUPTED

    def _skip_by_preflight(self, plan: LevelPlan) -> bool:
        verdict = (plan.verdict or {}).get("verdict")
        label = self.opts.level_label(plan.value)
        if verdict == "tight":
            self._progress.note(f"warning: {label} is tight for the KV pool (only the steady state fits): "
                                f"expect preemption when requests start together")
        if verdict != "exceeds":
            return False
        if self.opts.force:
            self._progress.note(f"warning: {label} exceeds the KV pool; running it anyway (--force)")
            return False
        self._progress.note(f"skipping {label}: it exceeds the server's KV pool "
                            f"({plan.verdict.get('peak_tokens')} tokens needed > {self.state.preflight.get('kv_capacity_tokens')}); "
                            f"--force runs it anyway")
        self.state.skipped.append({self.opts.kind: plan.value, "index": plan.index, "reason": "preflight_exceeds"})
        self.save()
        return True

    def _stop_for_preflight(self) -> None:
        """The sweep ran out of levels that fit: stopped at the first of the trailing skipped levels."""
        from kneecap.metrics.stop import PREFLIGHT_EXCEEDS, stop_record

        skipped = {s["index"] for s in self.state.skipped}
        first = len(self.plans)
        while first > 0 and (first - 1) in skipped:
            first -= 1
        value = self.plans[first].value
        self.state.stopped = stop_record(value, PREFLIGHT_EXCEEDS,
                                         f"{self.opts.level_label(value)} and above exceed the KV pool of "
                                         f"{(self.state.preflight or {}).get('kv_capacity_tokens')} tokens; pass --force to run them")

    def _run_level(self, plan: LevelPlan) -> dict:
        opts = self.opts
        label = opts.level_label(plan.value)
        self._level_offset = self._records_file.tell()

        def keep(record: RequestRecord) -> None:
            self._write_record(record)
            self._progress.on_record(record.ok)

        base = dict(level=plan.index, kind=opts.kind, value=plan.value, epoch=self.epoch,
                    burstiness=opts.burstiness, seed=opts.seed + plan.index)
        if plan.num_warmup:
            self._progress.start_level(label, plan.num_warmup, phase="warmup")
            warm_value = min(plan.value, plan.num_warmup) if opts.kind == KIND_CONCURRENCY else plan.value
            self._run_share(LevelTask(specs=level_specs(opts, plan, warmup=True), warmup=True,
                                      **{**base, "value": warm_value}), keep)
        self._progress.start_level(label, None if opts.in_rounds else plan.num_requests)
        started = time.monotonic()
        poller = self._poll_metrics()
        with poller:
            outcomes = self._run_rounds(plan, base, keep, started) if opts.in_rounds else self._run_share(
                LevelTask(specs=level_specs(opts, plan, warmup=False), duration_s=opts.duration_s, **base), keep)
        server_metrics = poller.result()
        self._append_timeline(plan.index, getattr(poller, "samples", lambda: [])())
        wall_s = time.monotonic() - started
        # from the records read back (warmup included: summarize_level excludes and counts them)
        summary = self._summarize(self._level_records(plan), **{opts.kind: plan.value}, duration_s=None,
                                  slo=self._slo or None)
        summary["level"] = plan.index
        summary["wall_s"] = wall_s
        summary["preflight"] = plan.verdict
        summary["server_metrics"] = server_metrics
        summary["client"] = _merge_outcomes(outcomes, self.opts.workers)
        summary["suspect"] = summary["client"]["suspect"]
        ok, failed = summary.get("completed", 0), summary.get("failed", 0)
        dropped = summary.get("failed_on_reused_connection", 0)
        if dropped:
            self._progress.note(f"warning: {label}: {dropped} request(s) failed on a reused connection the server had "
                                "closed (llama.cpp closes its connection after each streamed response); "
                                "--no-keepalive opens a new connection per request")
        self._progress.end_level(f"{label}: {ok} ok, {failed} failed, "
                                 f"{_fmt(summary.get('output_tok_s'))} output tok/s"
                                 + (f" (client suspect: its own lag may have set these numbers; {_suspect_hint(opts.workers)})"
                                    if summary["suspect"] else ""))
        return summary

    def _append_timeline(self, level: int, samples: list[dict]) -> None:
        """The server's gauges over the level, for the report's occupancy-over-time plot:
        DIR/server_metrics.jsonl, one row per scrape, t in seconds since the run's epoch."""
        if not samples:
            return
        import orjson

        path = self._records_file.path.parent / "server_metrics.jsonl"
        rows = b"".join(orjson.dumps({"level": level, "t": s["at_s"] - self.epoch,
                                      **{k: s[k] for k in ("kv_usage", "running", "waiting", "preemptions_total")}}) + b"\n"
                        for s in samples)
        with open(path, "ab") as fh:
            fh.write(rows)

    def _level_records(self, plan: LevelPlan):
        return self._records_file.level_records(plan.index, self._level_offset or 0)

    def _run_rounds(self, plan: LevelPlan, base: dict, keep, started: float) -> list[LevelOutcome]:
        """Closed loop for --duration: rounds of plan.num_requests until the duration is over."""
        outcomes: list[LevelOutcome] = []
        round_index = 0
        while True:
            remaining_s = self.opts.duration_s - (time.monotonic() - started)
            if remaining_s <= 0:
                break
            specs = level_specs(self.opts, plan, warmup=False, round_index=round_index)
            round_outcomes = self._run_share(LevelTask(specs=specs, duration_s=remaining_s, **base), keep)
            outcomes.extend(round_outcomes)
            if sum(o.num_records for o in round_outcomes) < len(specs):
                break  # the driver stopped sending because the duration was over
            round_index += 1
        return outcomes

    def _after_level(self, summary: dict) -> bool:
        """Server-dead check, then the declared stop rules. True when the sweep must stop."""
        from kneecap.metrics.stop import SERVER_DEAD, stop_record

        if summary.get("failed") and mostly_connection_failures(summary) and not self._probe():
            summary["server_dead"] = True
            self.state.stopped = stop_record(summary[self.opts.kind], SERVER_DEAD,
                                             f"the server at {self.opts.base_url_clean} stopped answering during "
                                             f"{self.opts.level_label(summary[self.opts.kind])}")
            return True
        stopped = self._check_stop(self.state.levels, self._limits)
        if stopped:
            self.state.stopped = stopped
            return True
        return False


def _merge_outcomes(outcomes: list[LevelOutcome], workers: int) -> dict:
    from kneecap.bench.workers import merge_outcomes

    return merge_outcomes(outcomes, workers)


def _suspect_hint(workers: int) -> str:
    import os

    if workers < (os.cpu_count() or 1):
        return f"try --workers {workers + 1}"
    return "every core already drives load: run the client on a machine (or cores) apart from the server"


def _fmt(value) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "—"


def in_process_runner(setup) -> Callable:
    """run_share for --workers 1: the driver on this process's own event loop."""

    def run_share(task: LevelTask, on_record) -> list[LevelOutcome]:
        return [run_task(setup, task, on_record)]

    return run_share
