"""Running one cell of a load plan again: `kneecap run PLAN --cell CANDIDATE/CLASS/STATE --load X
--repetition N`, and the command line that does it (the handoff's "Reproduce" line). Pure.

Owns parsing and checking the selection against the plan, and matching it to the plan's cells. The
cell keeps its place in the run order, so its workload seed (plan seed + cell index) is the one the full
run used. Does not run anything (execute.py) or write the handoff (handoff.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.loadplan.cells import Cell


@dataclass(frozen=True)
class CellSelection:
    candidate: str
    class_name: str
    state: str
    load: float
    repetition: int

    @property
    def key(self) -> str:
        return f"{self.candidate}/{self.class_name}/{self.state}/rep{self.repetition}/load={self.load:g}"

    def matches(self, cell: Cell) -> bool:
        return (cell.candidate, cell.class_name, cell.state, cell.repetition) == (
            self.candidate,
            self.class_name,
            self.state,
            self.repetition,
        ) and float(cell.load) == self.load


def select_cell(spec, cell: str | None, load: float | None, repetition: int | None) -> CellSelection | None:
    """--cell / --load / --repetition -> a CellSelection checked against the plan (None when none is given)."""
    if cell is None:
        if load is not None or repetition is not None:
            raise KneecapError(
                "--load and --repetition choose a cell together with --cell",
                "pass --cell CANDIDATE/CLASS/STATE --load X --repetition N",
            )
        return None
    parts = cell.split("/")
    if len(parts) != 3 or not all(parts):
        raise KneecapError(
            f"--cell {cell!r} is not CANDIDATE/CLASS/STATE",
            "pass e.g. --cell vllm-defaults/short-message/warm (the handoff's Reproduce line has it)",
        )
    candidate, class_name, state = parts
    names = [c.name for c in spec.candidates]
    for what, value, known in (
        ("candidate", candidate, names),
        ("class", class_name, list(spec.classes)),
        ("state", state, list(spec.states)),
    ):
        if value not in known:
            raise KneecapError(
                f"--cell names {what} {value!r}, which the plan does not have",
                f"the plan's {what}s: {', '.join(known)}",
            )
    if load is None or repetition is None:
        raise KneecapError("--cell needs --load and --repetition", "pass e.g. --load 64 --repetition 0")
    if spec.load.steps != "auto" and float(load) not in [float(s) for s in spec.load.steps]:
        raise KneecapError(
            f"--load {load:g} is not one of the plan's load steps",
            f"the {spec.load.dimension} steps are {', '.join(f'{float(s):g}' for s in spec.load.steps)}",
        )
    if not 0 <= repetition < spec.repetitions:
        raise KneecapError(
            f"--repetition {repetition} is outside the plan's {spec.repetitions} repetitions",
            f"repetitions count from 0: pass 0 to {spec.repetitions - 1}",
        )
    return CellSelection(candidate, class_name, state, float(load), int(repetition))


def reproduce_command(plan_file: str, cell: dict) -> str:
    """The command line that runs exactly this cell again (same place in the run order, so the same seed)."""
    ((_, load),) = cell["load"].items()
    return shlex.join(
        [
            "kneecap",
            "run",
            plan_file,
            "--cell",
            f"{cell['candidate']}/{cell['class']}/{cell['state']}",
            "--load",
            f"{load:g}",
            "--repetition",
            str(cell["repetition"]),
        ]
    )
