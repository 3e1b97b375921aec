"""The level loop on its own: a fake driver that emits records, the real metrics, no server."""

from __future__ import annotations

from kneecap.sweep.level import LevelOutcome
from kneecap.sweep.store import MemoryStore
from kneecap.sweep.options import BenchOptions
from kneecap.sweep.progress import SilentProgress
from kneecap.sweep.http_levels import HttpLevelDriver
from kneecap.levels import sweep_levels
from kneecap.sweep.runner import Sweep, SweepState
from kneecap.metrics.stop import StopLimits
from kneecap.metrics.summarize import summarize_level
from kneecap.records import ERROR, OK, RequestRecord


class NoMetrics:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def result(self):
        return None


class FakeDriver:
    """Every request takes 100 ms, 10 ms TTFT, one token per 10 ms; `fail_levels` answer HTTP 500."""

    def __init__(self, fail_levels=()):
        self.fail_levels = set(fail_levels)
        self.tasks = []

    def __call__(self, task, on_record):
        self.tasks.append(task)
        t = 0.0
        for spec in task.specs:
            if task.level in self.fail_levels:
                rec = RequestRecord(
                    request_id=spec.request_id,
                    level=task.level,
                    concurrency=int(task.value),
                    warmup=task.warmup,
                    sent_at=t,
                    end_at=t + 0.01,
                    status=ERROR,
                    error_kind="http_500",
                )
            else:
                chunks = [t + 0.01 + 0.01 * k for k in range(spec.output_tokens)]
                rec = RequestRecord(
                    request_id=spec.request_id,
                    level=task.level,
                    concurrency=int(task.value),
                    warmup=task.warmup,
                    sent_at=t,
                    first_token_at=chunks[0],
                    first_answer_at=chunks[0],
                    end_at=chunks[-1],
                    chunk_times=chunks,
                    chunk_tokens=[1] * len(chunks),
                    prompt_tokens=spec.input_tokens,
                    output_tokens=spec.output_tokens,
                    status=OK,
                )
            on_record(rec)
            t += 0.1 / max(1, task.value)
        return [LevelOutcome(num_records=len(task.specs), suspect=False, client={"cpu_fraction": 0.1})]


def make_sweep(opts, driver, written, verdicts=None, alive=True):
    http = HttpLevelDriver(
        opts, run_share=driver, probe=lambda: alive, poll_metrics=NoMetrics, epoch=0.0, progress=SilentProgress()
    )
    return Sweep(
        opts,
        state=SweepState(),
        sweep_levels=sweep_levels(opts, verdicts),
        driver=http,
        store=written,
        progress=SilentProgress(),
        slo=None,
        stop_limits=StopLimits(),
        summarize_fn=summarize_level,
        summary_fields=lambda: {"kind": "bench", "model_executed": True, "benchmark_executed": True},
    )


OPTS = dict(base_url="http://127.0.0.1:1", isl=8, osl=4, requests=5)


def test_every_level_runs_in_order_with_warmup_first():
    driver, written = FakeDriver(), MemoryStore()
    summary = make_sweep(BenchOptions(**OPTS, concurrency=(1, 2, 4), warmup=2), driver, written).run()
    assert [(t.level, t.warmup) for t in driver.tasks] == [
        (0, True),
        (0, False),
        (1, True),
        (1, False),
        (2, True),
        (2, False),
    ]
    assert [lv["level"] for lv in summary["levels"]] == [0, 1, 2]
    assert all(lv["requests"] == 5 and lv["warmup_excluded"] == 2 for lv in summary["levels"])
    assert len(written.records) == 3 * 7 and summary["status"] == "complete"


def test_resume_skips_done_levels_even_after_a_preflight_gap():
    # level 1 exceeds the pool (skipped), levels 0 and 2 were done before the kill: only level 3 may run
    opts = BenchOptions(**OPTS, concurrency=(1, 8, 2, 3))
    verdicts = {8: {"verdict": "exceeds", "peak_tokens": 999}}
    driver, written = FakeDriver(), MemoryStore()
    sweep = make_sweep(opts, driver, written, verdicts)
    sweep.state.preflight = {"kv_capacity_tokens": 100}
    summary = sweep.run(frozenset({0, 2}))
    assert [t.level for t in driver.tasks] == [3]
    assert [s["index"] for s in summary["skipped"]] == [1]
    assert summary["stopped"] is None


