"""The live HTTP client as a level driver for the one level runner (kneecap.sweep.runner): a level's
warmup, then its requests (or rounds of them for a --duration closed loop) over this process or
worker processes, the server's /metrics polled meanwhile, and the client's own lag merged.

Owns how bench sends a level; not the order of levels, stop rules or summary.json (the runner).
"""

from __future__ import annotations

import os
import time
from typing import Callable

from kneecap.sweep.level import LevelOutcome, LevelTask, run_task
from kneecap.sweep.options import KIND_CONCURRENCY, BenchOptions
from kneecap.sweep.workers import merge_outcomes
from kneecap.levels import SweepLevel, LevelRun, server_metrics
from kneecap.records import RequestRecord

# A level ends with the server probed again when at least this fraction of its requests failed
# at the connection level: the stop rule "server dead" needs a positive check, not a guess.
DEAD_PROBE_FAILED_FRACTION = 0.5


def mostly_connection_failures(summary: dict) -> bool:
    """Did this level fail in a way that suggests the server is gone (not just busy or erroring)?"""
    from kneecap.client import failures as f

    gone = {f.CONNECTION_REFUSED, f.CONNECTION_RESET, f.TIMEOUT_KIND, f.STALL, f.INCOMPLETE_STREAM, f.PROTOCOL_ERROR}
    requests = summary.get("requests") or 0
    if not requests:
        return True
    lost = sum(n for kind, n in (summary.get("errors") or {}).items() if kind in gone)
    return lost / requests >= DEAD_PROBE_FAILED_FRACTION


