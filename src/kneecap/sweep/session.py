"""One `kneecap bench` invocation, wired end to end: server check, results folder, resume, sweep.

Thin I/O around kneecap.sweep.runner: reads the server's info (and its KV capacity for the
preflight), opens the results folder (new, or an existing one with --resume), starts the
worker processes, runs the sweep and closes everything whatever happens. Returns the summary.
"""

from __future__ import annotations

import re
import dataclasses
import time
from datetime import datetime, timezone
from pathlib import Path

from kneecap.sweep.credentials import Scrubber
from kneecap.sweep.level import DriverSetup
from kneecap.sweep.options import KIND_CONCURRENCY, BenchOptions
from kneecap.sweep.resume import set_aside_records
from kneecap.sweep.http_levels import HttpLevelDriver, in_process_runner
from kneecap.levels import SweepLevel, sweep_levels
from kneecap.sweep.runner import STATUS_INTERRUPTED, SweepState
from kneecap.sweep.door import FindMax, run_sweep
from kneecap.sweep.store import ResultsStore
from kneecap.sweep.server_watch import ThreadedMetricsPoller
from kneecap.errors import KneecapError

DEFAULT_RESULTS_ROOT = "kneecap-results"
PROBE_TIMEOUT_S = 10.0  # reading /v1/models etc. before the sweep and after a failing level
DEAD_PROBE_TIMEOUT_S = 5.0  # a server that cannot answer GET /v1/models in this long is treated as gone
DEFAULT_BLOCK_SIZE = 16  # tokens per KV block when neither --block-size nor the server says (vLLM's default)
OPEN_LOOP_WARM_CONNECTIONS = 32  # open loop: connections opened before the clock starts (more open on demand)


def default_out_dir(root: str | Path = DEFAULT_RESULTS_ROOT) -> Path:
    """./kneecap-results/bench-YYYYmmdd-HHMMSS (UTC), with a suffix if that folder exists."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"bench-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


# -- the server --------------------------------------------------------------------------------
def read_server_info(opts: BenchOptions, api_key: str | None, scrub: Scrubber, timeout_s: float = PROBE_TIMEOUT_S):
    """The server's facts (model, KV capacity, block size...) or a one-line error naming the URL."""
    from kneecap.client.server_info import fetch_server_info

    url = opts.base_url_clean
    try:
        return fetch_server_info(url, api_key=api_key, timeout_s=timeout_s)
    except Exception as exc:  # refused, DNS, TLS, timeout, nothing answered: all say the same to the user
        reason = scrub(getattr(exc, "message", None) or str(exc)) or type(exc).__name__
        # fetch_server_info's own "cannot reach a server at URL" would say the same thing twice
        said = "" if re.fullmatch(r"cannot reach a server at \S+", reason) else f" ({reason})"
        raise KneecapError(
            f"cannot reach the server at {url}{said}",
            f"check that it is running and listening there (curl {url}/v1/models), "
            "the host and port in --base-url, and any proxy or firewall",
        ) from None


def server_answers(opts: BenchOptions, api_key: str | None) -> bool:
    """Is the server still there? (used after a level whose requests failed at the connection)."""
    try:
        read_server_info(opts, api_key, Scrubber(api_key), timeout_s=DEAD_PROBE_TIMEOUT_S)
    except KneecapError:
        return False
    return True


def server_facts(info, redact: bool) -> dict:
    """What summary.json keeps about the server (without strings the server chose, with --redact)."""
    data = info.to_dict()
    if redact:
        data = {k: v for k, v in data.items() if not isinstance(v, str) and not isinstance(v, (list, dict))}
    return data


def preflight_for(
    opts: BenchOptions, kv_capacity_tokens: int | None, source: str, block_size: int
) -> tuple[dict | None, dict]:
    """(preflight JSON, {level value: its verdict row}); nothing when it cannot be computed."""
    if not kv_capacity_tokens or opts.kind != KIND_CONCURRENCY or opts.isl is None:
        return None, {}
    from kneecap.plan.preflight import preflight

    result = preflight(
        int(kv_capacity_tokens),
        isl=opts.isl,
        osl=opts.osl,
        concurrencies=list(opts.concurrency),
        block_size=block_size,
        source=source,
    ).to_json()
    return result, {row["concurrency"]: row for row in result["levels"]}


