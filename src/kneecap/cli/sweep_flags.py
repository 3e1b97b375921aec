"""The workload and load options `kneecap bench` and `kneecap simulate` share, declared once: the same names,
types and help in both commands, parsed by the same functions (kneecap.workload.lengthspec for lengths), so
the same value gives the same checks and the same one-line errors in both.

A command takes each as the default of its parameter (`isl: Optional[str] = ISL`); a default the two commands
resolve differently (bench asks the server, the simulator has its own) is None here and said in show_default.
"""

from __future__ import annotations

import typer

from kneecap.cli.app import EXPORT_HELP
from kneecap.errors import KneecapError

LENGTH_FORMS = (
    "N, or a length distribution such as uniform:100:2000, normal:mean=1000,std=200, "
    "lognormal:mean=1000,std=300,max=4096, empirical:120,340,800"
)

ENDPOINT = typer.Option(
    None,
    "--endpoint",
    help="The API the requests come through: completions (/v1/completions, the prompt as sent) or chat "
    "(/v1/chat/completions). [simulate: the server prepares each request's chat template on its one event loop "
    "before the engine sees it, so requests sent together wait for each other; priced by engine release and model, "
    "e.g. vLLM 0.11.0 parses the template afresh for every request, about 11 ms for Qwen3's or DeepSeek-R1's on a "
    "2-core Xeon VM; later releases cache it]",
    show_default="completions",
)
ISL = typer.Option(
    None,
    "--isl",
    "--random-input-len",
    help=f"[bench: required with the random dataset] input tokens per request: {LENGTH_FORMS}",
    show_default="simulate: 1000",
)
OSL = typer.Option(
    None,
    "--osl",
    "--random-output-len",
    "--sharegpt-output-len",
    help="[bench: required, except with a dataset or --replay, whose data size the outputs] output "
    "tokens per request: N or a length distribution (as --isl); with a dataset it replaces the "
    "data's output lengths",
    show_default="simulate: 1000",
)
CONCURRENCY = typer.Option(
    None,
    "--concurrency",
    "--max-concurrency",
    help="closed-loop levels, e.g. 1,8,64 (simulate also: max, every request at once); "
    "with --find-max the lowest and highest load to search",
)
RATE = typer.Option(
    None,
    "--rate",
    "--request-rate",
    help="open-loop levels in requests/s, e.g. 1,2,4; with --find-max the lowest and highest rate to search",
)
SLO = typer.Option(None, "--slo", help="e.g. ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01")
GOODPUT = typer.Option(
    None,
    "--goodput",
    help="vLLM's per-request goodput objectives, KEY:VALUE in ms with KEY ttft, tpot or e2el (e.g. "
    "--goodput 'ttft:200 tpot:50'): a request is good when each of its own latencies is "
    "within its value; added to --slo as ttft_max_ms=200,tpot_max_ms=50",
)
FIND_MAX = typer.Option(
    None,
    "--find-max",
    help="concurrency or rate: search for the highest load meeting every --slo at steady state "
    "(doubling, then bisection); the answer, its bracket and the binding SLO term are "
    "summary.json's max_load",
)
UNTIL_STABLE = typer.Option(
    None,
    "--until-stable",
    help="with --concurrency and --duration S: end a level as soon as its p99 TTFT and ITL "
    "each "
    "moved less than this fraction (e.g. 0.05) over the last 3 windows of "
    "--stable-window-s and the level is stable by the steady-state rule every level is "
    "judged by (docs/metrics.md); S is then the longest a level runs; the verdict is the "
    "level's stable_p99 in summary.json",
)
REQUESTS = typer.Option(
    None,
    "--requests",
    "--num-prompts",
    help="measured requests per level (default: bench max(10, 4 x C) in closed loop, 30 s of arrivals in open "
    "loop; simulate max(100, 4 x C), 200 per rate level)",
)
DURATION = typer.Option(
    None,
    "--duration",
    help="seconds per level during which requests are sent, instead of --requests (simulate: virtual seconds)",
)
WARMUP = typer.Option(
    None, "--warmup", help="warmup requests per level (recorded, excluded from stats)", show_default="0"
)
SEED = typer.Option(
    None,
    "--seed",
    help="seed of lengths, prompts and arrivals: lengths drawn at sweep-unique request indices, level i's "
    "arrivals with seed + i",
    show_default="0",
)
BURSTINESS = typer.Option(
    None, "--burstiness", help="gamma shape of inter-arrival gaps: 1 Poisson, <1 burstier", show_default="1.0"
)
RAMP = typer.Option(
    None,
    "--ramp",
    help="KIND:START:END:SECONDS (KIND linear or exp): one level whose load moves from START to END over "
    "SECONDS, on the dimension given with --concurrency or --rate (any value there; simulate ramps the rate "
    "only and needs neither); metrics per tenth of it in summary.json's slices",
)
TURNS = typer.Option(
    None,
    "--turns",
    help="multi-turn: each of C users holds conversations of K turns; turn k sends turn k-1's prompt + the "
    "answer + --isl new tokens; --requests counts turns",
)
THINK_TIME_S = typer.Option(
    None,
    "--think-time-s",
    help="with --turns: seconds a user waits after an answer before its next turn",
    show_default="0",
)
STABLE_WINDOW_S = typer.Option(
    None, "--stable-window-s", help="with --until-stable: seconds per window", show_default="10"
)
REPEATS = typer.Option(
    1,
    "--repeats",
    help="with --find-max: a load passes only if it meets the SLO this many times (each with its own seed)",
)
DATASET = typer.Option(
    None,
    "--dataset",
    "--dataset-name",
    help="random, or sharegpt / jsonl with --dataset-path, or the PATH itself: ShareGPT JSON/JSONL or JSONL "
    "{prompt, output_len?}; prompts and their lengths from the data (input tokens counted by bench's "
    "--tokenizer, else estimated at 4 characters each), sampled with --seed, rows longer than the context "
    "left out; bench's records keep prompt hashes unless --keep-prompts",
    show_default="random",
)
DATASET_PATH = typer.Option(
    None, "--dataset-path", help="the dataset file (with --dataset sharegpt or jsonl, or alone)"
)
REPLAY = typer.Option(
    None,
    "--replay",
    help="a trace to replay: Mooncake or Qwen-Bailian JSONL, a BurstGPT CSV, or a Weka agentic conversation (.json, "
    "or a folder of them); requests at the trace's times, a session's next request after the answers it waits for, "
    "equal hash ids sent as equal token blocks so the prefix cache sees the reuse (docs/traces.md)",
)
REPLAY_SPEED = typer.Option(
    None,
    "--replay-speed",
    help="with --replay: how much faster than recorded, one level each, e.g. 1,2,4",
    show_default="1",
)
SKIP_TOO_LONG = typer.Option(
    False,
    "--skip-too-long",
    help="with --replay: leave out rows longer than the context (listed) instead of stopping",
)
EXPORT = typer.Option(None, "--export", help=EXPORT_HELP)
OUT = typer.Option(None, "--out", help="results folder (default ./kneecap-results/<command>-<UTC time>)")
JSON_OUT = typer.Option(False, "--json", help="print summary.json on stdout, nothing else")
QUIET = typer.Option(False, "--quiet", help="no progress display and no table")
NO_REPORT = typer.Option(False, "--no-report", help="do not render report.md / report.html into the folder")
SHARED_PREFIX = typer.Option(None, "--shared-prefix", help="TOKENS or TOKENSxGROUPS of prompt shared by requests")
PREFIX_HIT_RATE = typer.Option(
    None,
    "--prefix-hit-rate",
    help="synthetic prompts whose first F of their --isl tokens every request shares (one "
    "prefix), primed by one warmup request before each level, so a prefix cache "
    "finds about F of each prompt cached (0 < F < 1)",
)