class HttpLevelDriver:
    """`run_share(task, on_record) -> [LevelOutcome]` runs one share of a level (in-process, over worker
    processes, or over Ray actors); `probe() -> bool` says whether the server still answers;
    `poll_metrics()` gives a context manager scraping server metrics during the level (its `result()`
    the level's server_metrics, its `samples()` the scrapes); `timeline_path` receives those scrapes.
    `specs_for(level, warmup, round_index)` gives a level's requests (default: the run's BenchWorkload; e.g. a
    load plan's class instead); `bursts` ({"on_s", "off_s"}) sends an open loop in on/off bursts."""

    def __init__(
        self,
        opts: BenchOptions,
        *,
        run_share: Callable,
        probe: Callable[[], bool],
        poll_metrics: Callable,
        epoch: float,
        progress,
        timeline_path=None,
        specs_for: Callable | None = None,
        bursts: dict | None = None,
        workload=None,
        reset: Callable | None = None,
    ):
        from kneecap.sweep.bench_workload import BenchWorkload, LevelWork

        self.opts = opts
        # what each level sends: the run's workload (kneecap.sweep.bench_workload), or the specs specs_for gives
        bench = workload if workload is not None else BenchWorkload(opts)
        self._work_for = (
            bench.level
            if specs_for is None
            else (
                lambda level, warmup, round_index=0: LevelWork(
                    specs=tuple(specs_for(level, warmup=warmup, round_index=round_index))
                )
            )
        )
        self._bursts = bursts or {}
        self._reset = reset  # reset() -> the endpoints that dropped the server's prefix cache (--reset-prefix-cache)
        self._run_share, self._probe, self._poll_metrics = run_share, probe, poll_metrics
        self._epoch, self._progress, self._timeline_path = epoch, progress, timeline_path

    def run_level(self, level: SweepLevel, keep: Callable[[RequestRecord], None]) -> LevelRun:
        opts = self.opts
        label = opts.level_label(level.value)
        base = dict(
            level=level.index,
            kind=opts.kind,
            value=level.value,
            epoch=self._epoch,
            burstiness=opts.burstiness,
            seed=opts.seed + level.index,
            **self._bursts,
        )
        reset = self._reset() if self._reset is not None else None  # before the warmup: the level starts cold
        refusal = RecordWatch(keep)  # the driver ends a share at its first refused key (kneecap.client.driver.AuthCut)
        keep = refusal.keep
        if level.num_warmup:
            self._progress.start_level(label, level.num_warmup, phase="warmup")
            warm_value = min(level.value, level.num_warmup) if opts.kind == KIND_CONCURRENCY else level.value
            warm = self._run_share(
                _task(self._work_for(level, warmup=True), warmup=True, **{**base, "value": warm_value}), keep
            )
            if refusal.kind is not None:  # nothing more is sent: the level's measured requests would be refused too
                client = merge_outcomes(warm, opts.workers)
                return LevelRun(
                    server_metrics=server_metrics("none"),
                    fields={"cut": refusal.cut("warmup"), "client": client, "suspect": client["suspect"]},
                )
        work = self._work_for(level, warmup=False)
        ramp = None
        if opts.ramp is not None:  # keep the ramp's records for its time slices
            from kneecap.workload.ramps import parse_ramp

            ramp, ramp_records, outer = parse_ramp(opts.ramp), [], keep

            def keep(record, _outer=outer):
                ramp_records.append(record)
                _outer(record)

        self._progress.start_level(label, None if opts.in_rounds else len(work.specs))
        started = time.monotonic()
        poller = self._poll_metrics()
        with poller:
            stable: dict = {}
            outcomes = (
                self._run_rounds(level, base, keep, started, stable, refusal)
                if opts.in_rounds
                else self._run_share(_task(work, duration_s=work.duration_s or opts.duration_s, **base), keep)
            )
        samples = getattr(poller, "samples", lambda: [])()
        self._append_timeline(level.index, samples)
        client = merge_outcomes(outcomes, opts.workers)
        fields = {"wall_s": time.monotonic() - started, "client": client, "suspect": client["suspect"]}
        if reset is not None:
            fields["prefix_cache_reset"] = reset  # the endpoints that accepted ([]: the server has none)
        if refusal.kind is not None:
            fields["cut"] = refusal.cut("measured")
        if stable:
            fields["stable_p99"] = stable
        if ramp is not None:  # slices from the level's clock start (the first request goes at its start)
            from kneecap.workload.slices import ramp_slices

            starts = [o.client["started_at"] for o in outcomes if o.client.get("started_at") is not None]
            fields["slices"] = ramp_slices(ramp_records, ramp, dimension=opts.kind, t0=min(starts) if starts else None)
        sm = scraped_server_metrics(poller.result(), samples, cached_fraction=refusal.cached_fraction())
        return LevelRun(
            server_metrics=sm,
            fields=fields,
            note=(
                f" (client suspect: its own lag may have set these numbers; {_suspect_hint(opts.workers)})"
                if client["suspect"]
                else ""
            ),
        )

    def server_gone(self, summary: dict) -> str | None:
        dropped = summary.get("failed_on_reused_connection", 0)
        label = self.opts.level_label(summary[self.opts.kind])
        if summary.get("failed") and mostly_connection_failures(summary) and not self._probe():
            return f"the server at {self.opts.base_url_clean} stopped answering during {label}"
        if dropped:
            self._progress.note(
                f"warning: {label}: {dropped} request(s) failed on a reused connection the server had "
                "closed (llama.cpp closes its connection after each streamed response); "
                "--no-keepalive opens a new connection per request"
            )
        return None

    def _append_timeline(self, level: int, samples: list[dict]) -> None:
        """The server's gauges over the level, for the report's occupancy-over-time plot:
        DIR/server_metrics.jsonl, one row per scrape, t in seconds since the run's epoch."""
        if not samples or self._timeline_path is None:
            return
        import orjson

        rows = b"".join(
            orjson.dumps(
                {
                    "level": level,
                    "t": s["at_s"] - self._epoch,
                    **{k: s[k] for k in ("kv_usage", "running", "waiting", "preemptions_total")},
                }
            )
            + b"\n"
            for s in samples
        )
        with open(self._timeline_path, "ab") as fh:
            fh.write(rows)

    def _run_rounds(
        self, level: SweepLevel, base: dict, keep, started: float, stable: dict, refusal: "RecordWatch"
    ) -> list[LevelOutcome]:
        """Closed loop for --duration: rounds of level.num_requests until the duration is over, or (--until-stable)
        until the p99 of TTFT and ITL settled (kneecap.workload.slices.p99_stable, checked after each round;
        `stable` receives the last verdict), or until a round was cut by a refused key (`refusal`)."""
        outcomes: list[LevelOutcome] = []
        round_index = 0
        tol = self.opts.until_stable
        if tol is not None:
            from kneecap.metrics.stability import STABLE, level_stability
            from kneecap.workload.slices import p99_stable

            level_records, outer = [], keep

            def keep(record, _outer=outer):
                level_records.append(record)
                _outer(record)

        while True:
            if tol is not None and round_index:
                now_s = time.perf_counter() - self._epoch
                verdict = p99_stable(level_records, self.opts.stable_window_s, rel_tol=tol, now_s=now_s)
                # and the level's steady-state verdict so far (kneecap.metrics.stability: every level's rule)
                steady = level_stability(level_records, kind="concurrency", value=level.value, now_s=now_s)
                ok = verdict.stable and steady["verdict"] == STABLE
                stable.update(
                    stable=ok,
                    why=verdict.why if ok or not verdict.stable else f"p99s settled, but {steady['rule']}",
                    rel_tol=tol,
                    window_s=self.opts.stable_window_s,
                    ttft_p99_ms=list(verdict.ttft_p99_ms),
                    itl_p99_ms=list(verdict.itl_p99_ms),
                    steady_state=steady["verdict"],
                )
                if ok:
                    break
            remaining_s = self.opts.duration_s - (time.monotonic() - started)
            if remaining_s <= 0:
                break
            specs = self._work_for(level, warmup=False, round_index=round_index).specs
            round_outcomes = self._run_share(LevelTask(specs=specs, duration_s=remaining_s, **base), keep)
            outcomes.extend(round_outcomes)
            if refusal.kind is not None or sum(o.num_records for o in round_outcomes) < len(specs):
                break  # the driver stopped sending because the duration was over
            round_index += 1
        return outcomes


