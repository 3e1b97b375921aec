"""Cells and ramps: the plan expanded into the order it runs in. Pure.

A ramp is one (candidate, class, state, repetition) raised one load step at a time, lowest
first (one sweep of the level runner, its cells the levels); it stops at the first cell that crosses a
declared limit, so higher steps of that ramp are recorded as "not_run" (they count against capacity).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    candidate: str
    class_name: str
    state: str  # "warm" | "cold"
    dimension: str  # "concurrency" | "rate"
    load: float  # concurrency (whole number) or rate in requests/s
    repetition: int  # 0-based
    index: int  # position in the run order (also the RequestRecord.level of its records)

    @property
    def key(self) -> str:
        return (
            f"{self.candidate}/{self.class_name}/{self.state}/rep{self.repetition}/{self.dimension}={_fmt(self.load)}"
        )


def _fmt(x: float) -> str:
    return str(int(x)) if float(x) == int(x) else f"{x:g}"


def auto_steps(max_safe_concurrency: int | None, ceiling: int = 1024) -> list[int]:
    """Concurrency steps for `steps: auto`: powers of two from 1, up to twice the preflight's safe
    concurrency (so the ramp starts below capacity and is allowed to cross it), capped at `ceiling`."""
    top = min(ceiling, max(2, 2 * (max_safe_concurrency or ceiling // 2)))
    steps, c = [], 1
    while c <= top:
        steps.append(c)
        c *= 2
    return steps


def build_ramps(
    candidate: str, classes: list[str], states: list[str], dimension: str, steps: list[float], repetitions: int
) -> list[list[Cell]]:
    """A candidate's ramps in run order: repetition-major (a full pass over its classes and states, then the next
    pass), so a repetition also tests that the system recovered between passes."""
    ordered = sorted(float(s) for s in steps)
    passes = [(rep, cls, state) for rep in range(repetitions) for cls in classes for state in states]
    return [
        [Cell(candidate, cls, state, dimension, load, rep, i * len(ordered) + k) for k, load in enumerate(ordered)]
        for i, (rep, cls, state) in enumerate(passes)
    ]
