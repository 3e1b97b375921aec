"""`kneecap simulate`: plan flags + sweep flags -> the simulated engine, level by level -> bench's summary.json.

Thin: plans the deployment exactly as `kneecap plan` does (kneecap.plan.build), so the engine gets exactly
plan.num_kv_blocks blocks; the one level runner (kneecap.sweep.runner) drives the virtual-clock driver
(kneecap.sim.level_driver); writes DIR/requests.jsonl, DIR/summary.json (no timestamps: byte-identical for
the same seed), DIR/manifest.json (the only file with a date) and, with --trace, DIR/trace.jsonl.
"""

from __future__ import annotations

import math
import sys
from typing import List, Optional

import typer

from kneecap.cli import sweep_flags as flags
from kneecap.cli.spec_flags import SpecAcceptanceOpt, SpecMethodOpt, SpecTokensOpt, speculative
from kneecap.cli.app import app, results_folder, stdout_console
from kneecap.cli.plan import (
    SIM_OPTIONS,
    SIMULATE_FLAGS,
    MaxBatchedOpt,
    MaxSeqsOpt,
    SimEngineDefaultsOpt,
    deployment_flags,
)
from kneecap.errors import KneecapError
from kneecap.workload.endpoints import COMPLETIONS

TRACE_FILE = "trace.jsonl"


DEFAULT_LENGTH = 1000  # --isl / --osl tokens when not given


def _longest(flag: str, tokens: int, spec: str | None) -> int:
    """The longest a --isl / --osl can draw: N, or its distribution's upper bound (one is needed: the engine must
    hold every request within its context)."""
    if spec is None:
        return tokens
    from kneecap.workload.lengthspec import parse_length_spec

    bound = parse_length_spec(spec).upper_bound
    if bound is None:
        raise KneecapError(
            f"{flag} {spec}: the simulator needs a longest length to check the context against",
            f"add max=N, e.g. {flag} {spec},max=4096",
        )
    return bound


def simulate_in_process(args: list[str]) -> tuple[int, str]:
    """`kneecap simulate ARGS` as a library call in this process (a grid's configurations, in their Ray tasks):
    the exit code and what it wrote on stderr (its one-line error); its stdout is discarded."""
    import contextlib
    import io

    from kneecap.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["simulate", *args])
    return code, err.getvalue()


def _run_grid(grid: str | None, ray_address: str | None, out: str | None, json_out: bool, quiet: bool) -> int:
    """--grid [--ray]: every configuration as `kneecap simulate` alone would run it, on a cluster or here."""
    from kneecap.cluster.grid import load_grid, run_grid_bytes, write_grid

    if grid is None:
        raise KneecapError("--ray needs --grid", "pass --grid FILE (a list of configurations), or drop --ray")
    if ray_address is not None:
        from kneecap.cluster.connect import check_reachable, require_ray

        require_ray()
        check_reachable(ray_address)
    configs = load_grid(grid)
    root = results_folder(out, "grid")
    nodes: list = []
    index = write_grid(root, configs, run_grid_bytes(configs, ray_address, nodes, simulate=simulate_in_process), nodes)
    if json_out:
        import json

        sys.stdout.write(json.dumps(index) + "\n")
    elif not quiet:
        for row in index:
            print(f"{row['summary']}: kneecap simulate {' '.join(row['args'])}")
        print(f"results: {root}")
    return 0