class RecordWatch:
    """Passes a level's records on to `keep` and notes, as they pass, the first the server refused for
    the API key (HTTP 401/403), with which the driver cut the level (`cut(phase)` says so for the level's
    summary), and the measured requests' prompt tokens and the cached tokens their usage reported
    (usage.prompt_tokens_details.cached_tokens: `cached_fraction()`)."""

    def __init__(self, keep: Callable[[RequestRecord], None]):
        from kneecap.client.failures import AUTH_REFUSED_KINDS

        self._outer = keep
        self._kinds = AUTH_REFUSED_KINDS
        self.kind: str | None = None
        self.prompt_tokens = 0  # of measured records whose usage said both counts
        self.cached_tokens = 0

    def keep(self, record: RequestRecord) -> None:
        if self.kind is None and record.error_kind in self._kinds:
            self.kind = record.error_kind
        cached = record.extra.get("cached_tokens")
        if cached is not None and record.prompt_tokens and not record.warmup:
            self.prompt_tokens += record.prompt_tokens
            self.cached_tokens += cached
        self._outer(record)

    def cached_fraction(self) -> float | None:
        """Share of the measured requests' prompt tokens the server's usage said it had cached, None when
        no response said (a server that does not report cached_tokens)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def cut(self, phase: str) -> dict:
        status = self.kind[5:]
        return {
            "reason": "auth_refused",
            "phase": phase,
            "error_kind": self.kind,
            "refused": f"HTTP {status} during the {phase}",
            "detail": f"the server refused the API key (HTTP {status}): the level ended at that first refusal; "
            "nothing was sent after it and the requests in flight were cancelled (recorded as "
            "cancelled); the records that finished are kept",
        }


def _task(work, **fields) -> LevelTask:
    """A LevelTask sending one LevelWork (its requests, and their times, streams or conversations)."""
    return LevelTask(
        specs=work.specs,
        offsets=work.offsets,
        users=work.users,
        conversations=work.conversations,
        think_time_s=work.think_time_s,
        **fields,
    )


def scraped_server_metrics(scraped: dict | None, samples: list[dict], *, cached_fraction: float | None = None) -> dict:
    """A level's /metrics scrapes in the one server_metrics shape (source "none" when nothing was scraped).
    kv_usage_mean is the mean over the scrapes (about one a second), not a time integral.

    prefix_cache_hit_rate: from the server's prefix-cache counters when its /metrics has them (vLLM, SGLang,
    kneecap serve); else `cached_fraction`, the level's cached tokens over its prompt tokens as the responses'
    usage reported them (llama.cpp: no prefix counters, but usage.prompt_tokens_details.cached_tokens).
    prefix_cache_hit_rate_source says which ("prometheus" | "usage"); with nothing scraped and the rate from
    usage, the level's source is "usage"."""
    if not scraped:
        if cached_fraction is None:
            return server_metrics("none")
        return server_metrics("usage", prefix_cache_hit_rate=cached_fraction, prefix_cache_hit_rate_source="usage")
    usage = [s["kv_usage"] for s in samples if s.get("kv_usage") is not None]
    detail = {k: v for k, v in scraped.items() if k not in ("preemptions_delta",)}
    rate, rate_source = scraped.get("prefix_cache_hit_rate"), "prometheus"
    if rate is None and cached_fraction is not None:
        rate, rate_source = cached_fraction, "usage"
    return server_metrics(
        "prometheus",
        **{
            **detail,
            "preemptions": scraped.get("preemptions_delta"),
            "kv_usage_mean": sum(usage) / len(usage) if usage else None,
            "prefix_cache_hit_rate": rate,
            "prefix_cache_hit_rate_source": rate_source if rate is not None else None,
        },
    )


def _suspect_hint(workers: int) -> str:
    if workers < (os.cpu_count() or 1):
        return f"try --workers {workers + 1}"
    return "every core already drives load: run the client on a machine (or cores) apart from the server"


def in_process_runner(setup) -> Callable:
    """run_share for --workers 1: the driver on this process's own event loop."""

    def run_share(task: LevelTask, on_record) -> list[LevelOutcome]:
        return [run_task(setup, task, on_record)]

    return run_share