def live_client(
    opts: BenchOptions,
    info,
    *,
    model: str,
    api_key: str | None,
    resumed: bool,
    progress,
    dataset_texts: tuple[str, ...] | None = None,
):
    """(options with keepalive settled, the client setup) from kneecap.client.setup.prepare_client, the one
    `kneecap run` uses too: prompts proved by one check request (token ids inside a vocabulary the server
    states, else text calibrated by --tokenizer or the server's /tokenize, ...), then keep-alive. Neither
    --keepalive nor --no-keepalive given: the server is probed, and a note on stderr says when it does not
    keep connections open, or when the probe cannot tell. A bad --dataset or --tokenizer fails here."""
    from kneecap.client.setup import prepare_client

    texts = dataset_texts  # a dataset sample whose request i takes text i (its lengths are in the requests)
    if texts is None and opts.dataset != "random":
        from kneecap.client.datasets import load_prompts

        texts = tuple(load_prompts(opts.dataset))
    flag_name = "the resumed run's setting" if resumed else ("--keepalive" if opts.keepalive else "--no-keepalive")
    live = prepare_client(
        info,
        base_url=opts.base_url_clean,
        model=model,
        endpoint=opts.endpoint,
        api_key=api_key,
        timeout_s=opts.timeout_s,
        keepalive=opts.keepalive,
        flag_name=flag_name,
        salt=opts.prompt_salt,
        ignore_eos=opts.ignore_eos,
        keep_prompts=opts.keep_prompts,
        tokenizer=opts.tokenizer,
        dataset_texts=texts,
        input_tokens=opts.isl,
        dataset_in_order=dataset_texts is not None,
    )
    probe = live.probe
    if probe is not None and probe.kept_alive is False:
        progress.note(
            f"note: {probe.detail}, as llama.cpp's server does: opening a new connection per request "
            "(before its send stamp, so TTFT does not include connecting); --keepalive forces reuse"
        )
    elif probe is not None and probe.kept_alive is None:
        progress.note(
            f"note: could not tell whether the server keeps connections open ({probe.detail}); "
            "reusing them. If requests fail on reused connections, pass --no-keepalive"
        )
    return dataclasses.replace(opts, keepalive=live.cfg.keepalive), live


# -- the run ------------------------------------------------------------------------------------
@dataclasses.dataclass
class BenchRun:
    """What the CLI needs after the sweep: the summary and where it was written."""

    summary: dict
    out_dir: Path
    nothing_to_do: bool = False