def _sorted(obj):
    """Recursively key-sorted copy (summary bytes must not depend on insertion order)."""
    if isinstance(obj, dict):
        return {k: _sorted(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, list):
        return [_sorted(v) for v in obj]
    return obj


def _table(summary: dict):
    from rich.table import Table

    from kneecap.metrics.stability import stability_caption, verdict_text
    from kneecap.sweep.render import find_max_caption, has_slo, slo_caption, slo_cell, spec_text

    def ms(level, key, q):
        v = (level.get(key) or {}).get(q)
        return "—" if v is None else f"{v:,.1f}"

    kind = summary.get("load", "concurrency")
    knee = (summary.get("knee") or {}).get(kind)
    table = Table(
        title=f"kneecap simulate — {summary['deployment']['model']} on {summary['deployment']['num_gpus']}x "
        f"{summary['deployment']['gpu']} (virtual time; no model executed)",
        title_justify="left",
    )
    for header in (
        "C" if kind == "concurrency" else "rate (req/s)",
        "ok",
        "failed",
        "out tok/s",
        "TTFT p50 (ms)",
        "TTFT p99 (ms)",
        "TPOT p50 (ms)",
        "ITL p99 (ms)",
        "preempt",
        "KV max %",
        "running max",
        "queue max",
        *(("SLO",) if has_slo(summary) else ()),
        "steady",
        "notes",
    ):
        table.add_column(header, justify="left" if header in ("notes", "SLO", "steady") else "right")
    for level in summary["levels"]:
        sm = level.get("server_metrics") or {}
        notes = []
        if knee is not None and level.get(kind) == knee:
            notes.append("knee")
        if sm.get("preemptions"):
            notes.append("KV pool exhausted")
        if level.get("errors"):
            notes.append(", ".join(f"{k}x{v}" for k, v in sorted(level["errors"].items())))
        if spec_text(level):
            notes.append(spec_text(level))
        out = level.get("output_tok_s")
        load = level.get(kind)
        table.add_row(
            f"{load:.4g}" if isinstance(load, float) else str(load),
            str(level.get("completed")),
            str(level.get("failed")),
            "—" if out is None else f"{out:,.0f}",
            ms(level, "ttft_ms", "p50"),
            ms(level, "ttft_ms", "p99"),
            ms(level, "tpot_ms", "p50"),
            ms(level, "itl_ms", "p99"),
            str(sm.get("preemptions", "—")),
            f"{100 * sm['kv_usage_max']:.0f}" if sm.get("kv_usage_max") is not None else "—",
            str(sm.get("running_max", "—")),
            str(sm.get("waiting_max", "—")),
            *((slo_cell(level),) if has_slo(summary) else ()),
            verdict_text(level),
            "; ".join(notes),
        )
    stopped = summary.get("stopped")
    captions = [f"stopped at {stopped.get('at')}: {stopped.get('reason')}"] if stopped else []
    captions += [line] if (line := slo_caption(summary, kind)) else []
    captions += [line] if (line := stability_caption(summary["levels"])) else []
    captions += [line] if (line := find_max_caption(summary)) else []
    if captions:
        table.caption = "\n".join(captions)
    return table


@app.command("simulate")
@deployment_flags(SIMULATE_FLAGS, SIM_OPTIONS)
def simulate(
    request=None,
    isl: Optional[str] = flags.ISL,
    osl: Optional[str] = flags.OSL,
    shared_prefix: Optional[str] = flags.SHARED_PREFIX,
    prefix_hit_rate: Optional[float] = flags.PREFIX_HIT_RATE,
    concurrency: Optional[str] = flags.CONCURRENCY,
    rate: Optional[str] = flags.RATE,
    burstiness: Optional[float] = flags.BURSTINESS,
    requests: Optional[int] = flags.REQUESTS,
    duration: Optional[float] = flags.DURATION,
    warmup: Optional[int] = flags.WARMUP,
    seed: Optional[int] = flags.SEED,
    slo: Optional[str] = flags.SLO,
    goodput: Optional[List[str]] = flags.GOODPUT,
    until_stable: Optional[float] = flags.UNTIL_STABLE,
    stable_window_s: Optional[float] = flags.STABLE_WINDOW_S,
    find_max: Optional[str] = flags.FIND_MAX,
    repeats: int = flags.REPEATS,
    dataset: Optional[str] = flags.DATASET,
    dataset_path: Optional[str] = flags.DATASET_PATH,
    ramp: Optional[str] = flags.RAMP,
    turns: Optional[int] = flags.TURNS,
    think_time_s: Optional[float] = flags.THINK_TIME_S,
    client_turnaround_ms: Optional[float] = typer.Option(
        None,
        "--client-turnaround-ms",
        help="Closed loops: milliseconds from a response's last token to its client's next request, network round trip included (default 0.1: a client on the server's host; a remote client's is at least its round trip)",
    ),
    replay: Optional[str] = flags.REPLAY,
    replay_speed: Optional[str] = flags.REPLAY_SPEED,
    skip_too_long: bool = flags.SKIP_TOO_LONG,
    export: Optional[str] = flags.EXPORT,
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    spec_acceptance: SpecAcceptanceOpt = None,
    replicas: int = typer.Option(
        1,
        "--replicas",
        help="Replicas of the deployment behind one router, each with its own engine and KV pool (the load is the fleet's)",
    ),
    router: str = typer.Option(
        "round-robin",
        "--router",
        help="With --replicas: round-robin, least-loaded, or prefix (llm-d's prefix-cache-aware endpoint picker: prefix 3, queue 2, KV utilization 2)",
    ),
    max_num_seqs: MaxSeqsOpt = None,
    max_num_batched_tokens: MaxBatchedOpt = None,
    scheduler_delay_factor: Optional[float] = typer.Option(
        None,
        "--scheduler-delay-factor",
        help="vLLM V0's prompt batching delay: hold new prompts until the oldest waited X x the last prompt step (0 = off)",
    ),
    engine_defaults: SimEngineDefaultsOpt = None,
    # --- engine release and benchmark mode (kneecap.sim.config.at_release / trtllm_bench_limits) ---
    engine_version: Optional[str] = typer.Option(
        None,
        "--engine-version",
        help="The engine release to mimic, e.g. 0.7.3 (vLLM before 0.8: V0), 0.17.0 (vLLM 0.14+: asynchronous "
        "scheduling), 0.16 (TensorRT-LLM before 0.17: the C++ runtime); default for vLLM: as 0.10-0.11 run (V1, "
        "synchronous scheduling, 4-bit experts with Marlin on GPUs without FP4). With --engine, also the release whose "
        "memory accounting sizes the KV pool, as on `kneecap plan` (V0 without a release number: the pool model's "
        "default release)",
    ),
    trtllm_bench: bool = typer.Option(
        False,
        "--trtllm-bench",
        help="With --engine-defaults trtllm: run as `trtllm-bench throughput` does for --isl/--osl (the max batch size and tokens it computes from the model, the GPUs' memory and the lengths; chunked prefills)",
    ),
    endpoint: Optional[str] = flags.ENDPOINT,
    frontend_ms_per_request: Optional[float] = typer.Option(
        None,
        "--frontend-ms-per-request",
        help="Your API server's CPU milliseconds per request before the engine sees it (its event loop handles "
        "requests one at a time), instead of the --endpoint chat estimate, which depends on the host's CPU",
    ),
    prefix_caching: Optional[bool] = typer.Option(
        None,
        "--prefix-caching/--no-prefix-caching",
        help="Prefix caching (default: the engine's: on for vLLM, SGLang and TensorRT-LLM, off for llama.cpp)",
    ),
    step_params: Optional[str] = typer.Option(
        None,
        "--step-params",
        help="Step-time constants: k=v list (mfu=0.4,...) or a JSON file (e.g. from kneecap calibrate)",
    ),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", hidden=True, help="Deprecated spelling of --step-params"
    ),
    out: Optional[str] = flags.OUT,
    json_out: bool = flags.JSON_OUT,
    trace: bool = typer.Option(False, "--trace", help="Also write DIR/trace.jsonl: one line per engine step"),
    token_times: bool = typer.Option(
        False,
        "--token-times",
        help="Write every token's time into requests.jsonl (chunk_times, as bench does); by default a request's tokens are written as runs of engine steps, token_runs [first token s, tokens, last token s] (the summary is the same either way)",
    ),
    quiet: bool = flags.QUIET,
    no_report: bool = flags.NO_REPORT,
    grid: Optional[str] = typer.Option(
        None,
        "--grid",
        help="A JSON/YAML list of simulate configurations (option names to values): each one's summary.json into OUT/NNN-name/, index in OUT/grid.json",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray",
        help="With --grid: run the configurations as Ray tasks across a cluster: auto (RAY_ADDRESS), local, or the head's HOST:PORT; needs pip install 'kneecap[ray]'",
    ),
) -> int:
    """The same sweep as `kneecap bench`, on the simulated engine in virtual time (deterministic for a seed)."""
    if grid is not None or ray_address is not None:  # a grid of configurations (kneecap.cluster.grid)
        return _run_grid(grid, ray_address, out, json_out, quiet)
    burstiness, warmup, seed = flags.default(burstiness, 1.0), flags.default(warmup, 0), flags.default(seed, 0)
    think_time_s, stable_window_s = flags.default(think_time_s, 0.0), flags.default(stable_window_s, 10.0)
    replay_speed = flags.default(replay_speed, "1")
    import dataclasses

    from kneecap.sweep.export import check_format
    from kneecap.levels import sweep_levels
    from kneecap.sweep.door import FindMax, run_sweep
    from kneecap.sweep.store import ResultsStore
    from kneecap.metrics.slo import parse_slo
    from kneecap.metrics.stop import StopLimits
    from kneecap.plan.build import plan_deployment
    from kneecap.results import ResultsDir, current_argv
    from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver
    from kneecap.sim.setup import engine_pool_request, from_plan
    from kneecap.sim.config import check_release
    from kneecap.sim.step_params import parse_step_params
    from kneecap.workload import parse_levels, parse_rates
    from kneecap.workload.datasets import dataset_flag

    if ramp is not None and (concurrency or replay is not None or find_max is not None):
        raise KneecapError(
            "--ramp is one open-loop level on the rate dimension here",
            "drop --concurrency/--replay/--find-max (a concurrency ramp is not simulated yet)",
        )
    if replay is not None:
        flags.check_replay_alone(concurrency, rate)
    ramp_obj = None
    if ramp is not None:
        ramp_obj, mean = flags.ramp_flag(ramp)
        rate = f"{mean:.12g}"  # the ramp's mean rate
    if replay is not None and replay_speed is not None and not rate:
        parse_rates(replay_speed, "--replay-speed")  # the levels below; a bad list is named as given
    kind, values = parse_levels(concurrency, rate or (replay_speed if replay is not None else None))
    check_format(export)
    flags.check_find_max(find_max, kind, values, repeats)
    slo = flags.slo_flag(slo, goodput)
    slo_dict = parse_slo(slo) if slo else {}
    flags.check_turns(turns)
    isl, isl_dist = flags.length_flag("--isl", isl, DEFAULT_LENGTH)
    prefix_tokens, prefix_groups, warmup = flags.prefix_flags(shared_prefix, prefix_hit_rate, isl, isl_dist, warmup)
    osl, osl_dist = flags.length_flag("--osl", osl, DEFAULT_LENGTH)
    longest = {flag: _longest(flag, n, spec) for flag, n, spec in (("--isl", isl, isl_dist), ("--osl", osl, osl_dist))}
    dataset = dataset_flag(dataset, dataset_path)
    dataset = None if dataset == "random" else dataset
    if calibration and step_params:
        raise KneecapError("--calibration and --step-params both given", "pass one of them")
    params_obj = parse_step_params(calibration or step_params, "--calibration" if calibration else "--step-params")
    turnaround = {}
    if client_turnaround_ms is not None:
        if not (client_turnaround_ms >= 0 and math.isfinite(client_turnaround_ms)):
            raise KneecapError(
                f"--client-turnaround-ms must be a number of milliseconds >= 0, got {client_turnaround_ms}",
                "pass e.g. --client-turnaround-ms 0.1 (a client on the server's host) or 20 (a remote one)",
            )
        turnaround = {"client_turnaround_s": client_turnaround_ms / 1e3}

    engine_defaults = _engine_defaults(engine_defaults, request.engine)
    check_release(engine_version)
    # the engine's own pool rule: vLLM's or SGLang's memory accounting (--engine), TensorRT-LLM's (trtllm, nim)
    plan, _ = plan_deployment(engine_pool_request(request, engine_defaults, engine_version))
    schedule = ()
    if replay is not None:  # the levels given were speeds: each becomes the replay's mean request rate
        schedule = _replay_schedule(replay, plan.context, skip_too_long)
        base = SimulateOptions(kind="rate", levels=(1.0,), schedule=schedule)
        values = [speed * base.trace_rate for speed in values]
        isl, osl, isl_dist, osl_dist = 1, 1, None, None  # lengths come from the trace (checked row by row)
        longest = {"--isl": 1, "--osl": 1}
    opts = SimulateOptions(
        kind=kind,
        levels=tuple(values),
        isl=isl,
        osl=osl,
        isl_dist=isl_dist,
        osl_dist=osl_dist,
        requests=requests,
        duration_s=duration,
        warmup=warmup,
        seed=seed,
        burstiness=burstiness,
        shared_prefix_tokens=prefix_tokens,
        num_prefix_groups=prefix_groups,
        schedule=schedule,
        ramp=ramp_obj,
        turns=turns or 0,
        think_time_s=think_time_s,
        until_stable=until_stable,
        stable_window_s=stable_window_s,
        **turnaround,
    )
    if dataset is not None:
        opts = dataclasses.replace(opts, dataset=_dataset_specs(dataset, opts, plan.context))
        longest = {"--isl": 1, "--osl": 1}  # lengths come from the data (kept within the context)
    if sum(longest.values()) > plan.context:
        total = sum(longest.values())
        raise KneecapError(
            f"--isl + --osl = {total} tokens{' at most' if isl_dist or osl_dist else ''} exceed the "
            f"context of {plan.context}",
            f"pass --context {total} or shorter lengths",
        )
    sim = from_plan(
        plan,
        defaults=engine_defaults,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        prefix_caching=prefix_caching,
        step_params=params_obj,
        scheduler_delay_factor=scheduler_delay_factor,
        engine_version=engine_version,
        trtllm_bench=(isl, osl) if trtllm_bench else None,
        speculative=speculative(spec_method, spec_tokens, spec_acceptance),
        spec_seed=seed,
        endpoint=endpoint or COMPLETIONS,
        frontend_ms_per_request=frontend_ms_per_request,
    )
    if replicas != 1 and (sim.config.frontend_s_per_request > 0 or sim.config.frontend_s_per_prompt_token > 0):
        raise KneecapError(
            "--endpoint chat / --frontend-ms-per-request model one API server's event loop, not one per replica",
            "drop --replicas, or simulate one replica with its share of the load",
        )
    if replicas != 1 or router != "round-robin":
        from kneecap.sim.fleet import FleetDeployment

        sim = FleetDeployment(sim, replicas, router, seed)
    levels_to_run = sweep_levels(opts)
    for level in levels_to_run if find_max is None else ():  # a search chooses its own levels
        if (
            kind == "concurrency"
            and level.value != "max"
            and level.num_requests is not None
            and level.num_requests < level.value
        ):
            print(
                f"warning: C={level.value} with only {level.num_requests} requests never reaches its concurrency; "
                f"pass --requests >= {level.value}",
                file=sys.stderr,
            )

    results = ResultsDir(results_folder(out, "simulate"))
    results.write_manifest(current_argv(), extra={"kind": "simulate", "seed": seed})
    trace_path = results.path / TRACE_FILE
    trace_path.unlink(missing_ok=True)
    results.records_path.unlink(missing_ok=True)  # a simulation is re-run, never resumed: start the records afresh
    facts = sim.describe()

    fields = dict(
        kind="simulate",
        model_executed=False,
        benchmark_executed=False,
        seed=seed,
        workload=opts.describe(),
        sweep={
            "seed": seed,
            "requests": requests,
            "duration_s": duration,
            "warmup": warmup,
            "burstiness": burstiness,
        },
        **facts,
    )

    with results.open_writer() as writer:
        # --export vllm re-reads requests.jsonl for per-token ITLs: it needs every token's time
        driver = VirtualTimeDriver(
            sim,
            opts,
            trace_path=trace_path if trace else None,
            row_writer=_append_rows,
            token_times=token_times or export == "vllm",
        )
        store = ResultsStore(results, writer, prepare_summary=_sorted)
        # find-max: a transient level is run again, longer (synthetic requests only: a trace or dataset is what it is)
        extend = not (opts.schedule or opts.dataset or opts.turns)
        search = None if find_max is None else FindMax(repeats, extend=extend)
        limits = StopLimits(slo=slo_dict)
        run_sweep(opts, driver, store, fields=fields, levels=levels_to_run, limits=limits, find_max=search)
        final = store.summary
    if export is not None:
        from kneecap.sweep.export import export as export_levels

        export_levels(
            export,
            results.path,
            final,
            model_id=final["deployment"]["model"],
            burstiness=(final.get("workload") or {}).get("burstiness") or 1.0,
        )
    if not no_report:
        from kneecap.report import render_report_or_warn

        render_report_or_warn(results.path)
    if json_out:
        import orjson

        sys.stdout.write(orjson.dumps(final).decode() + "\n")
    elif not quiet:
        console = stdout_console()
        console.print(_table(final))
        console.print(f"results: {results.path}")
    return 0