def test_error_rate_stops_after_the_failing_level():
    driver, written = FakeDriver(fail_levels={1}), MemoryStore()
    summary = make_sweep(BenchOptions(**OPTS, concurrency=(1, 2, 4)), driver, written).run()
    assert [lv["level"] for lv in summary["levels"]] == [0, 1]
    assert summary["stopped"]["reason"] == "error_rate" and summary["status"] == "stopped"


def test_connection_failures_and_a_dead_probe_mean_server_dead():
    class Refused(FakeDriver):
        def __call__(self, task, on_record):
            for spec in task.specs:
                on_record(
                    RequestRecord(
                        request_id=spec.request_id,
                        level=task.level,
                        concurrency=int(task.value),
                        sent_at=0.0,
                        end_at=0.001,
                        status=ERROR,
                        error_kind="connection_refused",
                    )
                )
            return [LevelOutcome()]

    summary = make_sweep(BenchOptions(**OPTS, concurrency=(1, 2)), Refused(), MemoryStore(), alive=False).run()
    assert summary["stopped"]["reason"] == "server_dead" and summary["levels"][0]["server_dead"] is True


def test_interrupt_keeps_a_partial_level():
    class CutAfterTwo(FakeDriver):
        def __call__(self, task, on_record):
            if task.level == 1:
                for spec in task.specs[:2]:
                    on_record(
                        RequestRecord(
                            request_id=spec.request_id,
                            level=1,
                            concurrency=2,
                            sent_at=0.0,
                            first_token_at=0.01,
                            end_at=0.05,
                            chunk_times=[0.01, 0.05],
                            chunk_tokens=[1, 1],
                            output_tokens=2,
                            status=OK,
                        )
                    )
                raise KeyboardInterrupt
            return super().__call__(task, on_record)

    written = MemoryStore()
    summary = make_sweep(BenchOptions(**OPTS, concurrency=(1, 2, 4)), CutAfterTwo(), written).run()
    assert summary["status"] == "interrupted" and summary["stopped"]["reason"] == "interrupted"
    assert [(lv["level"], lv.get("partial", False)) for lv in summary["levels"]] == [(0, False), (1, True)]
    assert summary["levels"][1]["completed"] == 2
    assert len(written.records) == 5 + 2


def test_a_client_failure_is_saved_as_failed_and_raised():
    import pytest

    from kneecap.errors import KneecapError

    class WorkerDies(FakeDriver):
        def __call__(self, task, on_record):
            if task.level == 1:
                raise KneecapError("client worker 0 exited", "check memory")
            return super().__call__(task, on_record)

    store = MemoryStore()
    opts = BenchOptions(**OPTS, concurrency=(1, 2))
    sweep = make_sweep(opts, WorkerDies(), store)
    with pytest.raises(KneecapError):
        sweep.run()
    saved = [store.summary]
    assert saved[-1]["status"] == "failed" and [lv["level"] for lv in saved[-1]["levels"]] == [0]


def test_preflight_skip_note_writes_token_counts_with_separators():
    class Notes(SilentProgress):
        def __init__(self):
            self.lines = []

        def note(self, line):
            self.lines.append(line)

    opts = BenchOptions(**OPTS, concurrency=(1, 2048))
    verdicts = {2048: {"verdict": "exceeds", "peak_tokens": 4_096_000}}
    notes, written = Notes(), MemoryStore()
    http = HttpLevelDriver(
        opts, run_share=FakeDriver(), probe=lambda: True, poll_metrics=NoMetrics, epoch=0.0, progress=notes
    )
    sweep = Sweep(
        opts,
        state=SweepState(preflight={"kv_capacity_tokens": 2_076_672}),
        sweep_levels=sweep_levels(opts, verdicts),
        driver=http,
        store=written,
        progress=notes,
        slo=None,
        stop_limits=StopLimits(),
        summarize_fn=summarize_level,
        summary_fields=lambda: {"kind": "bench", "model_executed": True, "benchmark_executed": True},
    )
    summary = sweep.run()
    assert any("4,096,000 tokens needed > 2,076,672" in line for line in notes.lines), notes.lines
    assert summary["stopped"]["reason"] == "preflight_exceeds" and "2,076,672 tokens" in summary["stopped"]["detail"]
