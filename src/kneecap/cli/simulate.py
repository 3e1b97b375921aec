"""`kneecap simulate`: plan flags + sweep flags -> the simulated engine, level by level -> bench's summary.json.

Thin: builds the Deployment and Plan exactly as `kneecap plan` does (cli.plan.build_from_flags), so the
engine gets exactly plan.num_kv_blocks blocks; runs kneecap.sim.sweep per level; summarises with
kneecap.metrics; writes DIR/requests.jsonl, DIR/summary.json (no timestamps: byte-identical for the same
seed), DIR/manifest.json (the only file with a date) and, with --trace, DIR/trace.jsonl.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kneecap.cli.app import app
from kneecap.cli.plan import (PoolOpt, PresetOpt, ModelOpt, GpuOpt, TpOpt, PpOpt, WDtypeOpt, KvDtypeOpt, ParamsOpt, ContextOpt, BlockOpt, OverheadOpt, FragOpt, MemUtilOpt, HbmOpt)  # one definition of each plan flag
from kneecap.errors import KneecapError

DEFAULT_MAX_REQUESTS = 1000  # requests of a "max" (all at once) level when --requests is not given
# Bounds that keep one level's memory and time finite: every simulated request keeps one timestamp per
# output token until its level is summarised (~1 GB for 10,000 x 1,000 tokens), so a level holds at most
# MAX_REQUESTS_PER_LEVEL requests, and --duration is virtual seconds up to one virtual day.
MAX_REQUESTS_PER_LEVEL = 200_000
MAX_DURATION_S = 86_400.0
TRACE_FILE = "trace.jsonl"


def parse_levels(concurrency: str | None, rate: str | None) -> tuple[str, list]:
    """('concurrency', [1, 8, 'max']) or ('rate', [2.0, 4.0])."""
    from kneecap.workload import concurrency_levels

    if concurrency and rate:
        raise KneecapError("--concurrency and --rate both given", "pass one of them: closed loop or open loop")
    if rate:
        values = []
        for part in (p.strip() for p in rate.split(",") if p.strip()):
            try:
                value = float(part)
            except ValueError:
                raise KneecapError(f"--rate {rate!r} is not a list of numbers", "pass e.g. --rate 1,2,4") from None
            if not value > 0:
                raise KneecapError(f"--rate values must be > 0 requests/s, got {part}", "pass e.g. --rate 1,2,4")
            values.append(value)
        if not values:
            raise KneecapError("--rate is empty", "pass e.g. --rate 1,2,4")
        return "rate", values
    spec = concurrency or "1"
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    values: list = []
    for part in parts:
        values.append("max" if part.lower() == "max" else concurrency_levels(part)[0])
    if not values:
        raise KneecapError("--concurrency is empty", "pass e.g. --concurrency 1,8,64,max")
    return "concurrency", values


def parse_step_params(spec: str | None):
    """'mfu=0.4,bw_efficiency=0.7' or a JSON file ({"step_time": {...}} or a flat mapping) -> StepTimeParams."""
    import json
    from pathlib import Path

    from kneecap.sim.steptime import StepTimeParams

    if not spec:
        return StepTimeParams()
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise KneecapError(f"step-time file {spec} not found", "pass a JSON file or k=v pairs, e.g. mfu=0.4") from None
        except json.JSONDecodeError as exc:
            raise KneecapError(f"step-time file {spec} is not JSON ({exc.msg})", "fix the file") from None
        if isinstance(data, dict) and isinstance(data.get("step_time"), dict):
            data = data["step_time"]
        if not isinstance(data, dict):
            raise KneecapError(f"step-time file {spec} holds no mapping", 'write e.g. {"mfu": 0.4}')
        return StepTimeParams.from_dict(data)
    values = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key, sep, raw = part.partition("=")
        if not sep:
            raise KneecapError(f"--step-params item {part!r} is not key=value", "pass e.g. --step-params mfu=0.4,overhead_s=0.003")
        try:
            values[key.strip()] = None if raw.strip().lower() == "none" else float(raw)
        except ValueError:
            raise KneecapError(f"--step-params {key}={raw!r} is not a number", "pass e.g. mfu=0.4") from None
    if "activation_bytes" in values and values["activation_bytes"] is not None:
        values["activation_bytes"] = int(values["activation_bytes"])
    return StepTimeParams.from_dict(values)


def _sorted(obj):
    """Recursively key-sorted copy (summary bytes must not depend on insertion order)."""
    if isinstance(obj, dict):
        return {k: _sorted(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, list):
        return [_sorted(v) for v in obj]
    return obj


def _table(summary: dict):
    from rich.table import Table

    def ms(level, key, q):
        v = (level.get(key) or {}).get(q)
        return "—" if v is None else f"{v:,.1f}"

    kind = summary.get("load", "concurrency")
    knee = (summary.get("knee") or {}).get(kind)
    table = Table(title=f"kneecap simulate — {summary['deployment']['model']} on {summary['deployment']['num_gpus']}x "
                        f"{summary['deployment']['gpu']} (virtual time; no model executed)", title_justify="left")
    for header in ("C" if kind == "concurrency" else "rate (req/s)", "ok", "failed", "out tok/s", "TTFT p50 (ms)",
                   "TTFT p99 (ms)", "TPOT p50 (ms)", "ITL p99 (ms)", "preempt", "KV max %", "running max", "queue max", "notes"):
        table.add_column(header, justify="left" if header == "notes" else "right")
    for level in summary["levels"]:
        sm = level.get("server_metrics") or {}
        notes = []
        if knee is not None and level.get(kind) == knee:
            notes.append("knee")
        if sm.get("preemptions"):
            notes.append("KV pool exhausted")
        if level.get("errors"):
            notes.append(", ".join(f"{k}x{v}" for k, v in sorted(level["errors"].items())))
        out = level.get("output_tok_s")
        table.add_row(str(level.get(kind)), str(level.get("completed")), str(level.get("failed")),
                      "—" if out is None else f"{out:,.0f}", ms(level, "ttft_ms", "p50"), ms(level, "ttft_ms", "p99"),
                      ms(level, "tpot_ms", "p50"), ms(level, "itl_ms", "p99"), str(sm.get("preemptions", "—")),
                      f"{100 * sm['kv_usage_max']:.0f}" if sm.get("kv_usage_max") is not None else "—",
                      str(sm.get("running_max", "—")), str(sm.get("waiting_max", "—")), "; ".join(notes))
    stopped = summary.get("stopped")
    if stopped:
        table.caption = f"stopped at {stopped.get('at')}: {stopped.get('reason')}"
    return table


@app.command("simulate")
def simulate(
    preset: PresetOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    weight_dtype: WDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    params: ParamsOpt = None,
    context: ContextOpt = None,
    block_size: BlockOpt = None,
    overhead_gib: OverheadOpt = 4.0,
    frag: FragOpt = 0.05,
    mem_util: MemUtilOpt = None,
    hbm: HbmOpt = "datasheet",
    kv_pool_gib: PoolOpt = None,
    isl: int = typer.Option(1000, "--isl", help="Input tokens per request"),
    osl: int = typer.Option(1000, "--osl", help="Output tokens per request"),
    shared_prefix: Optional[str] = typer.Option(None, "--shared-prefix", help="TOKENS or TOKENSxGROUPS of prompt shared by requests"),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Closed-loop levels, e.g. 1,8,64,max (max: all at once)"),
    rate: Optional[str] = typer.Option(None, "--rate", help="Open-loop levels in requests/s, e.g. 1,2,4"),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape of inter-arrival gaps: 1 Poisson, <1 burstier"),
    requests: Optional[int] = typer.Option(None, "--requests", help="Measured requests per level (default max(100, 4 x C); 200 per rate level)"),
    duration: Optional[float] = typer.Option(None, "--duration", help="Virtual seconds per level during which requests are sent"),
    warmup: int = typer.Option(0, "--warmup", help="Warmup requests per level (recorded, excluded from stats)"),
    seed: int = typer.Option(0, "--seed", help="Seed of lengths and arrivals (level i uses seed + i, as bench)"),
    slo: Optional[str] = typer.Option(None, "--slo", help="e.g. ttft_p99_ms=500,itl_p99_ms=50"),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Sequences running at once (default: the engine's)"),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens", help="Tokens per step (default: the engine's)"),
    scheduler_delay_factor: Optional[float] = typer.Option(None, "--scheduler-delay-factor", help="vLLM V0's prompt batching delay: hold new prompts until the oldest waited X x the last prompt step (0 = off)"),
    engine_defaults: str = typer.Option("vllm", "--engine-defaults", help="vllm or sglang: whose scheduler defaults to mimic"),
    prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching", help="Prefix caching (default on, as both engines)"),
    calibration: Optional[str] = typer.Option(None, "--calibration", help="calib.json written by kneecap calibrate (same as --step-params FILE)"),
    step_params: Optional[str] = typer.Option(None, "--step-params", help="Step-time constants: k=v list (mfu=0.4,...) or a JSON file (e.g. from calibrate)"),
    out: Optional[str] = typer.Option(None, "--out", help="Results folder (default ./kneecap-results/simulate-<UTC time>)"),
    json_out: bool = typer.Option(False, "--json", help="Print summary.json on stdout, nothing else"),
    trace: bool = typer.Option(False, "--trace", help="Also write DIR/trace.jsonl: one line per engine step"),
    quiet: bool = typer.Option(False, "--quiet", help="No table"),
    no_report: bool = typer.Option(False, "--no-report", help="Do not render report.md / report.html into the folder"),
) -> int:
    """The same sweep as `kneecap bench`, on the simulated engine in virtual time (deterministic for a seed)."""
    from datetime import datetime, timezone
    from pathlib import Path

    import orjson

    from kneecap.cli.plan import PlanFlags, build_from_flags
    from kneecap.metrics.knee import find_knee
    from kneecap.metrics.slo import parse_slo
    from kneecap.metrics.stop import StopLimits, check_stop
    from kneecap.metrics.summarize import summarize_level
    from kneecap.results import ResultsDir, build_summary, current_argv
    from kneecap.sim.setup import engine_setup
    from kneecap.sim.sweep import LevelSpec, simulate_level
    from kneecap.workload import LengthDist, RequestClass, Workload

    kind, values = parse_levels(concurrency, rate)
    for flag, value in (("--isl", isl), ("--osl", osl)):
        if value < 1:
            raise KneecapError(f"{flag} must be >= 1, got {value}", f"pass e.g. {flag} 1000")
    if requests is not None and requests < 1:
        raise KneecapError(f"--requests must be >= 1, got {requests}", "pass e.g. --requests 200")
    if requests is not None and requests > MAX_REQUESTS_PER_LEVEL:
        raise KneecapError(f"--requests {requests:,} exceeds the simulator's {MAX_REQUESTS_PER_LEVEL:,} requests per level",
                           "simulate fewer requests per level (a level's statistics settle long before that)")
    if duration is not None and not (0 < duration <= MAX_DURATION_S):
        raise KneecapError(f"--duration must be between 0 and {MAX_DURATION_S:,.0f} virtual seconds, got {duration}",
                           "pass e.g. --duration 600, or --requests N")
    if requests is not None and duration is not None:
        raise KneecapError("--requests and --duration both given", "pass one of them")
    if "max" in values and duration is not None:
        raise KneecapError("--concurrency max sends a fixed batch; it cannot run for --duration", "pass --requests N")
    if burstiness <= 0:
        raise KneecapError(f"--burstiness must be > 0, got {burstiness}", "pass e.g. --burstiness 1 (Poisson)")
    prefix_tokens, prefix_groups = 0, 1
    if shared_prefix:
        from kneecap.bench.options import parse_shared_prefix

        prefix_tokens, prefix_groups = parse_shared_prefix(shared_prefix)
        if prefix_tokens >= isl:
            raise KneecapError(f"--shared-prefix {prefix_tokens} tokens is not shorter than --isl {isl}",
                               "use a prefix shorter than the prompt")
    slo_dict = parse_slo(slo) if slo else {}
    if calibration and step_params:
        raise KneecapError("--calibration and --step-params both given", "pass one of them")
    params_obj = parse_step_params(calibration or step_params)

    flags = PlanFlags(preset=preset, model=model, gpu=gpu, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      params=params, context=context, mean_context=None, block_size=block_size,
                      overhead_gib=overhead_gib, frag=frag, mem_util=mem_util, hbm=hbm, kv_pool_gib=kv_pool_gib)
    plan, _ = build_from_flags(flags)
    deployment = plan.deployment
    if isl + osl > plan.context:
        raise KneecapError(f"--isl + --osl = {isl + osl} tokens exceed the context of {plan.context}",
                           f"pass --context {isl + osl} or shorter lengths")
    setup = engine_setup(plan, defaults=engine_defaults, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens, prefix_caching=prefix_caching,
                         step_params=params_obj, charge_state=kv_pool_gib is None,
                         scheduler_delay_factor=scheduler_delay_factor)
    config = setup.config
    workload = Workload(classes=(RequestClass(input=LengthDist.fixed(isl), output=LengthDist.fixed(osl),
                                              shared_prefix_tokens=prefix_tokens, num_prefix_groups=prefix_groups),))

    results = ResultsDir(Path(out) if out else Path("kneecap-results") /
                         f"simulate-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}")
    results.write_manifest(current_argv(), extra={"kind": "simulate", "seed": seed})
    trace_path = results.path / TRACE_FILE
    if trace and trace_path.exists():
        trace_path.unlink()
    if results.records_path.exists():
        results.records_path.unlink()  # a simulation is re-run, never resumed: start the records afresh
    limits = StopLimits(slo=slo_dict)
    levels: list[dict] = []
    knee = stopped = None
    doc_base = dict(
        load=kind, seed=seed, status="running", **setup.describe(),
        workload={"isl": isl, "osl": osl, "shared_prefix_tokens": prefix_tokens, "num_prefix_groups": prefix_groups,
                  "burstiness": burstiness if kind == "rate" else None},
    )

    def document(status: str) -> dict:
        return _sorted(build_summary("simulate", levels, knee, stopped, model_executed=False, benchmark_executed=False,
                                     **dict(doc_base, status=status)))

    with results.open_writer() as writer:
        for index, value in enumerate(values):
            if kind == "rate":
                n = requests if requests is not None else (None if duration is not None else 200)
                spec = LevelSpec(rate=value, num_requests=n, duration_s=duration, warmup=warmup)
            elif value == "max":
                spec = LevelSpec(all_at_once=True, num_requests=requests or DEFAULT_MAX_REQUESTS, warmup=warmup)
            else:
                n = requests if requests is not None else (None if duration is not None else max(100, 4 * value))
                spec = LevelSpec(concurrency=value, num_requests=n, duration_s=duration, warmup=warmup)
            if spec.concurrency is not None and spec.num_requests is not None and spec.num_requests < spec.concurrency:
                print(f"warning: C={spec.concurrency} with only {spec.num_requests} requests never reaches its concurrency; "
                      f"pass --requests >= {spec.concurrency}", file=sys.stderr)
            result = simulate_level(deployment, config, plan.num_kv_blocks, workload, spec, index=index,
                                    seed=seed + index, burstiness=burstiness, steptime=setup.steptime, trace=trace,
                                    charge_state=setup.charge_state)
            for record in result.records:
                writer.write(record)
            writer.sync()
            if trace:
                with open(trace_path, "ab") as fh:
                    fh.write(b"".join(orjson.dumps(row) + b"\n" for row in result.trace))
            summary = summarize_level(result.records, **{kind: value}, slo=slo_dict or None)
            summary["level"] = index
            summary["server_metrics"] = result.server_metrics
            levels.append(summary)
            knee = find_knee(levels, kind)
            stopped = check_stop(levels, limits)
            results.write_summary(document("running"))
            if stopped:
                break
    final = document("stopped" if stopped else "complete")
    results.write_summary(final)
    if not no_report:
        from kneecap.report import render_report_or_warn

        render_report_or_warn(results.path)
    if json_out:
        sys.stdout.write(orjson.dumps(final).decode() + "\n")
    elif not quiet:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(_table(final))
        console.print(f"results: {results.path}")
    return 0
