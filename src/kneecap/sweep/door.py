"""The one door into a sweep: `run_sweep(spec, driver, store) -> SweepSummary`.

bench (the HTTP client), simulate and every library caller of the simulated engine (recommend, calibrate,
validation, a load plan's ramps) run their levels here: the levels built from the spec (or given), run in order
by the one level runner (kneecap.sweep.runner.Sweep) on the driver passed in, kept by the store
(kneecap.sweep.store: a results folder or memory), optionally searched for the maximum load (find-max), and
returned typed (kneecap.metrics.summary_model). The store holds the summary exactly as it was kept (`summary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from kneecap.levels import LevelDriver, LevelOptions, LevelRun, SweepLevel, sweep_levels
from kneecap.metrics.stop import StopLimits
from kneecap.sweep.runner import Sweep, SweepState
from kneecap.sweep.store import SweepStore

if TYPE_CHECKING:  # pydantic is imported when a sweep ends, not when this module is
    from kneecap.metrics.summary_model import SweepSummary


@dataclass(frozen=True)
class FindMax:
    """--find-max: search the highest load that meets the SLO within the levels given, each load `repeats` times;
    extend: a transient level is run again, longer (synthetic requests only)."""

    repeats: int = 1
    extend: bool = False


def run_sweep(
    spec: LevelOptions,
    driver: LevelDriver,
    store: SweepStore,
    *,
    fields: dict,
    levels: list[SweepLevel] | None = None,
    state: SweepState | None = None,
    limits: StopLimits | None = None,
    summarize: Callable | None = None,
    progress=None,
    find_max: FindMax | None = None,
    on_level: Callable[[SweepLevel, LevelRun, dict, list], None] | None = None,
    stop_rule: Callable[[dict], dict | None] | None = None,
) -> SweepSummary:
    """Run the sweep and return its summary, typed (SweepSummary); the store keeps the same summary as a dict.

    fields: the summary's kind and the keys only this command writes; levels: default every level of the spec
    (sweep_levels); state: what a resumed run carries over (its `done` levels are not run again); limits: the
    declared stop rules, their SLO the levels are judged by; summarize: a level's records -> its summary (default
    kneecap.metrics.summarize.summarize_level); on_level / stop_rule: the runner's hooks (kneecap.sweep.runner)."""
    from kneecap.metrics.summary_model import SweepSummary
    from kneecap.sweep.progress import SilentProgress

    if summarize is None:
        from kneecap.metrics.summarize import summarize_level as summarize
    limits = StopLimits() if limits is None else limits
    state = SweepState() if state is None else state
    slo = dict(limits.slo or {}) or None
    sweep = Sweep(
        spec,
        state=state,
        sweep_levels=sweep_levels(spec) if levels is None else levels,
        driver=driver,
        store=store,
        progress=SilentProgress() if progress is None else progress,
        slo=slo,
        stop_limits=limits,
        summarize_fn=summarize,
        summary_fields=lambda: dict(fields),
        on_level=on_level,
        stop_rule=stop_rule,
    )
    if find_max is not None:
        from kneecap.sweep.find_max import search_max_load

        final = search_max_load(sweep, spec, slo=slo or {}, repeats=find_max.repeats, extend=find_max.extend)
    else:
        final = sweep.run(state.done)
    return SweepSummary.read(final, "the sweep's summary")


LIBRARY_FIELDS = {"kind": "simulate", "model_executed": False, "benchmark_executed": False}


def run_one_level(spec: LevelOptions, driver: LevelDriver, level: SweepLevel) -> tuple[dict, list]:
    """One level through run_sweep into a MemoryStore, for a library caller that judges a level itself (recommend,
    validation): (its level summary as summary.json holds it, its records in the order they finished)."""
    from kneecap.sweep.store import MemoryStore

    store = MemoryStore()
    run_sweep(spec, driver, store, fields=LIBRARY_FIELDS, levels=[level])
    return store.summary["levels"][0], store.records