def run_bench(
    opts: BenchOptions,
    *,
    api_key: str | None,
    out_dir: Path | None,
    resume: bool,
    progress,
    argv: list[str],
    ray=None,
    find_max_repeats: int | None = None,
) -> BenchRun:
    """The sweep, end to end. `ray`: a kneecap.cluster.connect.RayTarget (--ray) spreads every level's
    streams over Ray actors across that cluster instead of this machine's processes."""
    from kneecap.metrics.accumulate import summarize_stream
    from kneecap.metrics.slo import parse_slo
    from kneecap.metrics.stop import StopLimits
    from kneecap.results import ResultsDir

    scrub = Scrubber(api_key)
    slo = parse_slo(opts.slo) if opts.slo else {}
    limits = StopLimits(slo=slo)

    # 1. the server must answer before anything is written
    from kneecap.client.setup import check_server, new_salt

    info = read_server_info(opts, api_key, scrub)
    model = check_server(info, opts.model, url=opts.base_url_clean)  # the key, the API, the model: before anything runs
    kv_tokens = opts.kv_tokens or info.kv_capacity_tokens
    source = "--kv-tokens" if opts.kv_tokens else ("[redacted server]" if opts.redact else opts.base_url_clean)
    block_size = opts.block_size or info.block_size or DEFAULT_BLOCK_SIZE
    opts, workload = read_workload(opts, info)  # a dataset or a trace, checked against the context
    preflight_json, verdicts = preflight_for(opts, kv_tokens, source, block_size)
    levels_to_run = sweep_levels(opts, verdicts)
    if not opts.prompt_salt:  # a fresh salt per run (kept by --resume): a second run misses the first's prefix cache
        opts = dataclasses.replace(opts, prompt_salt=new_salt())
    # one check request, then the keep-alive decision, before any folder
    opts, live = live_client(
        opts,
        info,
        model=model,
        api_key=api_key,
        resumed=resume,
        progress=progress,
        dataset_texts=workload.dataset_texts or None,
    )
    prompt_choice, connections = live.prompts, live.connections
    prompts = prompt_choice.make(opts.seed)
    answer_tokenizer = _answer_tokenizer(opts, info, prompt_choice, model=model, api_key=api_key)

    # 2. the results folder (fresh, or resumed)
    results = ResultsDir(out_dir if out_dir is not None else default_out_dir())
    state = SweepState(preflight=preflight_json, server=server_facts(info, opts.redact), connections=connections)
    done: frozenset[int] = frozenset()
    if resume:
        done, state = _resume_state(results, levels_to_run, state)
        if done is None:
            return BenchRun(summary=results.read_summary() or {}, out_dir=results.path, nothing_to_do=True)
    previous = (results.read_manifest() or {}) if resume else {}
    earlier_runs = previous.get("previous_runs", []) + (
        [{k: previous.get(k) for k in ("created_at", "command", "clock_epoch_s")}] if previous else []
    )
    # every time in this run's records is seconds since this perf_counter() reading (CLOCK_MONOTONIC on
    # Linux, shared by all processes on the machine): stated so that other tools' stamps can be lined up
    epoch = time.perf_counter()
    results.write_manifest(
        argv,
        extra={
            "bench_options": opts.to_dict(),
            "levels_already_done": sorted(done),
            "previous_runs": earlier_runs,
            "model": None if opts.redact else model,
            "clock_epoch_s": epoch,
            "prompts": prompt_choice.to_dict(),
        },
    )

    setup = DriverSetup(
        cfg=live.cfg, prompts=prompts, warm_connections=OPEN_LOOP_WARM_CONNECTIONS, answer_tokenizer=answer_tokenizer
    )
    writer = results.open_writer()
    pool = None
    try:
        if ray is not None:  # --ray: the level's streams over Ray actors across a cluster's nodes
            from kneecap.sweep.level import LevelOutcome, run_task
            from kneecap.sweep.workers import split_task
            from kneecap.cluster.streams import open_pool

            pool = open_pool(
                ray,
                setup,
                max_streams=max(opts.levels) if opts.kind == KIND_CONCURRENCY else None,
                api_key=api_key,
                run_fn=run_task,
                split_fn=split_task,
                outcome_fn=lambda data: LevelOutcome(**data),
            )
            opts = dataclasses.replace(opts, workers=pool.size)  # client processes: the actors
            run_share = pool.run
        elif opts.workers > 1:
            from kneecap.sweep.workers import WorkerPool

            pool = WorkerPool(opts.workers, setup)
            run_share = pool.run
        else:
            run_share = in_process_runner(setup)

        def prepare_record(record) -> None:
            if not record.ok:
                record.error_message = None if opts.redact else scrub(record.error_message)
            if not opts.keep_prompts:
                record.prompt = None

        driver = HttpLevelDriver(
            opts,
            run_share=run_share,
            probe=lambda: server_answers(opts, api_key),
            poll_metrics=_metrics_poller(opts, api_key, progress),
            epoch=epoch,
            progress=progress,
            timeline_path=results.path / "server_metrics.jsonl",
            workload=workload,
            reset=_cache_reset(opts, api_key),
        )
        store = ResultsStore(results, writer, prepare_record=prepare_record)
        run_sweep(
            opts,
            driver,
            store,
            levels=levels_to_run,
            state=dataclasses.replace(state, done=done),
            limits=limits,
            summarize=summarize_stream,
            progress=progress,
            find_max=None if find_max_repeats is None else FindMax(find_max_repeats),  # the levels bound the search
            # a server that says it is kneecap's simulated engine ran no model (it was still measured)
            fields={
                "kind": "bench",
                "model_executed": not info.simulated,
                "benchmark_executed": True,
                "workers": opts.workers,
                "workload": describe_workload(workload),
                "sweep": {
                    "seed": opts.seed,
                    "requests": opts.requests,
                    "duration_s": opts.duration_s,
                    "warmup": opts.warmup,
                    "burstiness": opts.burstiness,
                },
            },
        )
        summary = store.summary
        if summary.get("status") == STATUS_INTERRUPTED and pool is not None:
            pool.terminate()
            pool = None
    finally:
        if pool is not None:
            pool.close()
        writer.close()
        progress.close()
    return BenchRun(summary=summary, out_dir=results.path)