def _engine_defaults(defaults: str | None, engine: str | None) -> str:
    """--engine-defaults, or --engine's engine, or vllm; --engine with another engine's defaults is an error."""
    if engine is not None and defaults is not None and defaults != engine:
        raise KneecapError(
            f"--engine {engine} sizes the pool as {engine} does, but --engine-defaults {defaults} schedules as another",
            f"drop --engine-defaults (it follows --engine), or drop --engine {engine}",
        )
    return defaults or engine or "vllm"


def _dataset_specs(path: str, opts, context: int) -> tuple:
    """Requests with the dataset's lengths, enough for the largest level; prompts longer than the context
    are filtered out (vLLM's way: sample in seeded order while entries pass, oversample if too few do)."""
    from kneecap.workload.datasets import LengthFilter, estimate_tokens, read_dataset, sample_dataset

    if opts.ramp is not None:
        r = opts.ramp
        n = int(r.expected_arrivals(r.duration_s) * 2) + 64  # a Poisson ramp sends about this many at most
    else:
        n = max(opts.requests_for(v) or 0 for v in opts.levels) + opts.warmup
    if not n:
        raise KneecapError("--dataset needs a request count", "pass --requests N (or --ramp)")
    sample = sample_dataset(
        read_dataset(path), n, estimate_tokens, seed=opts.seed, length_filter=LengthFilter(max_total_tokens=context)
    )
    return tuple(r.spec for r in sample.requests)


def _replay_schedule(path: str, context: int, skip_too_long: bool) -> tuple:
    """The trace's requests at speed 1 as (send offset s, RequestSpec); a broken line or a row past the
    context stops here, before anything runs (one line naming the file and lines)."""
    from kneecap.sweep.bench_workload import note_skipped_rows
    from kneecap.workload.traces import replay_schedule

    replay = replay_schedule(path, context, skip_too_long)
    note_skipped_rows(replay.too_long_lines, f"the {context:,}-token context")
    return replay.schedule


def _append_rows(path, rows: list) -> None:
    """--trace: one JSON line per engine step, appended level after level."""
    import orjson

    with open(path, "ab") as fh:
        fh.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))
