"""The level runner's two hooks for a command above it: per-level fields (on_level) and its own stop rule
(stop_rule), consulted after the runner's checks. A fake driver, the real summarizer, no server."""

from __future__ import annotations

from kneecap.levels import LevelRun, SweepLevel, server_metrics
from kneecap.metrics.stop import StopLimits
from kneecap.metrics.summarize import summarize_level
from kneecap.records import OK, RequestRecord
from kneecap.sim.level_driver import SimulateOptions
from kneecap.sweep.store import MemoryStore
from kneecap.sweep.progress import SilentProgress
from kneecap.sweep.runner import STATUS_STOPPED, Sweep, SweepState

OPTS = SimulateOptions(kind="concurrency", levels=(1, 2, 4, 8))


class Driver:
    """Level i: four requests whose TTFT is (i + 1) x 10 ms; `gone` says the server left after that level."""

    def __init__(self, gone_after: int | None = None):
        self.ran: list[int] = []
        self.gone_after = gone_after

    def run_level(self, level: SweepLevel, keep) -> LevelRun:
        self.ran.append(level.index)
        ttft = (level.index + 1) * 0.01
        records = [
            RequestRecord(
                request_id=f"{level.index}-{k}",
                level=level.index,
                concurrency=int(level.value),
                sent_at=0.0,
                first_token_at=ttft,
                first_answer_at=ttft,
                end_at=ttft + 0.01,
                chunk_times=[ttft, ttft + 0.01],
                chunk_tokens=[1, 1],
                prompt_tokens=8,
                output_tokens=2,
                status=OK,
            )
            for k in range(4)
        ]
        for record in records:
            keep(record)
        return LevelRun(server_metrics=server_metrics("none"), records=records, trace=[{"step": level.index}])

    def server_gone(self, summary: dict) -> str | None:
        return "gone" if summary["level"] == self.gone_after else None


class SavingStore(MemoryStore):
    """Keeps every summary saved, not only the last."""

    def __init__(self, saved: list):
        super().__init__()
        self.saved = saved

    def save(self, summary: dict) -> None:
        super().save(summary)
        self.saved.append(summary)


def sweep(driver, *, on_level=None, stop_rule=None, saved=None):
    written = MemoryStore() if saved is None else SavingStore(saved)
    levels = [
        SweepLevel(index=i, value=v, num_requests=4, num_warmup=0, first_index=0) for i, v in enumerate(OPTS.levels)
    ]
    return Sweep(
        OPTS,
        state=SweepState(),
        sweep_levels=levels,
        driver=driver,
        store=written,
        progress=SilentProgress(),
        slo=None,
        stop_limits=StopLimits(),
        summarize_fn=summarize_level,
        summary_fields=lambda: {"kind": "simulate", "model_executed": False, "benchmark_executed": False},
        on_level=on_level,
        stop_rule=stop_rule,
    )


def ttft_rule(limit_ms: float):
    def rule(summary: dict) -> dict | None:
        p99 = summary["ttft_ms"]["p99"]
        return (
            {"at": summary["concurrency"], "reason": "slo_breach", "detail": f"ttft p99 {p99:.0f} ms"}
            if p99 > limit_ms
            else None
        )

    return rule


def test_the_stop_rule_stops_the_sweep_after_the_level_that_meets_it():
    driver, saved = Driver(), []
    summary = sweep(driver, stop_rule=ttft_rule(25), saved=saved).run()
    assert driver.ran == [0, 1, 2]  # TTFT 10, 20, 30 ms: the third level meets the rule, the fourth never runs
    assert summary["status"] == STATUS_STOPPED
    assert summary["stopped"] == {"at": 4, "reason": "slo_breach", "detail": "ttft p99 30 ms"}
    assert [s["stopped"] for s in saved][-1] == summary["stopped"]  # persisted with the stop


def test_the_runners_own_checks_come_before_the_stop_rule():
    consulted = []

    def rule(summary):
        consulted.append(summary["level"])
        return None

    summary = sweep(Driver(gone_after=1), stop_rule=rule).run()
    assert consulted == [0]  # after level 1 the server was gone: the runner stopped, the rule was not asked
    assert summary["stopped"]["reason"] == "server_dead"


def test_on_level_adds_fields_and_sees_the_run_and_the_records_before_the_stop_checks():
    seen = []

    def on_level(level, run, summary, records):
        seen.append((level.index, run.trace, len(records)))
        summary["ttft_budget_met"] = summary["ttft_ms"]["p99"] <= 25

    stop = lambda summary: (
        {"at": summary["concurrency"], "reason": "slo_breach", "detail": "budget"}
        if not summary["ttft_budget_met"]
        else None
    )
    summary = sweep(Driver(), on_level=on_level, stop_rule=stop).run()
    assert seen == [(0, [{"step": 0}], 4), (1, [{"step": 1}], 4), (2, [{"step": 2}], 4)]
    assert [lv["ttft_budget_met"] for lv in summary["levels"]] == [True, True, False]


def test_levels_already_done_are_not_run_again():
    driver = Driver()
    sweep(driver, stop_rule=ttft_rule(1000)).run(done=frozenset({0, 1}))
    assert driver.ran == [2, 3]