def _resume_state(
    results, levels_to_run: list[SweepLevel], fresh: SweepState
) -> tuple[frozenset[int] | None, SweepState]:
    """(levels already complete, the state carried over) for --resume, or (None, _) when nothing is left.

    Records of levels that are not complete are moved to requests.discarded.jsonl first, so each
    level's statistics come from exactly one full run of it. Preflight skips are decided again.
    """
    from kneecap.metrics.stop import AUTH_REFUSED, INTERRUPTED, SERVER_DEAD

    previous = results.read_summary() or {}  # none yet: killed before the first level ended
    stopped = previous.get("stopped")
    if stopped and stopped.get("reason") not in (INTERRUPTED, SERVER_DEAD, AUTH_REFUSED):
        return None, fresh  # the sweep ended by a rule (knee, SLO, errors, pool): nothing to resume
    done = set(results.completed_levels())
    if stopped and stopped.get("reason") in (SERVER_DEAD, AUTH_REFUSED) and previous.get("levels"):
        # the level that met the dead server or the refused key ran to its end, but its numbers are the
        # server's failure, not its capacity: it is run again once the server (or the key) is fixed
        cut = previous["levels"][-1]
        done.discard(cut.get("level", len(previous["levels"]) - 1))
    done = frozenset(done)
    set_aside_records(results.records_path, set(done))
    if done >= {level.index for level in levels_to_run}:
        return None, fresh
    kept = [lv for lv in previous.get("levels") or [] if lv.get("level") in done and not lv.get("partial")]
    return done, dataclasses.replace(fresh, levels=kept)


def read_workload(opts: BenchOptions, info):
    """(options, the run's BenchWorkload): the dataset sampled or the trace read once, rows longer than the
    server's context refused (or skipped with --skip-too-long, listed once); a replay's speeds become its
    levels' rates from the rows kept."""
    from kneecap.sweep.bench_workload import load_workload, note_skipped_rows, replay_rate

    counter = None
    if opts.tokenizer and opts.dataset != "random":
        from kneecap.client.prompts import LocalTokenizer

        counter = LocalTokenizer(opts.tokenizer).count
    workload = load_workload(opts, context_tokens=info.max_model_len, count_tokens=counter)
    if workload.too_long_lines:  # only a server that states its context can have rows past it
        note_skipped_rows(workload.too_long_lines, f"the server's {info.max_model_len:,}-token context")
    if opts.replay is not None:
        rate = replay_rate(workload.schedule)
        opts = dataclasses.replace(
            opts,
            trace_rate=rate,
            replay_requests=len(workload.schedule),
            rate=tuple(speed * rate for speed in opts.replay_speeds),
        )
        workload = dataclasses.replace(workload, opts=opts)
    return opts, workload


def _cache_reset(opts: BenchOptions, api_key: str | None):
    """--reset-prefix-cache: the call that drops the server's prefix cache before each level (None: not asked)."""
    if not opts.reset_prefix_cache:
        return None
    from kneecap.client.cache_reset import reset_prefix_cache

    return lambda: reset_prefix_cache(opts.base_url_clean, api_key)


