"""`kneecap bench`: flags -> BenchOptions -> the sweep (kneecap.sweep.session) -> table / JSON.

Heavy imports (numpy, aiohttp, rich) happen inside the command. The API key is read from an
environment variable or a file, never from a flag value, and never printed or written.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from kneecap.cli import sweep_flags as flags
from kneecap.cli.app import app, stdout_console
from kneecap.errors import KneecapError

EXIT_FAILED_ON = 1  # --fail-on matched
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM (128 + SIGINT), results kept
EXIT_SERVER_DEAD = 3  # the sweep ended because the server stopped answering, results kept
EXIT_AUTH_REFUSED = 4  # the server started refusing the API key mid-sweep: the sweep stopped, results kept


@app.command("bench")
def bench(
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="[required, unless --resume] OpenAI-compatible server, e.g. http://127.0.0.1:8000"
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="model name to request", show_default="the server's first model"
    ),
    endpoint: Optional[str] = flags.ENDPOINT,
    isl: Optional[str] = flags.ISL,
    osl: Optional[str] = flags.OSL,
    concurrency: Optional[str] = flags.CONCURRENCY,
    rate: Optional[str] = flags.RATE,
    burstiness: Optional[float] = flags.BURSTINESS,
    requests: Optional[int] = flags.REQUESTS,
    duration: Optional[float] = flags.DURATION,
    warmup: Optional[int] = flags.WARMUP,
    slo: Optional[str] = flags.SLO,
    find_max: Optional[str] = flags.FIND_MAX,
    repeats: int = flags.REPEATS,
    export: Optional[str] = flags.EXPORT,
    out: Optional[str] = flags.OUT,
    json_out: bool = flags.JSON_OUT,
    quiet: bool = flags.QUIET,
    timeout: Optional[float] = typer.Option(
        None, "--timeout", help="per-request timeout in seconds", show_default="600"
    ),
    keepalive: Optional[bool] = typer.Option(
        None,
        "--keepalive/--no-keepalive",
        help="reuse connections; default: probe the server first and reuse them only if it keeps a connection open after a streamed response (llama.cpp does not)",
        show_default="probe the server",
    ),
    ignore_eos: Optional[bool] = typer.Option(
        None, "--ignore-eos/--no-ignore-eos", help="ask for exactly --osl tokens", show_default="on"
    ),
    dataset: Optional[str] = flags.DATASET,
    dataset_path: Optional[str] = flags.DATASET_PATH,
    replay: Optional[str] = flags.REPLAY,
    replay_speed: Optional[str] = flags.REPLAY_SPEED,
    skip_too_long: bool = flags.SKIP_TOO_LONG,
    ramp: Optional[str] = flags.RAMP,
    turns: Optional[int] = flags.TURNS,
    think_time_s: Optional[float] = flags.THINK_TIME_S,
    until_stable: Optional[float] = flags.UNTIL_STABLE,
    stable_window_s: Optional[float] = flags.STABLE_WINDOW_S,
    goodput: Optional[List[str]] = flags.GOODPUT,
    shared_prefix: Optional[str] = flags.SHARED_PREFIX,
    prefix_hit_rate: Optional[float] = flags.PREFIX_HIT_RATE,
    reset_prefix_cache: bool = typer.Option(
        False,
        "--reset-prefix-cache",
        help="before each level, ask the server to drop its prefix cache (vLLM POST /reset_prefix_cache, SGLang /flush_cache), so each level starts cold; the level records which endpoint accepted",
    ),
    seed: Optional[int] = flags.SEED,
    prompt_salt: Optional[str] = typer.Option(
        None,
        "--prompt-salt",
        help="mixed into every prompt (default: a fresh one per run, in manifest.json; pass it again to repeat a run's prompts exactly)",
    ),
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="the served model's tokenizer.json: text prompts of exact length, counted locally"
    ),
    kv_tokens: Optional[int] = typer.Option(
        None, "--kv-tokens", help="KV pool in tokens for the preflight", show_default="read from the server"
    ),
    block_size: Optional[int] = typer.Option(
        None, "--block-size", help="KV block size in tokens for the preflight", show_default="the server's, else 16"
    ),
    force: bool = typer.Option(False, "--force", help="run levels the preflight says exceed the KV pool"),
    workers: Optional[int] = typer.Option(
        None, "--workers", help="client processes to spread streams over", show_default="1"
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray",
        help="spread streams over Ray actors across a cluster's nodes: auto (RAY_ADDRESS), local (a cluster in this process) or the head's HOST:PORT; needs pip install 'kneecap[ray]'",
    ),
    ray_streams_per_actor: int = typer.Option(
        256,
        "--ray-streams-per-actor",
        help="with --ray: at most this many concurrent streams per actor (default: one actor per CPU of the cluster, more if a level needs them)",
    ),
    resume: Optional[str] = typer.Option(None, "--resume", help="continue the sweep in this results folder"),
    keep_prompts: bool = typer.Option(
        False, "--keep-prompts", help="store prompts in requests.jsonl (default: hashes only)"
    ),
    redact: bool = typer.Option(False, "--redact", help="keep no server-chosen strings (URL, model, error bodies)"),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="exit 1 on: errors, slo, stopped (comma list)"),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="environment variable holding the API key"),
    api_key_file: Optional[str] = typer.Option(None, "--api-key-file", help="file holding the API key"),
    no_report: bool = flags.NO_REPORT,
) -> int:
    """Drive a real OpenAI-compatible server through a concurrency or rate sweep.

    The API key comes from KNEECAP_API_KEY or OPENAI_API_KEY (or --api-key-env / --api-key-file).

    Exit codes: 0 done (also when requests failed); 1 a --fail-on condition held; 2 bad input or a server
    that cannot be used; 3 the server stopped answering mid-sweep (what was measured is kept; --resume);
    4 the server refused the API key mid-sweep (stopped after that level; what was measured is kept); 130 interrupted.
    """
    import signal
    import sys
    from pathlib import Path

    from kneecap.sweep.credentials import resolve_api_key
    from kneecap.sweep.options import BenchOptions, parse_fail_on
    from kneecap.sweep.progress import make_progress
    from kneecap.sweep.session import run_bench
    from kneecap.results import current_argv
    from kneecap.workload import concurrency_levels, parse_rates

    from kneecap.workload.datasets import dataset_flag

    flags.check_turns(turns)
    isl_n, isl_dist = flags.length_flag("--isl", isl)
    osl_n, osl_dist = flags.length_flag("--osl", osl)
    dataset = dataset_flag(dataset, dataset_path)
    slo = flags.slo_flag(slo, goodput)
    given = {
        "base_url": base_url,
        "model": model,
        "endpoint": endpoint,
        "isl": isl_n,
        "osl": osl_n,
        "isl_dist": isl_dist,
        "osl_dist": osl_dist,
        "ramp": ramp,
        "turns": turns,
        "think_time_s": think_time_s,
        "skip_too_long": skip_too_long or None,
        "until_stable": until_stable,
        "stable_window_s": stable_window_s,
        "concurrency": tuple(concurrency_levels(concurrency)) if concurrency is not None else None,
        "rate": tuple(parse_rates(rate)) if rate is not None else None,
        "burstiness": burstiness,
        "requests": requests,
        "duration_s": duration,
        "warmup": warmup,
        "slo": slo,
        "timeout_s": timeout,
        "keepalive": keepalive,
        "ignore_eos": ignore_eos,
        "dataset": dataset,
        "seed": seed,
        "prompt_salt": prompt_salt,
        "tokenizer": tokenizer,
        "kv_tokens": kv_tokens,
        "block_size": block_size,
        "workers": workers,
        "fail_on": parse_fail_on(fail_on) if fail_on is not None else None,
        "api_key_env": api_key_env,
        "api_key_file": api_key_file,
        "force": force or None,
        "keep_prompts": keep_prompts or None,
        "redact": redact or None,
        "reset_prefix_cache": reset_prefix_cache or None,
    }
    if shared_prefix is not None or prefix_hit_rate is not None:
        given["shared_prefix_tokens"], given["num_prefix_groups"], given["warmup"] = flags.prefix_flags(
            shared_prefix, prefix_hit_rate, isl_n, isl_dist, warmup
        )
    if replay is not None:
        given.update(_replay_levels(replay, replay_speed, concurrency, rate, skip_too_long))
    elif replay_speed is not None:
        raise KneecapError("--replay-speed scales a replayed trace's times", "pass --replay PATH with it")
    if ramp is not None:  # one level on the dimension given: its value is the ramp's mean load
        _, mean = flags.ramp_flag(ramp)
        if concurrency is not None:
            given["concurrency"] = (max(1, round(mean)),)
        elif rate is not None:
            given["rate"] = (float(f"{mean:.12g}"),)
        else:
            raise KneecapError(
                "--ramp needs the dimension it moves on",
                "pass --concurrency 1 or --rate 1 with it (the value is replaced by the ramp's mean)",
            )

    out_dir = Path(out) if out else None
    if resume is not None:
        opts, out_dir = _resumed_options(Path(resume), out_dir, given)
    else:
        if base_url is None:
            raise KneecapError("--base-url is required", "pass e.g. --base-url http://127.0.0.1:8000 (or --resume DIR)")
        if osl is None and dataset in (None, "random") and replay is None:
            raise KneecapError("--osl is required", "pass the output tokens per request, e.g. --osl 1000")
        opts = BenchOptions(**{k: v for k, v in given.items() if v is not None})
    from kneecap.sweep.export import check_format

    check_format(export)
    flags.check_find_max(find_max, opts.kind, opts.levels, repeats)
    if find_max is not None and resume is not None:
        raise KneecapError("--find-max cannot be resumed", "start the search again with --out NEW_DIR")
    api_key = resolve_api_key(opts.api_key_env, opts.api_key_file)
    ray_target = _ray_target(ray_address, ray_streams_per_actor, workers)

    progress = make_progress(quiet=quiet, json_out=json_out)
    previous_term = signal.signal(signal.SIGTERM, _term_as_interrupt)
    try:
        run = run_bench(
            opts,
            api_key=api_key,
            out_dir=out_dir,
            resume=resume is not None,
            progress=progress,
            argv=current_argv(),
            ray=ray_target,
            find_max_repeats=repeats if find_max is not None else None,
        )
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        progress.close()

    summary = run.summary
    if export is not None:
        from kneecap.sweep.export import export as export_levels

        export_levels(
            export,
            run.out_dir,
            summary,
            burstiness=opts.burstiness,
            model_id=opts.model or (summary.get("server") or {}).get("model_id") or "",
        )
    if not no_report:
        from kneecap.report import render_report_or_warn

        render_report_or_warn(run.out_dir)
    if json_out:
        import orjson

        sys.stdout.write(
            orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode() + "\n"
        )
    elif not quiet:
        from kneecap.sweep.render import summary_table

        console = stdout_console(highlight=False)
        if run.nothing_to_do:
            console.print(f"nothing to resume in {run.out_dir}: the sweep already ended", markup=False)
        console.print(summary_table(summary))
        console.print(f"results: {run.out_dir}", markup=False)
    code, why = exit_code(summary, opts.fail_on)
    if why:  # one line on stderr saying why the exit code is not 0, even with --quiet
        print(why, file=sys.stderr)
    return code


def _replay_levels(path: str, speeds: str | None, concurrency, rate, skip_too_long: bool) -> dict:
    """--replay PATH --replay-speed S1,S2: one level per speed, each the trace's mean rate x the speed (the
    rows are read again with the server's context before the sweep; a bad file is one line here)."""
    from kneecap.sweep.bench_workload import replay_schedule
    from kneecap.workload import parse_rates

    flags.check_replay_alone(concurrency, rate)
    values = tuple(parse_rates(speeds or "1", "--replay-speed"))
    trace = replay_schedule(path, None, skip_too_long)
    return {
        "replay": path,
        "replay_speeds": values,
        "trace_rate": trace.rate,
        "replay_requests": len(trace.schedule),
        "rate": tuple(v * trace.rate for v in values),
    }


