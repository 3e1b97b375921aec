"""The exit code a fuzzed command line must give, worked out from the core without the command itself.

The argv is read by the command's own option parser (what typer/click refuse, the CLI refuses: exit 2);
then the values go to the core functions the command stands on (kneecap.plan.build, the sweep options,
the simulated deployment, the results folder, the report loader, the load-plan reader), called here
directly. A KneecapError from any of them means the CLI must print that one line and exit with its code;
none means the CLI must exit 0. So a CLI that refuses what the core accepts, or accepts what the core
refuses, fails the fuzz test.
"""

from __future__ import annotations

import functools
from pathlib import Path

from kneecap.errors import KneecapError

PARSE_REFUSED = 2


@functools.lru_cache(maxsize=None)
def _command(name: str):
    import typer.main

    from kneecap.cli import app

    return typer.main.get_command(app).commands[name]


def parsed_values(argv: list[str]) -> dict | None:
    """The command's parameters as its parser reads argv, or None when the parser refuses it; {"help": True}
    for an eager --help."""
    import typer

    try:  # the click typer runs on (a vendored copy in recent typer)
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover
        from click import exceptions as click

    import contextlib
    import io

    cmd = _command(argv[0])
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # an eager --help prints before it exits
            ctx = cmd.make_context(argv[0], list(argv[1:]))
    except typer.Exit:
        return {"help": True}
    except click.ClickException:
        return None
    return dict(ctx.params)


def _request(values: dict):
    import dataclasses

    from kneecap.plan.build import DeploymentRequest

    names = {f.name for f in dataclasses.fields(DeploymentRequest)}
    return DeploymentRequest(**{k: v for k, v in values.items() if k in names})


def _plan(v: dict) -> None:
    from kneecap.plan.build import check_positive, plan_deployment, plan_vllm_cpu
    from kneecap.plan.levers import compute_levers
    from kneecap.plan.sweeps import context_sweep, tp_sweep

    if v["list_gpus"]:
        return
    check_positive("--prefix-tokens", v["prefix_tokens"], int)
    request = _request(v)
    if request.cpu_kvcache_space_gib is not None:
        plan_vllm_cpu(request)
        return
    plan, _ = plan_deployment(request)
    compute_levers(plan, prefix_tokens=v["prefix_tokens"])
    tp_sweep(plan)
    context_sweep(plan)


def _preflight(v: dict) -> None:
    from kneecap.model.kv import kv_dtype_bytes
    from kneecap.plan.build import plan_deployment
    from kneecap.plan.preflight import plan_capacity, preflight
    from kneecap.workload import concurrency_levels

    request = _request(v)
    levels = concurrency_levels(v["concurrency"])
    isl, osl, bs = v["isl"], v["osl"], request.block_size or 16
    sources = [
        s for s in (v["kv_tokens"], v["server"], request.preset or request.model or request.gpu) if s is not None
    ]
    if len(sources) != 1 or isl <= 0 or osl <= 0 or bs <= 0:
        raise KneecapError("bad preflight input", "")
    if v["kv_tokens"] is not None:
        capacity = v["kv_tokens"]
        if request.kv_dtype:
            kv_dtype_bytes(request.kv_dtype)
    elif v["server"]:
        raise KneecapError("no server answers at any --server the fuzzer passes", "")
    else:
        plan, pool = plan_deployment(request)
        cap = plan_capacity(plan, pool, isl + osl)  # the CLI's own arithmetic, from the core
        capacity, bs = cap.kv_capacity_tokens, cap.block_size
        if capacity <= 0:
            raise KneecapError("the plan leaves no KV capacity", "")
    preflight(capacity, isl=isl, osl=osl, concurrencies=levels, block_size=bs)


def _simulate(v: dict) -> None:
    from kneecap.metrics.slo import parse_slo
    from kneecap.plan.build import plan_deployment
    from kneecap.results import ResultsDir
    from kneecap.levels import sweep_levels
    from kneecap.sim.level_driver import SimulateOptions
    from kneecap.sim.setup import from_plan
    from kneecap.sim.step_params import parse_step_params
    from kneecap.sweep.options import parse_shared_prefix
    from kneecap.workload import parse_levels

    kind, values = parse_levels(v["concurrency"], v["rate"])
    prefix_tokens, prefix_groups = parse_shared_prefix(v["shared_prefix"])
    parse_slo(v["slo"] or None)
    params = parse_step_params(v["step_params"])
    # --isl/--osl: the declaration bench and simulate share (a whole number or a length distribution)
    from kneecap.cli.simulate import DEFAULT_LENGTH, _longest
    from kneecap.cli.sweep_flags import default, length_flag

    isl, isl_dist = length_flag("--isl", v["isl"], DEFAULT_LENGTH)
    osl, osl_dist = length_flag("--osl", v["osl"], DEFAULT_LENGTH)
    longest = _longest("--isl", isl, isl_dist) + _longest("--osl", osl, osl_dist)
    # simulate's --engine-version is the simulated engine's release (--engine-defaults), and with --engine the
    # release of its pool model too (sim.setup.engine_pool_request)
    from kneecap.cli.simulate import _engine_defaults
    from kneecap.sim.config import check_release
    from kneecap.sim.setup import engine_pool_request

    defaults = _engine_defaults(v["engine_defaults"], v["engine"])
    check_release(v["engine_version"])
    request = engine_pool_request(_request({**v, "engine_version": None}), defaults, v["engine_version"])
    plan, _ = plan_deployment(request)
    opts = SimulateOptions(
        kind=kind,
        levels=tuple(values),
        isl=isl,
        osl=osl,
        isl_dist=isl_dist,
        osl_dist=osl_dist,
        requests=v["requests"],
        duration_s=v["duration"],
        warmup=default(v["warmup"], 0),  # simulate's defaults of the flags it shares with bench
        seed=default(v["seed"], 0),
        burstiness=default(v["burstiness"], 1.0),
        shared_prefix_tokens=prefix_tokens,
        num_prefix_groups=prefix_groups,
    )
    if longest > plan.context:
        raise KneecapError("--isl + --osl exceed the context", "")
    from_plan(
        plan,
        defaults=defaults,
        max_num_seqs=v["max_num_seqs"],
        max_num_batched_tokens=v["max_num_batched_tokens"],
        prefix_caching=v["prefix_caching"],
        step_params=params,
    )
    sweep_levels(opts)
    if v["out"] is not None:
        ResultsDir(Path(v["out"]))


def _report(v: dict) -> None:
    from kneecap.report.load import load_results
    from kneecap.report.render import render_comparison, render_results

    folders = v["folders"]
    if v["fmt"] not in ("md", "html", "both") or len(folders) > 2:
        raise KneecapError("bad report input", "")
    if len(folders) == 2:
        render_comparison(folders[0], folders[1], v["out"], v["fmt"])
    else:
        render_results(load_results(folders[0]), v["out"], v["fmt"])


def _run(v: dict) -> None:
    from kneecap.loadplan.schema import load_plan_file
    from kneecap.results import ResultsDir

    load_plan_file(v["plan_file"])
    if v["out"] is not None:
        ResultsDir(Path(v["out"]))


CORE = {"plan": _plan, "preflight": _preflight, "simulate": _simulate, "report": _report, "run": _run}


def expected_code(argv: list[str]) -> int:
    """0, or the code of the core's KneecapError, or 2 when the command's parser refuses argv."""
    values = parsed_values(argv)
    if values is None:
        return PARSE_REFUSED
    if values.get("help"):
        return 0
    try:
        CORE[argv[0]](values)
    except KneecapError as exc:
        return exc.exit_code
    return 0