def describe_workload(workload) -> dict:
    """summary.json's workload: what the requests were (isl/osl None where the data, not a flag, sized them)."""
    opts = workload.opts
    from_data = bool(workload.dataset or workload.schedule)
    return {
        "isl": None if from_data or opts.turns or opts.isl_dist else opts.isl,
        "osl": None if (from_data and opts.osl is None) or opts.osl_dist else opts.osl,
        "isl_dist": opts.isl_dist,
        "osl_dist": opts.osl_dist,
        "shared_prefix_tokens": opts.shared_prefix_tokens,
        "num_prefix_groups": opts.num_prefix_groups,
        "dataset_requests": len(workload.dataset) or None,
        "dataset_rejected": workload.rejected or None,
        "replay_requests": len(workload.schedule) or None,
        "replay_speeds": list(opts.replay_speeds) or None,
        "trace_rate": opts.trace_rate,
        "skipped_too_long": len(workload.too_long_lines) or None,
        "turns": opts.turns or None,
        "think_time_s": opts.think_time_s if opts.turns else None,
        "ramp": opts.ramp,
    }


def _answer_tokenizer(opts: BenchOptions, info, choice, *, model: str, api_key: str | None):
    """--turns with token-id prompts: what turns an answer's text into the ids the next turn appends (the
    --tokenizer file, else the server's own /tokenize); None for text prompts, which append the text."""
    if not opts.turns or not choice.way.startswith("token_ids"):
        return None
    from kneecap.client.prompts import LocalTokenizer, ServerTokenizer

    if opts.tokenizer:
        return _LocalAnswerIds(LocalTokenizer(opts.tokenizer))
    tok = ServerTokenizer(info.base_url, model=model, api_key=api_key, engine=info.engine)
    try:
        tok.token_ids("hello")
    except KneecapError as exc:
        raise KneecapError(
            f"--turns with token-id prompts needs the answers' token ids: {exc.message}",
            "pass --tokenizer PATH/tokenizer.json (the served model's own)",
        ) from None
    return tok


class _LocalAnswerIds:
    """A local tokenizer's ids of an answer's text, without special tokens (picklable: the tokenizer is)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def token_ids(self, text: str) -> list[int]:
        return self.tokenizer._tok.encode(text, add_special_tokens=False).ids


PREFIX_HIT_SLACK = 0.1  # a level's prefix-cache hit rate this far above what the workload shares is warned about


def expected_prefix_hit_rate(opts: BenchOptions) -> float | None:
    """The share of prompt tokens the workload itself repeats (its shared prefixes), 0 when none; None when
    the workload repeats tokens on purpose in a share not known in advance (a trace's blocks, conversations)."""
    if opts.replay is not None or opts.turns:
        return None
    if not opts.shared_prefix_tokens or not opts.isl:
        return 0.0
    return min(1.0, opts.shared_prefix_tokens / opts.isl)


class _PrefixCacheWatch(ThreadedMetricsPoller):
    """A level's metrics poller that warns when the server found far more of the prompts in its
    prefix cache than the workload shares (prompts repeated from an earlier run, e.g. the same
    --prompt-salt, or a server that caches something kneecap did not ask for)."""

    def __init__(self, base_url: str, api_key: str | None, expected: float | None, progress):
        super().__init__(base_url, api_key)
        self._expected, self._progress = expected, progress

    def result(self) -> dict | None:
        out = super().result()
        rate = (out or {}).get("prefix_cache_hit_rate")
        if rate is not None and self._expected is not None and rate > self._expected + PREFIX_HIT_SLACK:
            out["prefix_cache_warning"] = (
                f"the server found {rate:.0%} of this level's prompt tokens in its prefix "
                f"cache; the workload shares {self._expected:.0%}"
            )
            self._progress.note(
                f"warning: {out['prefix_cache_warning']}: prompts repeated from an earlier run "
                "(same --prompt-salt?) make latencies look better than fresh traffic"
            )
        return out


def _metrics_poller(opts: BenchOptions, api_key: str | None, progress):
    """A factory of per-level /metrics pollers (each on its own thread and event loop)."""
    expected = expected_prefix_hit_rate(opts)
    return lambda: _PrefixCacheWatch(opts.base_url_clean, api_key, expected, progress)