def default(value, fallback):
    """A shared flag's value, or the command's own default where it was not given (show_default says which)."""
    return fallback if value is None else value


def prefix_flags(
    shared_prefix: str | None, hit_rate: float | None, isl: int | None, isl_dist: str | None, warmup: int | None
) -> tuple[int, int, int | None]:
    """(shared prefix tokens, prefix groups, warmup requests) from --shared-prefix or --prefix-hit-rate F: F x --isl
    tokens in one group, and at least one warmup request, which puts the prefix in the cache before the level."""
    from kneecap.sweep.options import parse_shared_prefix

    if hit_rate is None:
        tokens, groups = parse_shared_prefix(shared_prefix)
        return tokens, groups, warmup
    if shared_prefix is not None:
        raise KneecapError(
            "--prefix-hit-rate and --shared-prefix both given",
            "pass one: --prefix-hit-rate F shares the first F of every prompt",
        )
    if not (0 < hit_rate < 1):
        raise KneecapError(
            f"--prefix-hit-rate must be between 0 and 1, got {hit_rate}", "pass e.g. --prefix-hit-rate 0.5"
        )
    if isl is None or isl_dist is not None:
        raise KneecapError(
            "--prefix-hit-rate needs a fixed --isl (the share is of each prompt's tokens)",
            "pass e.g. --isl 2000 --prefix-hit-rate 0.5, or --shared-prefix TOKENS",
        )
    tokens = int(round(hit_rate * isl))
    if tokens < 1:
        raise KneecapError(
            f"--prefix-hit-rate {hit_rate} of {isl} tokens shares no token", "pass a larger rate or --isl"
        )
    return tokens, 1, max(1, warmup or 0)