def _ray_target(address: str | None, streams_per_actor: int, workers: int | None):
    """--ray: where and how to spread the streams (kneecap.cluster); a one-line error without Ray installed."""
    if address is None:
        return None
    from kneecap.cluster.connect import RayTarget, check_reachable, require_ray

    if workers is not None and workers > 1:
        raise KneecapError(
            "--ray and --workers both given", "pass one: --ray spreads streams over the cluster's actors"
        )
    require_ray()
    target = RayTarget(address, streams_per_actor=streams_per_actor)
    check_reachable(target.address)
    return target


def _term_as_interrupt(signum, frame):
    raise KeyboardInterrupt


def _resumed_options(folder, out_dir, given: dict):
    from kneecap.sweep.options import BenchOptions
    from kneecap.results import ResultsDir

    if not folder.is_dir():
        raise KneecapError(
            f"--resume folder {folder} does not exist", "pass the results folder of an earlier bench run"
        )
    if out_dir is not None and out_dir.resolve() != folder.resolve():
        raise KneecapError(
            "--resume and --out name different folders", "drop --out: a resumed run writes into its own folder"
        )
    manifest = ResultsDir(folder).read_manifest() or {}
    stored = dict(manifest.get("bench_options") or {})
    if not stored:
        raise KneecapError(
            f"{folder} holds no bench manifest.json to resume from",
            "pass --resume the results folder of an earlier `kneecap bench` run",
        )
    # key locations are never trusted from disk (the manifest redacts them): name them again if needed
    stored.pop("api_key_env", None)
    stored.pop("api_key_file", None)
    if stored.get("base_url") in (None, "<redacted>") and given.get("base_url") is None:
        raise KneecapError(
            f"{folder}/manifest.json does not hold the server URL (redacted)", "pass --base-url again with --resume"
        )
    changed = [
        k
        for k in (
            "isl",
            "osl",
            "concurrency",
            "rate",
            "requests",
            "warmup",
            "seed",
            "shared_prefix_tokens",
            "prompt_salt",
        )
        if given.get(k) is not None and stored.get(k) is not None and _norm(given[k]) != _norm(stored[k])
    ]
    if changed:
        raise KneecapError(
            f"--resume cannot change the sweep ({', '.join('--' + k.replace('_', '-') for k in changed)})",
            "drop those flags to continue the same sweep, or start a new run with --out",
        )
    return BenchOptions.from_dict(stored, **given), folder


