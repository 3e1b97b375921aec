"""bench and simulate share one declaration of every flag they both take (kneecap.cli.sweep_flags): the same
typer.Option object in both signatures, so the same names, help, type and default; and each such flag is
declared by one typer.Option( call among the two commands' modules and sweep_flags."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import typer.main

from kneecap.cli import app
from kneecap.cli.bench import bench
from kneecap.cli.simulate import simulate

SRC = Path(__file__).resolve().parents[2] / "src" / "kneecap"
# flags both commands take with a different meaning each: bench names the served model, spreads its streams over
# Ray actors and gives the preflight a block size; simulate plans a model preset, runs a grid on Ray and plans
# the KV pool with a block size
DIFFERENT_MEANING = {"model", "ray_address", "block_size"}


def _commands():
    cmds = typer.main.get_command(app).commands
    return {p.name: p for p in cmds["bench"].params}, {p.name: p for p in cmds["simulate"].params}


def test_every_flag_both_commands_take_is_one_declaration():
    b, s = _commands()
    shared = (set(b) & set(s)) - DIFFERENT_MEANING
    assert {"isl", "osl", "requests", "duration", "warmup", "seed", "burstiness", "ramp", "turns"} <= shared
    assert {"think_time_s", "dataset", "dataset_path", "replay", "replay_speed", "stable_window_s"} <= shared
    sig_b, sig_s = inspect.signature(bench).parameters, inspect.signature(simulate).parameters
    for name in sorted(shared):
        assert sig_b[name].default is sig_s[name].default, f"{name} is declared twice"
        pb, ps = b[name], s[name]
        assert (pb.opts, pb.secondary_opts, pb.help, pb.default, pb.show_default) == (
            ps.opts,
            ps.secondary_opts,
            ps.help,
            ps.default,
            ps.show_default,
        ), name
        assert type(pb.type) is type(ps.type) and pb.type.name == ps.type.name, name
    for name in DIFFERENT_MEANING:  # these stay apart on purpose: their help says different things
        assert b[name].help != s[name].help


def _declared_flags(path: Path) -> list[str]:
    """Every --flag named in a typer.Option( call of one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Option":
            found += [
                o
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
                for o in a.value.split("/")
            ]
    return found


def test_each_shared_flag_is_declared_once_in_the_source():
    b, s = _commands()
    shared = (set(b) & set(s)) - DIFFERENT_MEANING
    declared = [
        flag
        for module in ("bench.py", "simulate.py", "sweep_flags.py")
        for flag in _declared_flags(SRC / "cli" / module)
    ]
    in_commands = set(_declared_flags(SRC / "cli" / "bench.py") + _declared_flags(SRC / "cli" / "simulate.py"))
    for name in shared:
        for flag in b[name].opts:
            assert declared.count(flag) == 1, f"{flag} declared {declared.count(flag)} times"
            assert flag not in in_commands, f"{flag} declared in a command module, not in sweep_flags"


def test_a_shared_flag_gives_both_commands_the_same_error(tmp_path):
    from clitools import run_cli

    sim = ("simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-report")
    bench_args = ("bench", "--base-url", "http://127.0.0.1:9", "--isl", "10", "--osl", "10")
    for bad in (
        ("--requests", "0"),
        ("--warmup", "-1"),
        ("--burstiness", "0"),
        ("--think-time-s", "-1"),
        ("--isl", "nan"),
    ):
        errors = [
            run_cli(*cmd, "--concurrency", "2", *bad, "--out", str(tmp_path / cmd[0])).stderr
            for cmd in (sim, bench_args)
        ]
        assert errors[0] == errors[1] and errors[0].startswith(f"error: {bad[0]}"), (bad, errors)