def length_flag(flag: str, spec: str | None, default: int | None = None) -> tuple[int | None, str | None]:
    """--isl / --osl as both commands read it: (tokens, None) for N, (the mean rounded, the spec) for a length
    distribution; `default` tokens when the flag is absent."""
    from kneecap.workload.lengthspec import parse_length_flag

    n, dist = parse_length_flag(flag, spec)
    return (default, None) if n is None and spec is None else (n, dist)


def slo_flag(slo: str | None, goodput: list[str] | None) -> str | None:
    """--slo with --goodput's objectives added (kneecap.metrics.goodput), as both commands judge them."""
    if not goodput:
        return slo
    from kneecap.metrics.goodput import parse_goodput

    return ",".join(p for p in (slo, parse_goodput(goodput)) if p)


def check_find_max(find_max: str | None, kind: str, values, repeats: int) -> None:
    """--find-max searches the dimension of the levels given, between numeric bounds, each load --repeats times."""
    if find_max is None:
        return
    if find_max not in ("concurrency", "rate"):
        raise KneecapError(f"--find-max {find_max!r} is not a load dimension", f"pass --find-max {kind}")
    if find_max != kind:
        raise KneecapError(
            f"--find-max {find_max} searches the dimension of the levels given, which is {kind}",
            f"pass --find-max {kind}, or give --{find_max} LOW,HIGH",
        )
    if "max" in values:
        raise KneecapError("--find-max cannot search 'max'", "give numeric bounds, e.g. --concurrency 1,512")
    if repeats < 1:
        raise KneecapError(f"--repeats must be >= 1, got {repeats}", "pass e.g. --repeats 3")


def check_turns(turns: int | None) -> None:
    """--turns K names conversations of K >= 1 turns; 0 given on purpose is not 'one turn' silently."""
    if turns is not None and turns < 1:
        raise KneecapError(
            f"--turns must be a whole number >= 1, got {turns}",
            "pass e.g. --turns 3, or leave --turns out for single requests",
        )


def check_replay_alone(concurrency: str | None, rate: str | None) -> None:
    """--replay's levels are speeds of the trace: no --concurrency or --rate beside it."""
    if concurrency is not None or rate is not None:
        raise KneecapError(
            "--replay sends the trace's own requests at its own times",
            "drop --concurrency/--rate (use --replay-speed to scale the trace's times)",
        )


def ramp_flag(ramp: str):
    """--ramp: (the Ramp, its mean load over its SECONDS), the level's value on its dimension."""
    from kneecap.workload.ramps import parse_ramp

    r = parse_ramp(ramp)
    return r, r.expected_arrivals(r.duration_s) / r.duration_s