def _norm(value):
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else value


def exit_code(summary: dict, fail_on) -> tuple[int, str | None]:
    """0 unless interrupted (130), the server died under the sweep (3), it refused the key mid-sweep (4) or a
    --fail-on condition holds (1), each with the reason."""
    from kneecap.metrics.summary_model import Stopped, SweepSummary

    doc = SweepSummary.read(summary)
    if doc.status == "interrupted":
        return EXIT_INTERRUPTED, "interrupted: results written so far are kept; continue with --resume"
    stopped = doc.stopped or Stopped()
    if stopped.reason == "server_dead":
        return EXIT_SERVER_DEAD, (
            f"bench: {stopped.detail or 'the server stopped answering'}; the levels "
            "measured so far are kept (restart the server, then --resume the folder)"
        )
    if stopped.reason == "auth_refused":
        return EXIT_AUTH_REFUSED, (
            f"bench: {stopped.detail}; stopped there, the levels measured so far are "
            "kept (set the key the server expects in KNEECAP_API_KEY or OPENAI_API_KEY, or "
            "name it with --api-key-env / --api-key-file), then --resume the folder"
        )
    if "errors" in fail_on:
        failed = sum(lv.failed or 0 for lv in doc.levels)
        if failed:
            return EXIT_FAILED_ON, f"bench: {failed} request(s) failed (--fail-on errors)"
    if "slo" in fail_on:
        breached = [lv for lv in doc.levels if lv.slo is not None and lv.slo.met is False]
        if breached:
            return EXIT_FAILED_ON, f"bench: the SLO was breached at {len(breached)} level(s) (--fail-on slo)"
    if "stopped" in fail_on and doc.stopped is not None and doc.stopped.to_dict():
        return EXIT_FAILED_ON, f"bench: stopped at {stopped.at}: {stopped.reason} (--fail-on stopped)"
    return 0, None
