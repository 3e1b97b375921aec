"""One door into a sweep: nothing in the package outside sweep/ and the simulator's driver modules builds the level
runner (`Sweep(`) or enters the simulated engine below it (`simulate_level(`, `<driver>.run_level(`); and a
simulated sweep through run_sweep into the in-memory store gives the summary `kneecap simulate` writes."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson

import kneecap
from clitools import run_cli

PACKAGE = Path(kneecap.__file__).parent
# the door and its runner, and the driver modules: the virtual-clock drivers and the engine's level loop
ALLOWED = ("sweep/", "sim/level_driver.py", "sim/sweep.py")


def side_entrances(source: str) -> list[str]:
    """Calls that build the runner or enter the simulated engine below it: `Sweep(...)`, `simulate_level(...)`
    (by name or attribute) and `x.run_level(...)` outside a driver's own `run_level` method (a driver that
    delegates a level to another, as a load plan's ramp does to its candidate)."""
    found: list[str] = []

    def visit(node: ast.AST, in_run_level: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_run_level = in_run_level or node.name == "run_level"
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ("Sweep", "simulate_level") or (
                name == "run_level" and isinstance(f, ast.Attribute) and not in_run_level
            ):
                found.append(f"line {node.lineno}: {name}(")
        for child in ast.iter_child_nodes(node):
            visit(child, in_run_level)

    visit(ast.parse(source), False)
    return found


def test_the_check_finds_each_side_entrance_and_ignores_comments_and_strings():
    source = """
# Sweep(opts) in a comment, and "simulate_level(" in a string, are not calls
def evaluate(sim, level, keep):
    a = Sweep(opts, store=store)
    b = kneecap.sim.sweep.simulate_level(sim, w, spec)
    c = simulate_level(sim, w, spec)
    d = VirtualTimeDriver(sim, opts).run_level(level, keep)
    e = run_level(sim, req, 1.0, 200)  # a function of the caller's own, not a driver's method

class Ramp:
    def run_level(self, level, keep):
        return self.candidate.run_level(self, level, keep)  # a driver delegating its level
"""
    assert side_entrances(source) == [
        "line 4: Sweep(",
        "line 5: simulate_level(",
        "line 6: simulate_level(",
        "line 7: run_level(",
    ]


def test_no_module_outside_the_sweep_enters_the_runner_or_the_engine_below_the_door():
    offenders = {}
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100  # the package was found
    for path in modules:
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ALLOWED):
            continue
        hits = side_entrances(path.read_text())
        if hits:
            offenders[rel] = hits
    assert offenders == {}, f"enter by kneecap.sweep.door.run_sweep (or run_one_level): {offenders}"


FLAGS = dict(isl=300, osl=120, seed=3)


def test_a_simulated_sweep_through_the_door_into_memory_gives_the_summary_simulate_writes(tmp_path):
    from kneecap.metrics.stop import StopLimits
    from kneecap.metrics.summary_model import SweepSummary
    from kneecap.plan.build import DeploymentRequest
    from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver
    from kneecap.sim.setup import simulated_deployment
    from kneecap.sweep.door import run_sweep
    from kneecap.sweep.store import MemoryStore

    out = tmp_path / "sim"
    cli = run_cli(
        *("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "300", "--osl", "120"),
        *("--rate", "2,60", "--requests", "120", "--seed", "3", "--slo", "ttft_p99_ms=500", "--out", str(out)),
        "--no-report",
    )
    assert cli.code == 0, cli.stderr
    written = orjson.loads((out / "summary.json").read_bytes())

    sim = simulated_deployment(DeploymentRequest(preset="llama-3.1-8b", gpu="h100-sxm"))
    opts = SimulateOptions(kind="rate", levels=(2.0, 60.0), requests=120, **FLAGS)
    fields = dict(
        kind="simulate",
        model_executed=False,
        benchmark_executed=False,
        seed=3,
        workload=opts.describe(),
        sweep={"seed": 3, "requests": 120, "duration_s": None, "warmup": 0, "burstiness": 1.0},
        **sim.describe(),
    )
    store = MemoryStore()
    typed = run_sweep(
        opts, VirtualTimeDriver(sim, opts), store, fields=fields, limits=StopLimits(slo={"ttft_p99_ms": 500.0})
    )

    kept = orjson.loads(orjson.dumps(store.summary, option=orjson.OPT_NON_STR_KEYS))
    assert [lv["rate"] for lv in kept["levels"]] == [2.0, 60.0]
    assert kept == written  # every key and value, levels and verdicts included
    assert typed == SweepSummary.read(written)  # and the typed summary the door returns reads the same
    assert len(store.records) == sum(lv["requests"] for lv in kept["levels"])  # the records, kept in memory
    assert {r.level for r in store.records} == {0, 1}
